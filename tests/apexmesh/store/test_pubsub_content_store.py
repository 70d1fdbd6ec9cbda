"""Content-based subscriptions in the store and the pod's cache (real redis-server): the
v2 event fields, several subscriptions of one subscriber to one topic, the subscriber
index of 5.8.2's cancels, lease ends by id, a topic's schemas in its record, ids unique
per subscriber, the per-topic selector index kept current by the event stream with
identical selectors compiled once, and cached messages by revision."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.core import (
    Subscribed,
    Subscription,
    TopicCreated,
    TopicDeleted,
    Unsubscribed,
)
from apexmesh.pubsub.schema import LocalSchemas, SchemaCache
from apexmesh.pubsub.selection.registry import default_classes
from apexmesh.pubsub.selection.types import MessageView
from apexmesh.pubsub.topic_index import SelectorCompiler, TopicIndex
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import EVENT_FIELDS, PubsubStore
from apexmesh.store.pubsub_cache import SubscriberCache
from apexmesh.store.pubsub_messages import MessageStore, StoredMessage
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration

DOMAIN = "example.com"
TOPIC = "equity.quote.service"
JADE = Endpoint.parse("jade@example.com")
FRED = Endpoint.parse("fred@example.com")
NOW = 1_700_000_000_000
SETTINGS = '{"message_schema":{"uri":"http://www.example.com/schema/service.xsd"}}'


def content(who: Endpoint, sid: int, selector: str, expires: int = NOW + 60_000) -> Subscription:
    return Subscription(
        topic=TOPIC,
        subscriber=who,
        originator=who,
        trans_id=700 + sid,
        expires_ms=expires,
        subscription_id=sid,
        selector_class="JMS",
        selector=selector,
        cached=sid % 2 == 0,
    )


async def created(store: PubsubStore) -> None:
    change = TopicCreated(TOPIC, JADE, SETTINGS)
    assert await store.commit(DOMAIN, TOPIC, None, [change], [], NOW) is not None


async def test_content_subscriptions_events_and_index(redis: Redis, keys: Keys) -> None:
    store = PubsubStore(redis, keys, "pod-a")
    await created(store)
    first = content(JADE, 1, "symbol = 'XMPL'")
    second = content(JADE, 2, "net-change-pct > 5")
    plain = Subscription(
        topic=TOPIC, subscriber=JADE, originator=JADE, trans_id=9, expires_ms=NOW + 60_000
    )
    changes = [Subscribed(first, False), Subscribed(second, False), Subscribed(plain, False)]
    assert await store.commit(DOMAIN, TOPIC, None, changes, [], NOW) is not None
    view = await store.read_topic(DOMAIN, TOPIC)
    assert view.settings == SETTINGS
    assert view.subscriptions == {JADE: plain}
    assert set(view.content) == {first, second}
    assert set(await store.subject_subscriptions(DOMAIN, JADE)) == {first, second}
    assert await store.subject_subscriptions(DOMAIN, JADE, "other.topic") == []
    await store.commit(DOMAIN, TOPIC, None, [Unsubscribed(TOPIC, JADE, "cancel", JADE, 1)], [], NOW)
    assert await store.subject_subscriptions(DOMAIN, JADE) == [second]
    events = await store.events()
    for event in events:
        assert tuple(sorted(event)) == tuple(sorted(EVENT_FIELDS))
        assert event["v"] == "2"
    created_event, made1, made2, made_plain, ended = events
    assert created_event["settings"] == SETTINGS
    assert (made1["subscription_id"], made1["selector_class"], made1["selector"]) == (
        "1",
        "JMS",
        "symbol = 'XMPL'",
    )
    assert (made1["cached"], made2["cached"]) == ("", "1")
    assert made_plain["subscription_id"] == made_plain["selector"] == ""
    assert (ended["type"], ended["subscription_id"], ended["reason"]) == (
        "subscription.ended",
        "1",
        "cancel",
    )


async def test_the_subscriber_index_lists_plain_subscriptions_too(redis: Redis, keys: Keys) -> None:
    """5.8.2's cancels naming no topic cover the subject's plain subscriptions: the index
    lists them (id empty), and every way a plain subscription ends removes its entry
    (cancel, lease end, topic deletion)."""
    store = PubsubStore(redis, keys, "pod-a")
    await created(store)
    other = "other.topic"
    assert await store.commit(DOMAIN, other, None, [TopicCreated(other, JADE)], [], NOW) == []

    def plain(topic: str, expires: int = NOW + 60_000) -> Subscription:
        return Subscription(
            topic=topic, subscriber=JADE, originator=JADE, trans_id=9, expires_ms=expires
        )

    tagged = content(JADE, 1, "symbol = 'XMPL'")
    changes = [Subscribed(plain(TOPIC), False), Subscribed(tagged, False)]
    assert await store.commit(DOMAIN, TOPIC, None, changes, [], NOW) is not None
    short = plain(other, NOW + 5)
    assert await store.commit(DOMAIN, other, None, [Subscribed(short, False)], [], NOW) == []
    assert await store.subject_subscriptions(DOMAIN, JADE) == [tagged]  # content only
    everything = set(await store.subject_subscriptions(DOMAIN, JADE, plain=True))
    assert everything == {plain(TOPIC), tagged, short}
    assert await store.subject_subscriptions(DOMAIN, JADE, other, plain=True) == [short]
    # A lease end removes the plain one's entry ...
    (entry,) = await store.claim_expired(DOMAIN, NOW + 10)
    assert (entry.fields["topic"], entry.fields["subscription_id"]) == (other, "")
    subject = keys.pubsub_subject(DOMAIN, str(JADE))
    assert set(await redis.hkeys(subject)) == {f"{TOPIC}\n".encode(), f"{TOPIC}\n1".encode()}
    # ... so does a cancel, and the topic's deletion ends the rest.
    await store.commit(DOMAIN, TOPIC, None, [Unsubscribed(TOPIC, JADE, "cancel", JADE)], [], NOW)
    assert await store.subject_subscriptions(DOMAIN, JADE, plain=True) == [tagged]
    gone = Unsubscribed(TOPIC, JADE, "topic-deleted", JADE, 1)
    await store.commit(DOMAIN, TOPIC, None, [gone], [], NOW)
    assert await redis.exists(subject) == 0


async def test_a_content_lease_ends_by_its_id(redis: Redis, keys: Keys) -> None:
    store = PubsubStore(redis, keys, "pod-a")
    await created(store)
    short = content(JADE, 3, "symbol = 'XMPL'", expires=NOW + 5)
    long = content(JADE, 4, "symbol = 'TEST'")
    await store.commit(
        DOMAIN, TOPIC, None, [Subscribed(short, False), Subscribed(long, False)], [], NOW
    )
    (entry,) = await store.claim_expired(DOMAIN, NOW + 10)
    assert (entry.kind, entry.fields["subscriber"], entry.fields["subscription_id"]) == (
        "expired",
        str(JADE),
        "3",
    )
    assert await store.subject_subscriptions(DOMAIN, JADE) == [long]
    ended = (await store.events())[-1]
    assert tuple(sorted(ended)) == tuple(sorted(EVENT_FIELDS))
    assert (ended["v"], ended["type"], ended["reason"]) == ("2", "subscription.ended", "expired")
    assert (ended["subscriber"], ended["subscription_id"], ended["selector"]) == (
        str(JADE),
        "3",
        "symbol = 'XMPL'",
    )


async def test_subscription_ids_are_unique_per_subscriber(redis: Redis, keys: Keys) -> None:
    store = PubsubStore(redis, keys, "pod-a")
    other = PubsubStore(redis, keys, "pod-b")
    ids = await asyncio.gather(
        *(s.new_subscription_id(DOMAIN, JADE) for s in (store, other) for _ in range(50))
    )
    assert sorted(ids) == list(range(1, 101))
    assert await store.new_subscription_id(DOMAIN, FRED) == 1
    assert await store.new_subscription_id("other.com", JADE) == 1


@pytest.fixture
async def cache(redis: Redis, keys: Keys) -> AsyncIterator[SubscriberCache]:
    subscribers = SubscriberCache(redis, keys, clock=lambda: NOW)
    await subscribers.start()
    try:
        yield subscribers
    finally:
        await subscribers.aclose()


async def test_the_index_follows_the_event_stream(
    redis: Redis, keys: Keys, cache: SubscriberCache
) -> None:
    store = PubsubStore(redis, keys, "pod-a")
    await store.commit(DOMAIN, TOPIC, None, [TopicCreated(TOPIC, JADE)], [], NOW)
    same = "symbol = 'XMPL'"
    await store.commit(
        DOMAIN,
        TOPIC,
        None,
        [Subscribed(content(JADE, 1, same), False), Subscribed(content(FRED, 1, same), False)],
        [],
        NOW,
    )
    state = await cache.topic(DOMAIN, TOPIC)
    compiler = SelectorCompiler(default_classes(), SchemaCache(LocalSchemas()))
    schemas = compiler.topic_schemas(DOMAIN, TOPIC, state.settings)
    state.index = TopicIndex.build(
        TOPIC, state.settings, schemas, compiler, state.subscriptions.values()
    )
    assert compiler.compilations == 1  # two subscriptions, one selector
    xmpl = MessageView.of_values({"symbol": ["XMPL"], "net-change-pct": ["7"]})
    assert state.index.matcher.match(xmpl) == {(JADE, 1), (FRED, 1)}
    # Another pod's changes reach the index through the event log.
    await store.commit(
        DOMAIN,
        TOPIC,
        None,
        [
            Unsubscribed(TOPIC, FRED, "cancel", FRED, 1),
            Subscribed(content(JADE, 2, "net-change-pct > 5"), False),
        ],
        [],
        NOW,
    )
    await wait_until(
        lambda: state.index.matcher.match(xmpl) == {(JADE, 1), (JADE, 2)},
        what="the other pod's change in the index",
    )
    loads = cache.loads
    assert (await cache.topic(DOMAIN, TOPIC)).index is state.index
    assert cache.loads == loads  # no reload: kept current, never re-read


async def test_cached_messages_keep_the_highest_revision(redis: Redis, keys: Keys) -> None:
    messages = MessageStore(redis, keys)
    publisher = "quote-service@example.com"
    assert await messages.put(DOMAIN, TOPIC, publisher, 7, StoredMessage(b"<r0/>", None, 0))
    assert await messages.put(DOMAIN, TOPIC, publisher, 7, StoredMessage(b"<r2/>", None, 2))
    assert not await messages.put(DOMAIN, TOPIC, publisher, 7, StoredMessage(b"<r1/>", None, 1))
    assert await messages.revision(DOMAIN, TOPIC, publisher, 7) == 2
    assert await messages.put(DOMAIN, TOPIC, publisher, 8, StoredMessage(b"<old/>", NOW, 0))
    live = await messages.live(DOMAIN, TOPIC, NOW)
    assert [m.body for m in live] == [b"<r2/>"]
    assert await messages.revision(DOMAIN, TOPIC, publisher, 8) is None  # expired: removed


async def test_a_topic_deleted_takes_its_cached_messages_in_the_same_commit(
    redis: Redis, keys: Keys
) -> None:
    store = PubsubStore(redis, keys, "pod-a")
    await created(store)
    messages = MessageStore(redis, keys)
    assert await messages.put(DOMAIN, TOPIC, "p", 1, StoredMessage(b"<m/>", None, 0))
    await store.commit(DOMAIN, TOPIC, None, [TopicDeleted(TOPIC, JADE)], [], NOW)
    assert await messages.live(DOMAIN, TOPIC, NOW) == []
    assert await redis.exists(keys.pubsub_cached(DOMAIN, TOPIC)) == 0
