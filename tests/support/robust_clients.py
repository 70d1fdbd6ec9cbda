"""What the robust tests over a running mesh share (tests/system, tests/services/pubsub)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from apexmesh.client.robust import RobustClient


async def warm_up(
    publisher: RobustClient, subscriber: RobustClient, topic: str, *, attempts: int = 30
) -> None:
    """Publish until one publication reaches ``subscriber``: from then on every pod's
    subscriber cache has her subscription, so every later publication numbers her link
    (a test that counts publications starts after this)."""
    for attempt in range(attempts):
        await publisher.publish(topic, f"warm {attempt}".encode())
        with contextlib.suppress(TimeoutError):
            first = await asyncio.wait_for(subscriber.next(), timeout=1.0)
            assert first.payload.startswith(b"warm")
            return
    pytest.fail("the subscriber never received a warm-up publication")
