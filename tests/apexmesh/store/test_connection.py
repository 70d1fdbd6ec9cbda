"""The process's Redis pool: bounded, blocking, sized from settings."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from apexmesh.ops.settings import SettingsError, check_redis_url
from apexmesh.store.cancellable import (
    KeepingConnection,
    KeepingSentinelConnection,
    KeepingSentinelSSLConnection,
    KeepingSSLConnection,
)
from apexmesh.store.connection import (
    Durability,
    RedisPoolSettings,
    connect_redis,
    durability_of,
    is_cluster_url,
    keys_for,
)
from tests.support.redis_server import RedisServer


@pytest.mark.unit
def test_settings_defaults_and_bounds() -> None:
    assert RedisPoolSettings.from_env({}) == RedisPoolSettings(max_connections=64, timeout=5.0)
    custom = RedisPoolSettings.from_env(
        {"APEXMESH_REDIS_MAX_CONNECTIONS": "8", "APEXMESH_REDIS_POOL_TIMEOUT_SECONDS": "0.5"}
    )
    assert custom == RedisPoolSettings(max_connections=8, timeout=0.5)
    for bad in (
        {"APEXMESH_REDIS_MAX_CONNECTIONS": "1"},
        {"APEXMESH_REDIS_MAX_CONNECTIONS": "many"},
        {"APEXMESH_REDIS_POOL_TIMEOUT_SECONDS": "0"},
        {"APEXMESH_REDIS_POOL_TIMEOUT_SECONDS": "3600"},
    ):
        with pytest.raises(SettingsError, match="APEXMESH_REDIS_"):
            RedisPoolSettings.from_env(bad)


@pytest.mark.integration
async def test_a_burst_waits_for_the_pool_instead_of_failing(
    redis_server: RedisServer, redis: Redis
) -> None:
    """2,000 commands at once through 3 connections: all answered, and Redis never sees
    more than 3 more clients (the default pool would open one socket per command)."""
    client = connect_redis(redis_server.url, RedisPoolSettings(max_connections=3, timeout=10))
    before = int((await redis.info("clients"))["connected_clients"])
    peak = before

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, int((await redis.info("clients"))["connected_clients"]))
            await asyncio.sleep(0)

    watcher = asyncio.ensure_future(watch())
    try:
        answers = await asyncio.gather(*(client.echo(f"m{i}") for i in range(2000)))
    finally:
        watcher.cancel()
        await client.aclose()
    assert answers == [f"m{i}".encode() for i in range(2000)]
    assert before < peak <= before + 3


@pytest.mark.unit
async def test_sentinel_and_cluster_urls_and_the_wait_settings() -> None:
    """docs/redis.md: the scheme picks the client; a cluster's keys are tagged; WAIT
    settings are read and bounded; outside development a password or TLS is needed."""
    sentinel = "redis+sentinel://:pw@10.0.0.1:26379,10.0.0.2:26379/apexmesh"
    cluster = "rediss+cluster://:pw@10.0.0.1:6379,10.0.0.2:6379"
    for url in (sentinel, cluster, "redis://:pw@h:6379/0"):
        assert check_redis_url(url, dev=False) == url
    with pytest.raises(SettingsError, match="neither TLS nor a password"):
        check_redis_url("redis+cluster://h:1", dev=False)
    assert is_cluster_url(cluster)
    assert not is_cluster_url(sentinel)
    assert keys_for(cluster, "p").cluster
    assert not keys_for(sentinel, "p").cluster
    for bad in ("redis+sentinel://h:1", "redis+sentinel://h:1/a/b", "redis+cluster://h"):
        with pytest.raises(SettingsError):
            connect_redis(bad, RedisPoolSettings())
    settings = RedisPoolSettings.from_env(
        {"APEXMESH_REDIS_WAIT_REPLICAS": "1", "APEXMESH_REDIS_WAIT_TIMEOUT_MS": "250"}
    )
    assert settings.durability == Durability(1, 250)
    with pytest.raises(SettingsError):
        RedisPoolSettings.from_env({"APEXMESH_REDIS_WAIT_REPLICAS": "-1"})
    client = connect_redis("redis://127.0.0.1:1/0", settings)
    other = connect_redis("redis://127.0.0.1:1/0", RedisPoolSettings())
    try:
        assert durability_of(client) == Durability(1, 250)
        assert durability_of(other) == Durability()
    finally:
        await client.aclose()
        await other.aclose()


@pytest.mark.unit
async def test_sentinel_and_cluster_connections_write_without_wait_for() -> None:
    """apexmesh/store/cancellable.py: the clients with a socket timeout (Sentinel,
    Cluster) make connections whose write keeps a cancellation, over TLS too; the
    Sentinel pool gets no ``ssl`` argument besides its class (a connection refuses it)."""
    made: dict[str, type[object]] = {}
    for url in (
        "redis+sentinel://10.0.0.1:26379/apexmesh",
        "rediss+sentinel://10.0.0.1:26379/apexmesh",
        "redis+cluster://10.0.0.1:6379",
        "rediss+cluster://10.0.0.1:6379",
    ):
        client = connect_redis(url, RedisPoolSettings())
        try:
            if "sentinel" in url:
                made[url.partition(":")[0]] = client.connection_pool.connection_class
                assert "ssl" not in client.connection_pool.connection_kwargs
            else:
                manager = client.nodes_manager  # type: ignore[attr-defined]
                classes = {n.connection_class for n in manager.startup_nodes.values()}
                assert classes == {manager.connection_kwargs["connection_class"]}
                made[url.partition(":")[0]] = classes.pop()
        finally:
            await client.aclose()
    assert made == {
        "redis+sentinel": KeepingSentinelConnection,
        "rediss+sentinel": KeepingSentinelSSLConnection,
        "redis+cluster": KeepingConnection,
        "rediss+cluster": KeepingSSLConnection,
    }
