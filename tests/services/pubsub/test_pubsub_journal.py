"""Section 4, "in-progress operations in persistent storage": work a pod journalled with
its change and never did (the pod died) is done by the domain's leader, end to end."""

from __future__ import annotations

import time

import pytest
from redis.asyncio import Redis

from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.core import Subscribed, Subscription, TopicCreated
from apexmesh.pubsub.elements import Cancel
from apexmesh.pubsub.topic_description import TopicDescription
from apexmesh.pubsub.wkt import SUBSCRIPTIONS, TOPICS
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import JournalKind, PubsubStore, new_entry
from tests.services.pubsub.conftest import Attach, PubsubMesh, until
from tests.support.polling import wait_until

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

    async def no_orphans() -> bool:
        return await ghost.orphans("example.com", now + 60_000, retry_after_ms=10**9) == []

    await wait_until(no_orphans, within=10, what="the ghost's journal done")


async def test_a_dead_pods_announcements_are_published_by_the_leader(
    mesh: PubsubMesh, attach: Attach, redis: Redis, keys: Keys
) -> None:
    """Draft-wyman 6.2.2 and 6.3: an announcement on a well-known topic is committed with
    the change it announces (a journal entry, like the reply), so a pod dying between
    the commit and the publication leaves it to the leader, which publishes it."""
    jade = await attach("jade@example.com", pod="a")
    topics = await jade.pubsub.select(TOPICS, duration=600)
    records = await jade.pubsub.select(SUBSCRIPTIONS, duration=600)
    # "ghost" (never alive) created a topic and made a content subscription for jade,
    # each with its announcement built as the service builds it, and died.
    ghost = PubsubStore(redis, keys, "ghost")
    well_known = mesh.pubsub["p1"].service.well_known
    who = Endpoint.parse("jade@example.com")
    now = int(time.time() * 1000)
    view = await ghost.read_topic("example.com", "news")
    created = TopicCreated("news", who)
    topic_news = well_known.topic_announcement(
        "example.com", "news", TopicDescription(), version=view.version + 1, cancelled=False
    )
    changes = [created, topic_news]
    journalled = await ghost.commit("example.com", "news", view.version, changes, [], now)
    assert journalled is not None
    sub = Subscription(
        topic="news",
        subscriber=who,
        originator=who,
        trans_id=8,
        expires_ms=now + 600_000,
        subscription_id=41,
        selector_class="JMS",
        selector="x > 1",
    )
    record = well_known.subscription_announcement("example.com", sub, status="ACTIVE", duration=600)
    assert record is not None
    made = Subscribed(sub, renewed=False)
    more = await ghost.commit("example.com", "news", None, [made, record], [], now)
    assert more is not None
    journalled += more
    assert [entry.kind for entry in journalled] == [JournalKind.ANNOUNCE] * 2
    # The leader publishes both: jade's subscription to each topic receives its message.
    got: dict[str, bytes] = {}
    for _ in range(2):
        topic, ids, received = await jade.pubsub.next_match()
        assert ids == ((topics,) if topic == TOPICS else (records,))
        got[topic] = received.content
    assert b"<topic-name>news</topic-name>" in got[TOPICS]
    assert b"<disposition>publish</disposition>" in got[TOPICS]
    assert b"<subscription-id>41</subscription-id>" in got[SUBSCRIPTIONS]
    assert b"<current-status>ACTIVE</current-status>" in got[SUBSCRIPTIONS]

    async def journal_empty() -> bool:
        return not await ghost.pending("example.com")

    await until(journal_empty, within=10)
