"""Section 4, "in-progress operations in persistent storage": work a pod journalled with
its change and never did (the pod died) is done by the domain's leader, end to end."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis

from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.core import Subscribed, Subscription, TopicCreated
from apexmesh.pubsub.elements import Cancel
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import JournalKind, PubsubStore, new_entry
from tests.services.pubsub.conftest import Attach, PubsubMesh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def test_a_dead_pods_journal_is_done_by_the_leader(
    mesh: PubsubMesh, attach: Attach, redis: Redis, keys: Keys
) -> None:
    mike = await attach("mike@example.com", pod="a")
    # A pod "ghost" (never alive: its lease key does not exist) committed a subscription
    # for mike and journalled its reply, then died before sending it.
    ghost = PubsubStore(redis, keys, "ghost")
    now = int(time.time() * 1000)
    who = Endpoint.parse("mike@example.com")
    reply = new_entry(
        JournalKind.SEND,
        origin="apex=pubsub@example.com",
        recipient=str(who),
        content=Reply(code=250, trans_id=77).to_xml().hex(),
    )
    lease = Subscription(
        topic="news", subscriber=who, originator=who, trans_id=77, expires_ms=now + 1500
    )
    done = await ghost.commit(
        "example.com",
        "news",
        None,
        [TopicCreated("news", who), Subscribed(lease, renewed=False)],
        [reply],
        now,
    )
    assert done is not None
    # The leader redoes the reply; later the lease ends with one cancel.
    assert await mike.message(within=10) == Reply(code=250, trans_id=77)
    assert await mike.message(within=10) == Cancel(topic="news", trans_id=77, subscriber=who)
    await asyncio.sleep(0.5)
    assert await ghost.orphans("example.com", now + 60_000, retry_after_ms=10**9) == []
