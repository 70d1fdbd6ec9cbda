"""A task cancelled while it writes to the cluster ends (apexmesh/store/cancellable.py):
on Python 3.11 redis-py's ``wait_for``-bounded write lost the cancellation, and the task
went on with its next command."""

from __future__ import annotations

import uuid

import pytest
from redis.asyncio import Redis

from apexmesh.store.connection import dedicated_client
from tests.support.cancelling import turns_going_on

pytestmark = pytest.mark.integration

#: Writers cancelled, each after one more turn of the event loop than the one before:
#: the cancellations land at every point of a few round trips, the instant a write has
#: just finished among them (before the fix, 197 of 300 writers cancelled at random
#: moments went on).
WRITERS = 200


async def _cancelled_writers_going_on(redis: Redis) -> list[int]:
    key = f"cancel-{uuid.uuid4().hex[:8]}"
    return await turns_going_on(lambda: redis.incr(key), WRITERS, limit=3)


async def test_a_writer_cancelled_at_any_turn_of_the_loop_ends(redis: Redis) -> None:
    assert await _cancelled_writers_going_on(redis) == []


async def test_a_dedicated_client_keeps_the_cancellation_too(redis: Redis) -> None:
    follower = dedicated_client(redis)
    try:
        assert await _cancelled_writers_going_on(follower) == []
    finally:
        await follower.aclose()
