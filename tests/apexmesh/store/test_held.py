"""Held data (RFC 3342 hold4Endpoint) in a real redis-server: order, quotas, expiry,
acknowledgement by id, one drainer at a time, redelivery after a drainer dies."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from apexmesh.apex.holding import HoldLimits
from apexmesh.store.attachments import AttachmentRegistry
from apexmesh.store.held import (
    ATTACHED,
    DOMAIN_BYTES,
    DOMAIN_COUNT,
    ENDPOINT_BYTES,
    ENDPOINT_COUNT,
    HeldStats,
    HeldStore,
    HoldRequest,
    Refused,
)
from apexmesh.store.keys import Keys
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000
BARNEY = "barney@example.com"
WILMA = "wilma@example.com"
DOMAIN = "example.com"
UNLIMITED = HoldLimits(
    max_hold_ms=None,
    max_bytes_per_endpoint=None,
    max_count_per_endpoint=None,
    max_bytes_per_domain=None,
    max_count_per_domain=None,
)


async def hold(
    store: HeldStore,
    payload: bytes,
    *,
    endpoint: str = BARNEY,
    now: int = T0,
    deadline: int | None = None,
    limits: HoldLimits = UNLIMITED,
) -> int:
    result = await store.hold(endpoint, DOMAIN, payload, now=now, deadline=deadline, limits=limits)
    assert isinstance(result, int), result
    return result


async def test_held_in_order_and_removed_only_on_ack(redis: Redis, keys: Keys) -> None:
    store = HeldStore(redis, keys)
    ids = [await hold(store, f"data {i}".encode(), now=T0 + i) for i in range(5)]
    assert ids == sorted(ids)
    entries = await store.read(BARNEY)
    assert [e.payload for e in entries] == [f"data {i}".encode() for i in range(5)]
    assert [e.held_at for e in entries] == [T0 + i for i in range(5)]
    assert entries[0].deadline is None
    assert entries[0].size == 6
    assert entries[0].domain == DOMAIN
    # Reading removes nothing.
    assert len(await store.read(BARNEY)) == 5
    page = await store.read(BARNEY, after=ids[1], limit=2)
    assert [e.id for e in page] == ids[2:4]
    assert await store.ack(BARNEY, [ids[0], ids[2]]) == 2
    assert await store.ack(BARNEY, [ids[0], ids[2]]) == 0  # idempotent
    assert [e.id for e in await store.read(BARNEY)] == [ids[1], ids[3], ids[4]]
    assert await store.usage(BARNEY) == (3, 18)
    assert await store.read(WILMA) == []


async def test_binary_payload_kept_exactly(redis: Redis, keys: Keys) -> None:
    store = HeldStore(redis, keys)
    payload = bytes(range(256)) * 4
    await hold(store, payload)
    [entry] = await store.read(BARNEY)
    assert entry.payload == payload


async def test_another_pod_sees_what_one_pod_held(redis_server: RedisServer, keys: Keys) -> None:
    """The hold is in Redis when it returns: the holding relay process may die."""
    first = Redis.from_url(redis_server.url)
    store = HeldStore(first, keys)
    entry_id = await hold(store, b"kept")
    await first.aclose()  # the relay process is gone
    second = Redis.from_url(redis_server.url)
    try:
        [entry] = await HeldStore(second, keys).read(BARNEY)
        assert (entry.id, entry.payload) == (entry_id, b"kept")
    finally:
        await second.aclose()


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        (HoldLimits(max_bytes_per_endpoint=25), ENDPOINT_BYTES),
        (HoldLimits(max_count_per_endpoint=2), ENDPOINT_COUNT),
        (HoldLimits(max_bytes_per_domain=25), DOMAIN_BYTES),
        (HoldLimits(max_count_per_domain=2), DOMAIN_COUNT),
    ],
)
async def test_quotas_refuse_with_a_reason(
    redis: Redis, keys: Keys, limits: HoldLimits, reason: str
) -> None:
    store = HeldStore(redis, keys)
    first = await hold(store, b"0123456789", limits=limits)
    await hold(store, b"0123456789", endpoint=WILMA if "endpoint" in reason else BARNEY)
    if "endpoint" in reason:
        await hold(store, b"0123456789", limits=limits)
    refused = await store.hold(BARNEY, DOMAIN, b"0123456789", now=T0, deadline=None, limits=limits)
    assert refused == Refused(reason=reason)
    assert refused.code == 450
    assert reason in refused.text
    # Space freed by an acknowledgement is usable again.
    await store.ack(BARNEY, [first])
    assert isinstance(
        await store.hold(BARNEY, DOMAIN, b"0123456789", now=T0, deadline=None, limits=limits), int
    )


async def test_quota_holds_under_concurrent_holds(redis: Redis, keys: Keys) -> None:
    stores = [HeldStore(redis, keys) for _ in range(2)]
    limits = HoldLimits(max_count_per_endpoint=10)
    results = await asyncio.gather(
        *(
            stores[i % 2].hold(BARNEY, DOMAIN, b"x", now=T0, deadline=None, limits=limits)
            for i in range(40)
        )
    )
    assert sum(isinstance(r, int) for r in results) == 10
    assert await stores[0].usage(BARNEY) == (10, 10)


async def test_expiry_returns_what_expired_and_keeps_the_rest(redis: Redis, keys: Keys) -> None:
    store = HeldStore(redis, keys)
    late = await hold(store, b"late", deadline=T0 + 5000)
    early = await hold(store, b"early", deadline=T0 + 1000)
    forever = await hold(store, b"forever")
    other = await hold(store, b"other", endpoint=WILMA, deadline=T0 + 1000)
    assert await store.next_deadline() == T0 + 1000
    assert await store.expire(T0 + 999) == []
    expired = await store.expire(T0 + 1000)
    assert sorted((e.endpoint, e.id, e.payload) for e in expired) == sorted(
        [(BARNEY, early, b"early"), (WILMA, other, b"other")]
    )
    assert all(e.deadline == T0 + 1000 for e in expired)
    assert [e.id for e in await store.read(BARNEY)] == [late, forever]
    assert await store.next_deadline() == T0 + 5000
    # An entry acknowledged before its deadline never expires.
    await store.ack(BARNEY, [late])
    assert await store.expire(T0 + 10**9) == []
    assert await store.next_deadline() is None
    assert [e.id for e in await store.read(BARNEY)] == [forever]


async def test_stats_per_domain(redis: Redis, keys: Keys) -> None:
    store = HeldStore(redis, keys)
    assert await store.stats(DOMAIN, T0) == HeldStats(
        domain=DOMAIN, count=0, bytes=0, oldest_age_ms=None
    )
    first = await hold(store, b"12345", now=T0)
    await hold(store, b"123", endpoint=WILMA, now=T0 + 100)
    await store.hold("dino@other.org", "other.org", b"1", now=T0, deadline=None, limits=UNLIMITED)
    stats = await store.stats(DOMAIN, T0 + 1000)
    assert stats == HeldStats(domain=DOMAIN, count=2, bytes=8, oldest_age_ms=1000)
    await store.ack(BARNEY, [first])
    assert (await store.stats(DOMAIN, T0 + 1000)).oldest_age_ms == 900
    assert await store.domains() == [DOMAIN, "other.org"]


async def test_one_drainer_at_a_time_and_a_dead_drainers_lease_lapses(
    redis: Redis, keys: Keys
) -> None:
    pod_a = HeldStore(redis, keys, lease_ms=50)
    pod_b = HeldStore(redis, keys, lease_ms=50)
    assert await pod_a.claim_drain(BARNEY, "pod-a") is None
    assert await pod_a.claim_drain(BARNEY, "pod-a") is None  # renewal
    assert await pod_b.claim_drain(BARNEY, "pod-b") == "pod-a"
    assert not await pod_b.release_drain(BARNEY, "pod-b")

    # Pod a dies: no release, no renewal. Poll until Redis expires its lease (<= 2 s).
    async def lapsed() -> bool:
        return await redis.exists(keys.held_drain(BARNEY)) == 0

    await wait_until(lapsed, 2.0, every=0.01)
    assert await pod_b.claim_drain(BARNEY, "pod-b") is None
    assert await pod_b.release_drain(BARNEY, "pod-b")
    assert await pod_a.claim_drain(BARNEY, "pod-a") is None


async def test_redelivery_after_a_drainer_dies_neither_duplicates_nor_loses(
    redis: Redis, keys: Keys
) -> None:
    store = HeldStore(redis, keys, lease_ms=50)
    ids = [await hold(store, f"m{i}".encode()) for i in range(6)]
    delivered: list[bytes] = []
    # Pod a: claims, delivers three, gets the recipient's ok for all three, but dies
    # after acknowledging only two of them.
    assert await store.claim_drain(BARNEY, "pod-a") is None
    batch = await store.read(BARNEY, limit=3)
    delivered += [e.payload for e in batch]
    await store.ack(BARNEY, [batch[0].id, batch[1].id])

    async def claimed() -> bool:
        return await store.claim_drain(BARNEY, "pod-b") is None

    await wait_until(claimed, 2.0, every=0.01, what="pod a's drain lease lapsed")
    # Pod b drains everything left, in order, from the first unacknowledged entry.
    rest = await store.read(BARNEY)
    assert [e.id for e in rest] == ids[2:]
    delivered += [e.payload for e in rest]
    assert await store.ack(BARNEY, [e.id for e in rest]) == 4
    # Pod a's acknowledgement arriving late changes nothing.
    assert await store.ack(BARNEY, [batch[2].id]) == 0
    assert await store.read(BARNEY) == []
    assert await store.usage(BARNEY) == (0, 0)
    # Every entry delivered, only the unacknowledged one twice (at-least-once).
    assert sorted(set(delivered)) == sorted(f"m{i}".encode() for i in range(6))
    assert delivered.count(b"m2") == 2
    assert len(delivered) == 7


async def test_two_drainers_race_each_entry_delivered_once(redis: Redis, keys: Keys) -> None:
    store = HeldStore(redis, keys, lease_ms=5000)
    for i in range(300):
        await hold(store, str(i).encode())
    delivered: list[bytes] = []

    async def drain(owner: str) -> None:
        pod = HeldStore(redis, keys, lease_ms=5000)
        while True:
            if await pod.claim_drain(BARNEY, owner) is not None:
                await asyncio.sleep(0.001)  # the other drainer holds it: retry pacing
                if not await pod.read(BARNEY, limit=1):
                    return
                continue
            batch = await pod.read(BARNEY, limit=50)
            if not batch:
                await pod.release_drain(BARNEY, owner)
                return
            delivered.extend(e.payload for e in batch)
            await pod.ack(BARNEY, [e.id for e in batch])

    await asyncio.gather(drain("pod-a"), drain("pod-b"))
    assert delivered == [str(i).encode() for i in range(300)]


async def test_order_over_ten_thousand_entries(redis: Redis, keys: Keys) -> None:
    store = HeldStore(redis, keys)
    payload = b"x" * 256
    for start in range(0, 10_000, 500):
        requests = [
            HoldRequest(endpoint=BARNEY, domain=DOMAIN, payload=b"%05d" % i + payload, now=T0)
            for i in range(start, start + 500)
        ]
        results = await store.hold_many(requests, limits=UNLIMITED)
        assert all(isinstance(r, int) for r in results)
    assert await store.usage(BARNEY) == (10_000, 10_000 * 261)
    seen: list[int] = []
    while batch := await store.read(BARNEY, limit=1000):
        seen.extend(int(e.payload[:5]) for e in batch)
        await store.ack(BARNEY, [e.id for e in batch])
    assert seen == list(range(10_000))
    assert await store.stats(DOMAIN, T0) == HeldStats(
        domain=DOMAIN, count=0, bytes=0, oldest_age_ms=None
    )


async def test_hold_many_in_one_round_trip_keeps_order_and_quotas(redis: Redis, keys: Keys) -> None:
    store = HeldStore(redis, keys)
    requests = [
        HoldRequest(endpoint=BARNEY, domain=DOMAIN, payload=b"%d" % i, now=T0, deadline=T0 + i)
        for i in range(1, 6)
    ]
    results = await store.hold_many(requests, limits=HoldLimits(max_count_per_endpoint=3))
    assert [isinstance(r, int) for r in results] == [True, True, True, False, False]
    assert results[3] == Refused(reason=ENDPOINT_COUNT)
    assert [e.payload for e in await store.read(BARNEY)] == [b"1", b"2", b"3"]
    assert [e.deadline for e in await store.read(BARNEY)] == [T0 + 1, T0 + 2, T0 + 3]
    assert await store.hold_many([], limits=UNLIMITED) == []


async def test_report_after_taken_once_by_one_pod_entry_stays_held(
    redis: Redis, keys: Keys
) -> None:
    pod_a = HeldStore(redis, keys)
    pod_b = HeldStore(redis, keys)
    first = await pod_a.hold(
        BARNEY, DOMAIN, b"a", now=T0, deadline=T0 + 9000, limits=UNLIMITED, report_at=T0 + 100
    )
    second = await hold(pod_a, b"b")
    assert isinstance(first, int)
    [entry, plain] = await pod_b.read(BARNEY)
    assert (entry.report_at, plain.report_at) == (T0 + 100, None)
    assert await pod_b.next_report() == T0 + 100
    assert await pod_a.due_reports(T0 + 99) == []
    taken = await asyncio.gather(pod_a.due_reports(T0 + 100), pod_b.due_reports(T0 + 100))
    assert sorted(len(t) for t in taken) == [0, 1]
    [due] = taken[0] or taken[1]
    assert (due.id, due.payload, due.deadline) == (first, b"a", T0 + 9000)
    # Still held, in order, now without a pending report.
    assert [(e.id, e.report_at) for e in await pod_a.read(BARNEY)] == [
        (first, None),
        (second, None),
    ]
    assert await pod_a.next_report() is None
    # Acknowledged before its report time: the report is never due.
    third = await pod_a.hold(
        BARNEY, DOMAIN, b"c", now=T0, deadline=None, limits=UNLIMITED, report_at=T0 + 500
    )
    assert isinstance(third, int)
    await pod_a.ack(BARNEY, [third])
    assert await pod_a.due_reports(T0 + 10**6) == []


async def test_unless_attached_holds_nothing_for_an_attached_endpoint(
    redis: Redis, keys: Keys
) -> None:
    """The attachment check and the hold are one script: an endpoint with an attachment
    record gets Refused(ATTACHED) and nothing is written; without one it is held."""
    store = HeldStore(redis, keys)
    attachments = AttachmentRegistry(redis, keys, "pod-a")
    assert await attachments.claim(BARNEY) is None
    refused = await store.hold(
        BARNEY, DOMAIN, b"x", now=T0, deadline=None, limits=UNLIMITED, unless_attached=True
    )
    assert refused == Refused(reason=ATTACHED)
    assert await store.usage(BARNEY) == (0, 0)
    await attachments.release(BARNEY)
    held = await store.hold(
        BARNEY, DOMAIN, b"x", now=T0, deadline=None, limits=UNLIMITED, unless_attached=True
    )
    assert isinstance(held, int)
    assert await store.usage(BARNEY) == (1, 1)
