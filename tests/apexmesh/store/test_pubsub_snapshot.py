"""The compact Redis snapshot (apexmesh/store/pubsub_snapshot.py): written under new
keys and switched in one script, so readers during a switch see the old or the new
snapshot whole; a pod's catalogue from the snapshot plus later events equals the whole
log's; with no snapshot it replays; and the pod's subscriber cache keeps working on a
log whose oldest entries were trimmed."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from redis.asyncio import Redis

from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.catalogue import (
    SNAPSHOT_SCHEMA,
    Catalogue,
    SubscriptionRow,
    TopicRow,
    fold,
    pack_id,
)
from apexmesh.pubsub.core import Subscribed, Subscription, TopicCreated
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import PubsubStore
from apexmesh.store.pubsub_cache import SubscriberCache
from apexmesh.store.pubsub_snapshot import (
    CatalogueSource,
    SnapshotMeta,
    SnapshotStore,
    next_id,
)
from tests.support.polling import wait_until
from tests.support.pubsub_events import BASE_MS, append, random_log

pytestmark = pytest.mark.integration

AT = BASE_MS + 5_000_000


async def publish(
    store: SnapshotStore, generation: str, catalogue: Catalogue, grace_ms: int = 60_000
) -> SnapshotMeta:
    topics, subs = await store.write(
        generation, catalogue.topics.values(), catalogue.subscriptions.values()
    )
    meta = SnapshotMeta(generation, catalogue.position, AT, topics, subs, SNAPSHOT_SCHEMA)
    await store.switch(meta, grace_ms)
    return meta


def big(count: int, tag: str) -> Catalogue:
    """A catalogue of ``count`` subscriptions (several HSCAN pages of 5,000)."""
    catalogue = Catalogue(position=pack_id(f"{BASE_MS + count}-0"))
    for t in range(10):
        row = TopicRow(
            "example.com", f"t{t}", tag, "o@example.com", BASE_MS, pack_id(f"{BASE_MS}-{t}")
        )
        catalogue.topics[(row.domain, row.topic)] = row
    for i in range(count):
        sub = SubscriptionRow(
            "example.com",
            f"t{i % 10}",
            f"u{i}@example.com",
            "",
            "",
            "",
            False,
            f"{tag}@example.com",
            i,
            AT + 1000,
            BASE_MS,
            pack_id(f"{BASE_MS + 1 + i}-0"),
        )
        catalogue.subscriptions[sub.identity] = sub
    return catalogue


@pytest.mark.parametrize("grace_ms", [60_000, 0])
async def test_readers_during_a_switch_see_one_snapshot_whole(
    redis: Redis, keys: Keys, grace_ms: int
) -> None:
    """Many readers scan (several HSCAN round trips each) while the snapshot is switched
    back and forth; every read is exactly the old or the new catalogue. With no grace
    period the old keys vanish under a reader, which notices and reads again."""
    store = SnapshotStore(redis, keys)
    old, new = big(5_200, "old"), big(5_600, "new")
    assert old != new
    await publish(store, "g-old", old)
    await store.write("g-new", new.topics.values(), new.subscriptions.values())
    new_meta = SnapshotMeta(
        "g-new", new.position, AT, len(new.topics), len(new.subscriptions), SNAPSHOT_SCHEMA
    )
    old_meta = SnapshotMeta(
        "g-old", old.position, AT, len(old.topics), len(old.subscriptions), SNAPSHOT_SCHEMA
    )
    seen: list[Catalogue] = []
    switching = True

    async def reader() -> None:
        while switching:
            found = await store.load(attempts=20)
            assert found is not None
            seen.append(found)

    async def switcher() -> None:
        nonlocal switching
        for flip in range(4):
            # a few reads complete under each snapshot before the next switch
            target = len(seen) + 2
            await wait_until(
                lambda: len(seen) >= target,  # noqa: B023 - target is read at once
                60,
                every=0.01,
                what="two more reads",
            )
            meta, catalogue = (new_meta, new) if flip % 2 == 0 else (old_meta, old)
            if grace_ms == 0:
                # the generation switched away from expired at once: write it again
                await store.write(
                    meta.generation, catalogue.topics.values(), catalogue.subscriptions.values()
                )
            await store.switch(meta, grace_ms)
        switching = False

    await asyncio.gather(switcher(), reader(), reader(), reader())
    assert seen
    assert all(c in (old, new) for c in seen), "a read mixed two snapshots"
    assert any(c == new for c in seen)
    assert await store.load() == old  # the last switch
    if grace_ms:
        # the generation switched away from stays readable for the grace period
        ttl = await redis.pttl(keys.pubsub_snapshot_subscriptions("g-new"))
        assert 0 < ttl <= grace_ms
        assert await redis.pttl(keys.pubsub_snapshot_subscriptions("g-old")) == -1


async def test_an_unswitched_generation_is_invisible_and_expires(redis: Redis, keys: Keys) -> None:
    store = SnapshotStore(redis, keys)
    assert await store.load() is None
    catalogue = fold(random_log(500, seed=4), AT)
    await store.write("g1", catalogue.topics.values(), catalogue.subscriptions.values())
    assert await store.load() is None  # written, not switched: a job that died here
    assert await redis.pttl(keys.pubsub_snapshot_topics("g1")) > 0
    await store.discard("g1")
    assert not await redis.exists(keys.pubsub_snapshot_topics("g1"))


def changed(catalogue: Catalogue, n: int) -> Catalogue:
    """``catalogue`` with a topic gone, one added, and subscriptions ended, added and
    changed (what an incremental run of the job stages)."""
    out = Catalogue(
        position=catalogue.position + 1000,
        topics=dict(catalogue.topics),
        subscriptions=dict(catalogue.subscriptions),
    )
    tag, topic = f"s{n}", f"t{10 + n}"
    del out.topics[("example.com", f"t{n}")]
    out.topics[("example.com", topic)] = TopicRow(
        "example.com", topic, tag, "o@example.com", BASE_MS, out.position
    )
    for k, (identity, row) in enumerate(list(out.subscriptions.items())[:900]):
        if k % 3 == 0:
            del out.subscriptions[identity]
        else:
            out.subscriptions[identity] = SubscriptionRow(
                *identity, "JMS", tag, True, row.originator, k, AT + 2000, AT, out.position
            )
    for i in range(400):
        sub = SubscriptionRow(
            "example.com", topic, f"{tag}{i}@example.com", "", "", "", False, "o", i, AT + 1, AT, i
        )
        out.subscriptions[sub.identity] = sub
    return out


def difference(
    before: Catalogue, after: Catalogue
) -> tuple[list[tuple[TopicRow, bool]], list[tuple[SubscriptionRow, bool]]]:
    """What turns ``before`` into ``after``: each changed row, False for one gone."""
    topics = [(row, True) for key, row in after.topics.items() if before.topics.get(key) != row]
    topics += [(row, False) for key, row in before.topics.items() if key not in after.topics]
    subs = [
        (row, True)
        for key, row in after.subscriptions.items()
        if before.subscriptions.get(key) != row
    ]
    subs += [
        (row, False) for key, row in before.subscriptions.items() if key not in after.subscriptions
    ]
    return topics, subs


async def test_changes_applied_in_place_are_seen_whole_and_only_on_their_snapshot(
    redis: Redis, keys: Keys
) -> None:
    """An incremental run's changes (stage, then one script): readers scanning meanwhile
    see the catalogue before or after a change, never a mix; the counts follow the
    rows; a change made against another snapshot than the current one changes nothing."""
    store = SnapshotStore(redis, keys)
    states = [big(5_200, "s0")]
    for n in range(1, 5):
        states.append(changed(states[-1], n))
    current = await publish(store, "g1", states[0])
    seen: list[Catalogue] = []
    changing = True

    async def reader() -> None:
        while changing:
            found = await store.load(attempts=20)
            assert found is not None
            seen.append(found)

    async def changer() -> None:
        nonlocal changing, current
        for before, after in itertools.pairwise(states):
            target = len(seen) + 2
            await wait_until(
                lambda: len(seen) >= target,  # noqa: B023 - target is read at once
                60,
                every=0.01,
                what="two more reads",
            )
            topics, subs = difference(before, after)
            staging = f"g1.changes.{after.position}"
            assert await store.stage(staging, topics, subs) == (len(topics), len(subs))
            assert await store.load() == before  # staged, not applied: invisible
            meta = SnapshotMeta("g1", after.position, AT, 0, 0, SNAPSHOT_SCHEMA)
            applied = await store.apply(staging, current, meta)
            assert applied is not None
            assert (applied.topics, applied.subscriptions) == (
                len(after.topics),
                len(after.subscriptions),
            )
            assert not await redis.exists(keys.pubsub_snapshot_topics(staging))
            current = applied
        changing = False

    await asyncio.gather(changer(), reader(), reader(), reader())
    assert all(c in states for c in seen), "a read mixed two states"
    assert len({c.position for c in seen}) > 1
    assert await store.load() == states[-1]
    assert await store.meta() == current

    # a change made against an older snapshot: refused, nothing changed
    topics, subs = difference(states[-1], states[0])
    await store.stage("g1.changes.stale", topics, subs)
    stale = SnapshotMeta("g1", states[-2].position, AT, 0, 0, SNAPSHOT_SCHEMA)
    later = SnapshotMeta("g1", states[0].position, AT, 0, 0, SNAPSHOT_SCHEMA)
    assert await store.apply("g1.changes.stale", stale, later) is None
    assert await store.load() == states[-1]
    assert await redis.pttl(keys.pubsub_snapshot_subscriptions("g1.changes.stale")) > 0


async def test_snapshot_plus_later_events_equals_replay_and_survives_a_trim(
    redis: Redis, keys: Keys
) -> None:
    log = random_log(4000, seed=9)
    await append(redis, keys.pubsub_events(), log[:2500])
    store = SnapshotStore(redis, keys)

    # no snapshot: the pod replays the log
    source = CatalogueSource(store, clock=lambda: AT)
    source.start()
    replayed = await source.current()
    assert not source.from_snapshot
    assert replayed.snapshot(AT) == fold(log[:2500], AT)

    # the job's snapshot at 2,000 events, then the trim of what it covers
    meta = await publish(store, "g1", fold(log[:2000], AT))
    assert await store.trim(meta.position) == 2000
    assert (await redis.xrange(keys.pubsub_events(), count=1))[0][0].decode() == log[2000][0]
    await append(redis, keys.pubsub_events(), log[2500:])

    # a pod started now: the snapshot plus the 2,000 events after it
    fresh = CatalogueSource(store, clock=lambda: AT)
    fresh.start()
    warm = await fresh.current()
    assert fresh.from_snapshot
    assert warm.snapshot(AT) == fold(log, AT)
    # the first pod's catalogue (position 2,500, past the trim) catches up from the log
    assert (await source.current()).snapshot(AT) == fold(log, AT)
    assert not source.from_snapshot
    await source.aclose()
    await fresh.aclose()


async def test_a_catalogue_behind_the_trim_loads_the_snapshot_again(
    redis: Redis, keys: Keys
) -> None:
    log = random_log(3000, seed=10)
    await append(redis, keys.pubsub_events(), log[:1000])
    store = SnapshotStore(redis, keys)
    source = CatalogueSource(store, clock=lambda: AT)
    assert (await source.current()).position == pack_id(log[999][0])
    await append(redis, keys.pubsub_events(), log[1000:])
    meta = await publish(store, "g1", fold(log[:2000], AT))
    await store.trim(meta.position)  # entries 1,000..1,999 are gone from the log
    caught = await source.current()
    assert source.from_snapshot
    assert caught.snapshot(AT) == fold(log, AT)
    await source.aclose()


def test_next_id() -> None:
    assert next_id(pack_id("17-3")) == "17-4"
    assert next_id(0) == "0-1"


async def test_the_subscriber_cache_follows_a_trimmed_log(redis: Redis, keys: Keys) -> None:
    """Trimming drops entries the pods no longer need: a cache started before the trim
    keeps following, one started after it begins at the log's end, and a topic loaded
    after it is read from the live keys (XRANGE and XREAD from ids older than the first
    entry left)."""
    pods = PubsubStore(redis, keys, "pod-a")
    mike, bob = Endpoint.parse("mike@example.com"), Endpoint.parse("bob@example.com")
    now = 1_700_000_000_000

    def sub(topic: str, who: Endpoint) -> Subscribed:
        lease = Subscription(
            topic=topic, subscriber=who, originator=who, trans_id=7, expires_ms=now + 3_600_000
        )
        return Subscribed(lease, False)

    early = SubscriberCache(redis, keys, clock=lambda: now)
    await early.start()
    for topic in ("a", "b"):
        await pods.commit(
            "example.com", topic, None, [TopicCreated(topic, mike), sub(topic, mike)], [], now
        )
    assert len((await early.topic("example.com", "a")).subscriptions) == 1
    last = (await redis.xrevrange(keys.pubsub_events(), count=1))[0][0].decode()
    await SnapshotStore(redis, keys).trim(pack_id(last))
    assert await redis.xlen(keys.pubsub_events()) == 0

    late = SubscriberCache(redis, keys, clock=lambda: now)
    await late.start()
    await pods.commit("example.com", "a", None, [sub("a", bob)], [], now)
    await pods.commit("example.com", "b", None, [sub("b", bob)], [], now)
    for cache in (early, late):

        async def both_subscribed(cache: SubscriberCache = cache) -> bool:
            return len((await cache.topic("example.com", "a")).subscriptions) == 2

        await wait_until(both_subscribed, every=0.01, what="both subscriptions of a")
        assert len((await cache.topic("example.com", "b")).subscriptions) == 2
        assert cache.synced
    await early.aclose()
    await late.aclose()
