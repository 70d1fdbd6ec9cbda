"""The process's Redis pool: bounded, blocking, sized from settings."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from apexmesh.ops.settings import SettingsError
from apexmesh.store.connection import RedisPoolSettings, connect_redis
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
