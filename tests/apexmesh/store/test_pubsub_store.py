"""The pubsub store against a real redis-server: commits are atomic and versioned, the
event log has its stable schema, leases end once, the journal survives its pod."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub import core
from apexmesh.pubsub.core import Subscribed, Subscription, TopicCreated, TupleAdded, Unsubscribed
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import EVENT_FIELDS, JournalEntry, JournalKind, PubsubStore, new_entry

pytestmark = pytest.mark.integration

DOMAIN = "example.com"
TOPIC = "music.jazz"
MIKE = Endpoint.parse("mike@example.com")
NOW = 1_700_000_000_000


def sub(who: Endpoint, expires: int) -> Subscription:
    return Subscription(topic=TOPIC, subscriber=who, originator=who, trans_id=7, expires_ms=expires)


async def _create(store: PubsubStore) -> None:
    view = await store.read_topic(DOMAIN, TOPIC)
    done = await store.commit(
        DOMAIN, TOPIC, view.version, [TopicCreated(TOPIC, MIKE), TupleAdded(TOPIC)], [], NOW
    )
    assert done is not None
    assert [e.kind for e in done] == ["presence"]


async def test_topics_subscriptions_and_versions(redis: Redis, keys: Keys) -> None:
    store = PubsubStore(redis, keys, "pod-a")
    assert not (await store.read_topic(DOMAIN, TOPIC)).exists
    await _create(store)
    assert await store.topics(DOMAIN) == [TOPIC]
    assert await store.topics("other.com") == []
    view = await store.read_topic(DOMAIN, TOPIC)
    assert view.exists
    stale = view.version - 1
    # A decision taken on an old read is refused: the caller re-reads.
    assert (
        await store.commit(DOMAIN, TOPIC, stale, [Subscribed(sub(MIKE, NOW + 5), False)], [], NOW)
        is None
    )
    assert (await store.read_topic(DOMAIN, TOPIC)).subscriptions == {}
    reply = new_entry(JournalKind.SEND, recipient=str(MIKE), content="00")
    entries = await store.commit(
        DOMAIN, TOPIC, view.version, [Subscribed(sub(MIKE, NOW + 5), False)], [reply], NOW
    )
    assert entries == [reply]
    view = await store.read_topic(DOMAIN, TOPIC)
    assert view.subscriptions == {MIKE: sub(MIKE, NOW + 5)}
    assert await store.next_expiry(DOMAIN) == NOW + 5
    entries = await store.orphans(DOMAIN, NOW + 10**6, retry_after_ms=1)
    # The journal: the reply and the topic's presence tuple.
    assert sorted(e.kind for e in entries) == ["presence", "send"]
    assert reply.id in {e.id for e in entries}


async def test_read_topic_can_read_only_some_subscriptions(redis: Redis, keys: Keys) -> None:
    store = PubsubStore(redis, keys, "pod-a")
    await _create(store)
    fred = Endpoint.parse("fred@example.com")
    nobody = Endpoint.parse("nobody@example.com")
    view = await store.read_topic(DOMAIN, TOPIC)
    changes = [Subscribed(sub(MIKE, NOW + 5), False), Subscribed(sub(fred, NOW + 6), False)]
    assert await store.commit(DOMAIN, TOPIC, view.version, changes, [], NOW) is not None
    whole = await store.read_topic(DOMAIN, TOPIC)
    assert set(whole.subscriptions) == {MIKE, fred}
    some = await store.read_topic(DOMAIN, TOPIC, (fred, nobody))
    assert (some.exists, some.version) == (whole.exists, whole.version)
    assert some.subscriptions == {fred: sub(fred, NOW + 6)}
    none = await store.read_topic(DOMAIN, TOPIC, ())
    assert (none.exists, none.version, none.subscriptions) == (True, whole.version, {})
    assert not (await store.read_topic(DOMAIN, "no.such", (fred,))).exists


async def test_event_log_schema(redis: Redis, keys: Keys) -> None:
    store = PubsubStore(redis, keys, "pod-a")
    await _create(store)
    view = await store.read_topic(DOMAIN, TOPIC)
    await store.commit(DOMAIN, TOPIC, None, [Subscribed(sub(MIKE, NOW + 5), False)], [], NOW)
    await store.commit(DOMAIN, TOPIC, None, [Subscribed(sub(MIKE, NOW + 9), True)], [], NOW)
    await store.commit(DOMAIN, TOPIC, None, [Unsubscribed(TOPIC, MIKE, "cancel", MIKE)], [], NOW)
    assert view.exists
    events = await store.events()
    assert [e["type"] for e in events] == [
        "topic.created",
        "subscription.created",
        "subscription.renewed",
        "subscription.ended",
    ]
    for event in events:
        assert tuple(sorted(event)) == tuple(sorted(EVENT_FIELDS))
        assert event["v"] == "2"
        assert event["domain"] == DOMAIN
        assert event["topic"] == TOPIC
        assert event["pod"] == "pod-a"
    assert events[2]["expires_ms"] == str(NOW + 9)
    assert events[3]["reason"] == "cancel"


async def test_leases_end_once_across_pods(redis: Redis, keys: Keys) -> None:
    a = PubsubStore(redis, keys, "pod-a")
    b = PubsubStore(redis, keys, "pod-b")
    await _create(a)
    people = [Endpoint.parse(f"user{i}@example.com") for i in range(50)]
    await a.commit(
        DOMAIN,
        TOPIC,
        None,
        [Subscribed(sub(p, NOW + i), False) for i, p in enumerate(people)],
        [],
        NOW,
    )
    # One renewed past the claim time is not ended.
    await a.commit(DOMAIN, TOPIC, None, [Subscribed(sub(people[0], NOW + 10**6), True)], [], NOW)
    claims = await asyncio.gather(
        *(s.claim_expired(DOMAIN, NOW + 100, limit=20) for s in (a, b, a, b))
    )
    ended = [e for batch in claims for e in batch]
    ended += await a.claim_expired(DOMAIN, NOW + 100)
    subjects = [e.fields["subscriber"] for e in ended]
    assert sorted(subjects) == sorted(str(p) for p in people[1:])
    assert all(e.kind == "expired" and e.fields["trans_id"] == "7" for e in ended)
    view = await a.read_topic(DOMAIN, TOPIC)
    assert list(view.subscriptions) == [people[0]]
    assert await a.next_expiry(DOMAIN) == NOW + 10**6
    ends = [e for e in await a.events() if e["reason"] == "expired"]
    assert len(ends) == 49


async def test_journal_of_a_dead_pod_is_taken_over(redis: Redis, keys: Keys) -> None:
    a = PubsubStore(redis, keys, "pod-a")
    b = PubsubStore(redis, keys, "pod-b")
    await a.heartbeat(60_000)
    await b.heartbeat(60_000)
    await _create(a)
    work = new_entry(JournalKind.SEND, recipient=str(MIKE), content="3c6f6b2f3e")
    await a.commit(DOMAIN, TOPIC, None, [], [work], NOW)
    # pod-a lives: its fresh entries are its own.
    assert [e.id for e in await b.orphans(DOMAIN, NOW + 1, retry_after_ms=10_000)] == []
    await a.leave()
    taken = await b.orphans(DOMAIN, NOW + 1, retry_after_ms=10_000)
    assert {e.id for e in taken} >= {work.id}
    again = await a.orphans(DOMAIN, NOW + 2, retry_after_ms=10_000)
    assert work.id not in {e.id for e in again}  # now pod-b's, and pod-b lives
    await b.done(DOMAIN, *(e.id for e in taken))
    assert await b.orphans(DOMAIN, NOW + 10**7, retry_after_ms=1) == []


async def test_one_leader(redis: Redis, keys: Keys) -> None:
    a = PubsubStore(redis, keys, "pod-a")
    b = PubsubStore(redis, keys, "pod-b")
    assert await a.lead(DOMAIN, 60_000)
    assert not await b.lead(DOMAIN, 60_000)
    assert await a.lead(DOMAIN, 60_000)
    await b.resign(DOMAIN)  # not the holder: nothing happens
    assert not await b.lead(DOMAIN, 60_000)
    assert await b.lead("other.com", 60_000)  # one leader per domain
    await a.resign(DOMAIN)
    assert await b.lead(DOMAIN, 60_000)


def test_journal_entries_round_trip() -> None:
    entry = JournalEntry("x", "send", {"recipient": "a@b.c"})
    back = JournalEntry.decode("x", entry.encode("pod", 5))
    assert back.kind == "send"
    assert back.fields["recipient"] == "a@b.c"
    assert back.fields["at_ms"] == "5"


def test_core_outcome_fits_the_store() -> None:
    assert core.DEFAULT_HOPS > 1


async def test_counts_are_the_domains_topics_and_subscriptions(redis: Redis, keys: Keys) -> None:
    """What the leader's gauges read every second: counted in Redis, per domain."""
    store = PubsubStore(redis, keys, "pod-a")
    await _create(store)
    other = [TopicCreated("elsewhere", MIKE)]
    assert await store.commit("other.com", "elsewhere", None, other, [], NOW) is not None
    bob = Endpoint.parse("bob@example.com")
    subs = [Subscribed(sub(MIKE, NOW + 5), False), Subscribed(sub(bob, NOW + 9), False)]
    assert await store.commit(DOMAIN, TOPIC, None, subs, [], NOW) is not None
    assert await store.counts(DOMAIN) == (1, 2)
    assert await store.counts("other.com") == (1, 0)
    await store.claim_expired(DOMAIN, NOW + 5)
    assert await store.counts(DOMAIN) == (1, 1)
