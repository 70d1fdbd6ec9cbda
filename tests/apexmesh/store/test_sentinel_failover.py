"""Sentinel: a primary killed with SIGKILL, the client follows the promoted replica without
a restart, and every acknowledged held data survives (issue #30, "Replicas and failover").

The group is real (tests/support/redis_cluster.py): one primary, two replicas, three
sentinels (quorum 2) on loopback. The store's client is made as every process makes it
(``connect_redis`` on a ``redis+sentinel://`` URL, ``APEXMESH_REDIS_WAIT_REPLICAS=1``), so
an acknowledged hold is one that ``WAIT`` saw on a replica.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from apexmesh.apex.holding import HoldLimits
from apexmesh.store.attachments import AttachmentRegistry
from apexmesh.store.connection import (
    Durability,
    NotReplicated,
    RedisPoolSettings,
    connect_redis,
    keys_for,
)
from apexmesh.store.held import HeldStore
from tests.support.redis_cluster import SentinelGroup, running_sentinels

pytestmark = pytest.mark.integration

UNLIMITED = HoldLimits(
    max_bytes_per_endpoint=None,
    max_count_per_endpoint=None,
    max_bytes_per_domain=None,
    max_count_per_domain=None,
)
DOMAIN = "example.com"
DINO = "dino@example.com"
#: The issue's bound: the mesh is ready again within 15 s of the kill.
READY_AGAIN_S = 15.0


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelGroup]:
    with running_sentinels(tmp_path / "sentinel") as group:
        yield group


def _settings(replicas: int, timeout_ms: int = 2000) -> RedisPoolSettings:
    return RedisPoolSettings(durability=Durability(replicas, timeout_ms))


async def test_an_acknowledged_hold_is_on_a_replica_and_survives_the_primary_killed(
    sentinels: SentinelGroup,
) -> None:
    client = connect_redis(sentinels.url, _settings(1))
    keys = keys_for(sentinels.url, f"t-{uuid.uuid4().hex[:8]}")
    store = HeldStore(client, keys)
    attachments = AttachmentRegistry(client, keys, "pod-1")
    replica = Redis(port=sentinels.replica_nodes[0].port)
    acked: list[bytes] = []
    try:
        for i in range(50):
            payload = b"before-%03d" % i
            assert isinstance(
                await store.hold(DINO, DOMAIN, payload, now=1, deadline=None, limits=UNLIMITED),
                int,
            )
            acked.append(payload)
        # WAIT returned: the replica has every acknowledged entry now (no polling).
        assert await replica.hlen(keys.held_data(DINO)) == len(acked)

        old_primary = sentinels.primary_port()
        sentinels.primary.kill()
        killed = time.monotonic()
        ready_after: float | None = None
        attempts = failed = 0
        while time.monotonic() - killed < 40:
            attempts += 1
            payload = b"during-%03d" % attempts
            try:
                result = await store.hold(
                    DINO, DOMAIN, payload, now=1, deadline=None, limits=UNLIMITED
                )
            except (RedisError, OSError):
                failed += 1  # not acknowledged: may or may not be stored (at least once)
                await asyncio.sleep(0.05)  # retry pacing, not a readiness guess
                continue
            assert isinstance(result, int)
            acked.append(payload)
            if ready_after is None:
                ready_after = time.monotonic() - killed
            if len(acked) >= 100:
                break
        assert ready_after is not None, failed
        assert ready_after < READY_AGAIN_S, (ready_after, failed)
        assert sentinels.primary_port() != old_primary
        # The same client, no restart: attachments work on the new primary too.
        assert await attachments.claim("fred@example.com") is None
        held = {e.payload for e in await store.read(DINO, limit=10_000)}
        assert set(acked) <= held, sorted(set(acked) - held)
        print(f"failover: ready again after {ready_after:.2f} s, {failed} holds failed")
    finally:
        await attachments.aclose()
        await replica.aclose()
        await client.aclose()


async def test_a_write_no_replica_confirms_is_not_acknowledged(sentinels: SentinelGroup) -> None:
    """WAIT for more replicas than exist: the hold raises NotReplicated (the relay then
    answers a transient failure, never ``ok``); the entry is on the primary (a retry may
    hold it twice: at least once, never lost)."""
    client = connect_redis(sentinels.url, _settings(3, timeout_ms=200))
    keys = keys_for(sentinels.url, f"t-{uuid.uuid4().hex[:8]}")
    try:
        with pytest.raises(NotReplicated, match="2 of 3 replicas"):
            await HeldStore(client, keys).hold(
                DINO, DOMAIN, b"x", now=1, deadline=None, limits=UNLIMITED
            )
        assert await client.hlen(keys.held_data(DINO)) == 1
    finally:
        await client.aclose()
