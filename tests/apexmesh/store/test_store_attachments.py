"""Attachments in a real redis-server: one holder per endpoint, leases, compare-and-delete."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from apexmesh.store.attachments import AttachmentRegistry
from apexmesh.store.keys import Keys

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
    for _ in range(200):  # at most 2 s
        if await redis.exists(keys.attachment("wilma@example.com")) == 0:
            break
        await asyncio.sleep(0.01)
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
