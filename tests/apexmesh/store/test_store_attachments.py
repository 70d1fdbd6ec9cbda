"""Attachments in a real redis-server: one holder per endpoint, leases, compare-and-delete."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from apexmesh.store.attachments import CHUNK, AttachmentRegistry
from apexmesh.store.connection import RedisPoolSettings, connect_redis
from apexmesh.store.keys import Keys
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration


async def test_claim_is_exclusive_across_pods(redis: Redis, keys: Keys) -> None:
    pod_a = AttachmentRegistry(redis, keys, "pod-a")
    pod_b = AttachmentRegistry(redis, keys, "pod-b")
    assert await pod_a.claim("fred@example.com") is None
    assert await pod_a.claim("fred@example.com") is None  # idempotent for the holder
    assert await pod_b.claim("fred@example.com") == "pod-a"
    assert await pod_b.claim("Fred@example.com") is None  # case-sensitive (RFC 3340 2.2.1)


async def test_release_only_by_the_holder(redis: Redis, keys: Keys) -> None:
    pod_a = AttachmentRegistry(redis, keys, "pod-a")
    pod_b = AttachmentRegistry(redis, keys, "pod-b")
    await pod_a.claim("fred@example.com")
    assert not await pod_b.release("fred@example.com")
    assert await pod_b.claim("fred@example.com") == "pod-a"
    assert await pod_a.release("fred@example.com")
    assert await pod_b.claim("fred@example.com") is None


async def test_locate_returns_the_holders_address(redis: Redis, keys: Keys) -> None:
    pod_a = AttachmentRegistry(redis, keys, "pod-a")
    assert await pod_a.locate("barney@example.com") is None
    await pod_a.claim("barney@example.com")
    await pod_a.renew("127.0.0.1:7001")
    assert await pod_a.locate("barney@example.com") == ("pod-a", "127.0.0.1:7001")


async def test_lease_lapses_when_not_renewed(redis: Redis, keys: Keys) -> None:
    pod_a = AttachmentRegistry(redis, keys, "pod-a", lease_ms=50)
    pod_b = AttachmentRegistry(redis, keys, "pod-b", lease_ms=50)
    await pod_a.claim("wilma@example.com")
    assert await pod_a.renew("127.0.0.1:7001") == 1

    # No renewal: Redis expires the lease; poll rather than sleep a fixed time.
    async def expired() -> bool:
        return await redis.exists(keys.attachment("wilma@example.com")) == 0

    await wait_until(expired, 2.0, every=0.01)
    assert await pod_b.claim("wilma@example.com") is None
    assert await pod_a.renew("127.0.0.1:7001") == 0  # pod a forgets what it lost


async def test_release_all_frees_every_endpoint_of_the_pod(redis: Redis, keys: Keys) -> None:
    pod_a = AttachmentRegistry(redis, keys, "pod-a")
    pod_b = AttachmentRegistry(redis, keys, "pod-b")
    for name in ("fred", "wilma", "pebbles"):
        await pod_a.claim(f"{name}@example.com")
    await pod_b.claim("barney@example.com")
    await pod_a.renew("127.0.0.1:7001")
    assert await pod_a.release_all() == 3
    assert await pod_a.locate("fred@example.com") is None
    assert await pod_b.locate("barney@example.com") is not None
    assert await redis.exists(keys.relay_pod("pod-a")) == 0


async def test_operations_asked_together_are_done_in_the_order_asked(
    redis: Redis, keys: Keys
) -> None:
    """A release asked before a claim of the same endpoint (an endpoint detaching and
    attaching again at once) is done first, though both go out in one batch."""
    pod_a = AttachmentRegistry(redis, keys, "pod-a")
    pod_b = AttachmentRegistry(redis, keys, "pod-b")
    await pod_a.claim("fred@example.com")
    released, claimed, holder, found = await asyncio.gather(
        pod_a.release("fred@example.com"),
        pod_a.claim("fred@example.com"),
        pod_b.claim("fred@example.com"),
        pod_b.locate("fred@example.com"),
    )
    assert (released, claimed, holder) == (True, None, "pod-a")
    assert found == ("pod-a", "")  # no address renewed yet


async def test_ten_thousand_releases_at_once_over_four_connections(
    redis_server: RedisServer, keys: Keys
) -> None:
    """The burst of 10,000 sessions closing at once, against a pool of 4 connections:
    every release succeeds, in a few round trips."""
    client = connect_redis(redis_server.url, RedisPoolSettings(max_connections=4, timeout=5.0))
    try:
        pod = AttachmentRegistry(client, keys, "pod-a")
        endpoints = [f"e{i}@example.com" for i in range(10_000)]
        assert await asyncio.gather(*(pod.claim(e) for e in endpoints)) == [None] * 10_000
        assert await pod.renew("127.0.0.1:7001") == 10_000  # several SSCAN chunks
        assert all(await asyncio.gather(*(pod.release(e) for e in endpoints)))
        assert await client.scard(keys.pod_attachments("pod-a")) == 0
        assert await pod.locate_many(endpoints[:3]) == [None, None, None]
        assert pod._ops.batches <= 40  # 20,000 operations, a few round trips
    finally:
        await client.aclose()


async def test_renew_and_release_all_work_in_chunks(redis: Redis, keys: Keys) -> None:
    pod = AttachmentRegistry(redis, keys, "pod-a")
    endpoints = [f"e{i}@example.com" for i in range(CHUNK * 2 + 7)]
    await asyncio.gather(*(pod.claim(e) for e in endpoints))
    await redis.delete(keys.attachment(endpoints[5]))  # lapsed: forgotten by the renewal
    assert await pod.renew("127.0.0.1:7001") == len(endpoints) - 1
    assert await redis.scard(keys.pod_attachments("pod-a")) == len(endpoints) - 1
    located = await pod.locate_many([endpoints[0], endpoints[5]])
    assert located == [("pod-a", "127.0.0.1:7001"), None]
    assert await pod.release_all() == len(endpoints) - 1
    assert await redis.exists(keys.pod_attachments("pod-a"), keys.relay_pod("pod-a")) == 0
