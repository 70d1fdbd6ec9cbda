"""The pubsub pod's subscriber cache: loaded once, kept current by the event log, correct
under concurrent changes, and no Redis round trip for what it knows."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

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
from apexmesh.store.batching import Coalescer
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import PubsubStore
from apexmesh.store.pubsub_cache import (
    SubscriberCache,
    TopicState,
    apply_event,
    state_from_items,
)
from tests.support.polling import wait_until
from tests.support.redis_cluster import every_node

_T = TypeVar("_T")

DOMAIN = "example.com"
MIKE = Endpoint.parse("mike@example.com")
BOB = Endpoint.parse("bob@example.com")
NOW = 1_700_000_000_000


def sub(topic: str, who: Endpoint, expires: int = NOW + 60_000) -> Subscription:
    return Subscription(topic=topic, subscriber=who, originator=who, trans_id=7, expires_ms=expires)


def subscribed(topic: str, who: Endpoint, expires: int = NOW + 60_000) -> dict[str, str]:
    return {
        "v": "1",
        "type": "subscription.created",
        "domain": DOMAIN,
        "topic": topic,
        "subscriber": str(who),
        "originator": str(who),
        "trans_id": "7",
        "expires_ms": str(expires),
    }


async def eventually(
    probe: Callable[[], Awaitable[_T]], check: Callable[[_T], object], within: float = 5.0
) -> None:
    """Return once ``check(await probe())`` holds; TimeoutError after ``within`` s
    (scaled)."""

    async def holds() -> bool:
        return bool(check(await probe()))

    await wait_until(holds, within, what=f"{check} of {probe}")


# --------------------------------------------------------------------------- sans I/O


@pytest.mark.unit
def test_events_set_and_end_subscriptions_and_topics() -> None:
    state = TopicState(exists=False)
    assert apply_event(state, {"type": "topic.created", "topic": "t"})
    assert state.exists
    assert apply_event(state, subscribed("t", MIKE))
    assert apply_event(state, {**subscribed("t", MIKE, NOW + 5), "type": "subscription.renewed"})
    assert state.subscriptions == {(MIKE, ""): sub("t", MIKE, NOW + 5)}
    assert apply_event(state, {"type": "subscription.ended", "topic": "t", "subscriber": str(MIKE)})
    assert state.subscriptions == {}
    assert apply_event(state, subscribed("t", BOB))
    assert apply_event(state, {"type": "topic.deleted", "topic": "t"})
    assert not state.exists  # its subscriptions end with events of their own


@pytest.mark.unit
def test_schema_v2_subscription_ids_and_unknown_events() -> None:
    """v2 identifies a subscription by (subscriber, subscription_id), "" for a plain
    topic subscription, and an end ends that identity only; an event type this module
    does not know is refused (the caller drops the topic and loads it again)."""
    state = TopicState(exists=True)
    assert apply_event(state, subscribed("t", MIKE))
    for sid in ("1", "2"):
        event = {**subscribed("t", MIKE), "v": "2", "subscription_id": sid, "selector": "x > 1"}
        assert apply_event(state, event)
    assert set(state.subscriptions) == {(MIKE, ""), (MIKE, "1"), (MIKE, "2")}
    ended = {"v": "2", "type": "subscription.ended", "topic": "t", "subscriber": str(MIKE)}
    assert apply_event(state, {**ended, "subscription_id": "1"})
    assert set(state.subscriptions) == {(MIKE, ""), (MIKE, "2")}
    assert apply_event(state, ended)
    assert set(state.subscriptions) == {(MIKE, "2")}
    assert not apply_event(state, {"type": "topic.settings", "topic": "t"})
    assert not apply_event(state, {**subscribed("t", MIKE), "expires_ms": "soon"})


@pytest.mark.unit
def test_a_snapshot_skips_records_it_cannot_read() -> None:
    items = [
        str(MIKE).encode(),
        b'{"originator": "mike@example.com", "trans_id": "7", "expires_ms": "5"}',
        b"bob@example.com",
        b"not json",
    ]
    state = state_from_items("t", items, (3, 0))
    assert list(state.subscriptions) == [(MIKE, "")]
    assert state.as_of == (3, 0)


# --------------------------------------------------------------------------- Redis


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


@pytest.fixture
async def cache(redis: Redis, keys: Keys) -> AsyncIterator[SubscriberCache]:
    subscribers = SubscriberCache(redis, keys, clock=Clock(), placement_ttl_ms=1_000)
    await subscribers.start()
    try:
        yield subscribers
    finally:
        await subscribers.aclose()


async def create(store: PubsubStore, topic: str, *subscribers: Endpoint) -> None:
    changes = [TopicCreated(topic, MIKE), *(Subscribed(sub(topic, s), False) for s in subscribers)]
    assert await store.commit(DOMAIN, topic, None, changes, [], NOW) is not None


async def commands(redis: Redis) -> dict[str, int]:
    stats = await redis.info("commandstats")
    return {name: int(value["calls"]) for name, value in stats.items()}


def delta(before: dict[str, int], after: dict[str, int], ignore: Sequence[str]) -> int:
    return sum(
        calls - before.get(name, 0)
        for name, calls in after.items()
        if not any(name.endswith(i) for i in ignore)
    )


@pytest.mark.integration
async def test_a_known_topic_costs_no_round_trip(
    cache: SubscriberCache, redis: Redis, keys: Keys
) -> None:
    store = PubsubStore(redis, keys, "pod-a")
    await create(store, "news", MIKE, BOB)
    first = await cache.topic(DOMAIN, "news")
    assert first.exists
    assert {s.subscriber for s in first.subscriptions.values()} == {MIKE, BOB}
    before = await commands(redis)
    for _ in range(1_000):
        state = await cache.topic(DOMAIN, "news")
        assert len(state.subscriptions) == 2
    after = await commands(redis)
    # Only the follower's XREAD (and this test's INFO) ran meanwhile.
    assert delta(before, after, ("xread", "info")) == 0
    assert (cache.loads, cache.hits) == (1, 1_000)


@pytest.mark.integration
async def test_changes_made_elsewhere_reach_the_cache(
    cache: SubscriberCache, redis: Redis, keys: Keys
) -> None:
    store = PubsubStore(redis, keys, "pod-b")
    assert not (await cache.topic(DOMAIN, "news")).exists  # unknown topics are cached too
    await create(store, "news", MIKE)
    await eventually(lambda: cache.topic(DOMAIN, "news"), lambda s: s.exists and s.subscriptions)
    await store.commit(
        DOMAIN,
        "news",
        None,
        [Unsubscribed("news", MIKE, "cancel", MIKE)],
        [],
        NOW,
        topic_exists=True,
    )
    await eventually(lambda: cache.topic(DOMAIN, "news"), lambda s: not s.subscriptions)
    # Lease ends recorded by the leader (another script) arrive the same way.
    await store.commit(
        DOMAIN, "news", None, [Subscribed(sub("news", BOB, NOW + 10), False)], [], NOW
    )
    await eventually(lambda: cache.topic(DOMAIN, "news"), lambda s: len(s.subscriptions) == 1)
    assert [e.kind for e in await store.claim_expired(DOMAIN, NOW + 10)] == ["expired"]
    await eventually(lambda: cache.topic(DOMAIN, "news"), lambda s: not s.subscriptions)
    await store.commit(DOMAIN, "news", None, [TopicDeleted("news", MIKE)], [], NOW)
    await eventually(lambda: cache.topic(DOMAIN, "news"), lambda s: not s.exists)
    assert cache.loads == 1


@pytest.mark.integration
async def test_concurrent_changes_and_loads_end_equal_to_redis(
    cache: SubscriberCache, redis: Redis, keys: Keys
) -> None:
    """Subscribes, cancels, topic deletions and re-creations on 20 topics, interleaved
    with first loads and lookups: once the log is read, every cached topic equals what
    Redis holds."""
    store = PubsubStore(redis, keys, "pod-b")
    topics = [f"t{index}" for index in range(20)]
    people = [Endpoint.parse(f"p{index}@example.com") for index in range(10)]
    rng = random.Random(16)
    for topic in topics:
        await create(store, topic)

    async def churn() -> None:
        for _ in range(600):
            topic, who = rng.choice(topics), rng.choice(people)
            roll = rng.random()
            if roll < 0.5:
                change: object = Subscribed(sub(topic, who), False)
            elif roll < 0.9:
                change = Unsubscribed(topic, who, "cancel", who)
            elif roll < 0.95:
                change = TopicDeleted(topic, MIKE)
            else:
                change = TopicCreated(topic, MIKE)
            await store.commit(DOMAIN, topic, None, [change], [], NOW)  # type: ignore[list-item]

    async def read() -> None:
        for _ in range(600):
            await cache.topic(DOMAIN, rng.choice(topics))
            await asyncio.sleep(0)

    await asyncio.gather(churn(), read(), read())

    async def matches() -> bool:
        for topic in topics:
            view = await store.read_topic(DOMAIN, topic)
            state = await cache.topic(DOMAIN, topic)
            mine = {s.subscriber: s for s in state.subscriptions.values()}
            if state.exists != view.exists or mine != view.subscriptions:
                return False
        return True

    await eventually(matches, bool)


@pytest.mark.integration
async def test_a_snapshot_older_than_the_follower_catches_up(
    cache: SubscriberCache, redis: Redis, keys: Keys
) -> None:
    """A snapshot taken before events the follower has already read (and skipped: the
    topic was not cached yet) is brought up to date from the log before it is used."""
    store = PubsubStore(redis, keys, "pod-b")
    await create(store, "news")
    (old,) = await cache._load_many([(DOMAIN, "news")])
    await store.commit(DOMAIN, "news", None, [Subscribed(sub("news", MIKE), False)], [], NOW)
    last = (await redis.xrevrange(keys.pubsub_events(), count=1))[0][0]
    await wait_until(lambda: cache._position >= _id(last), what="the follower past the commit")

    async def stale(_names: Sequence[tuple[str, str]]) -> list[TopicState]:
        return [
            TopicState(exists=old.exists, subscriptions=dict(old.subscriptions), as_of=old.as_of)
        ]

    cache._loads = Coalescer("stale", stale)
    state = await cache.topic(DOMAIN, "news")
    assert {s.subscriber for s in state.subscriptions.values()} == {MIKE}
    assert state.as_of >= _id(last)


def _id(raw: object) -> tuple[int, int]:
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    ms, _, seq = text.partition("-")
    return int(ms), int(seq)


@pytest.mark.integration
async def test_a_lost_read_keeps_the_cache_and_catches_up(
    cache: SubscriberCache, redis: Redis, keys: Keys
) -> None:
    """The follower's connection is killed (as a read timing out would): nothing is
    lost, so nothing is loaded again; the change made meanwhile arrives by the log."""
    store = PubsubStore(redis, keys, "pod-b")
    await create(store, "news", MIKE)
    assert len((await cache.topic(DOMAIN, "news")).subscriptions) == 1
    await redis.execute_command(
        "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes", **every_node(redis)
    )
    await store.commit(DOMAIN, "news", None, [Subscribed(sub("news", BOB), False)], [], NOW)
    await wait_until(lambda: cache.synced, what="the follower synced again")
    loads = cache.loads  # lookups loaded afresh while the follower was away
    assert len((await cache.topic(DOMAIN, "news")).subscriptions) == 2  # the cached entry
    assert cache.loads == loads


@pytest.mark.integration
async def test_a_log_trimmed_past_the_position_starts_the_cache_over(
    cache: SubscriberCache, redis: Redis, keys: Keys
) -> None:
    store = PubsubStore(redis, keys, "pod-b")
    await create(store, "news", MIKE)
    await cache.topic(DOMAIN, "news")
    log = keys.pubsub_events()
    await cache._resume(redis, log)  # nothing lost: kept
    assert len(cache) == 1
    behind = cache._position
    await store.commit(DOMAIN, "news", None, [Subscribed(sub("news", BOB), False)], [], NOW)
    await redis.xtrim(log, maxlen=0, approximate=False)  # what followed the position
    cache._position = behind
    await cache._resume(redis, log)
    assert len(cache) == 0
    assert cache._position > behind


@pytest.mark.integration
async def test_placement_is_read_once_then_refreshed_in_the_background(
    redis: Redis, keys: Keys
) -> None:
    clock = Clock()
    cache = SubscriberCache(redis, keys, clock=clock, placement_ttl_ms=1_000)
    gone = Endpoint.parse("gone@example.com")
    nobody = Endpoint.parse("nobody@example.com")
    await redis.set(keys.attachment(str(MIKE)), "relay-1")
    await redis.set(keys.attachment(str(BOB)), "relay-2")
    await redis.set(keys.attachment(str(gone)), "relay-dead")
    await redis.set(keys.relay_pod("relay-1"), "127.0.0.1:1001")
    await redis.set(keys.relay_pod("relay-2"), "127.0.0.1:1002")
    expected = {MIKE: "127.0.0.1:1001", BOB: "127.0.0.1:1002", gone: "", nobody: ""}
    try:
        assert await cache.placement([MIKE, BOB, gone, nobody]) == expected
        await redis.set(keys.attachment(str(MIKE)), "relay-2")
        assert (await cache.placement([MIKE]))[MIKE] == "127.0.0.1:1001"  # reused
        clock.now += 1_000
        # Older than the TTL: served as it is, read again in the background.
        assert (await cache.placement([MIKE]))[MIKE] == "127.0.0.1:1001"
        await eventually(lambda: cache.placement([MIKE]), lambda p: p[MIKE] == "127.0.0.1:1002")
        assert await cache.placement([]) == {}
        assert cache._locating.batches == 2
    finally:
        await cache.aclose()
