"""The store tests again, on a real Redis Cluster (three primaries, three replicas).

Modules here import the store tests of ``tests/apexmesh/store`` (the same functions) and
these fixtures replace ``redis`` with redis-py's cluster client, made as every process
makes it (:func:`apexmesh.store.connection.connect_redis` on a ``redis+cluster://`` URL),
and ``keys`` with the tagged key space (``Keys(cluster=True)``). A script or transaction
that named keys of two slots fails there with CROSSSLOT or "non local key", so every one
the tests reach is checked. Tests that need the standalone server itself (restarts,
pools measured on one server) and in-memory ones are not collected twice.
"""

from __future__ import annotations

import gc
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from apexmesh.store.connection import RedisPoolSettings, connect_redis, keys_for
from apexmesh.store.keys import Keys
from tests.support.redis_cluster import RedisClusterNodes

_HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    cluster = RedisClusterNodes(tmp_path_factory.mktemp("redis-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def keys(redis_cluster: RedisClusterNodes) -> Keys:
    return keys_for(redis_cluster.url, f"test-{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def redis(redis_cluster: RedisClusterNodes) -> AsyncIterator[Redis]:
    client = connect_redis(redis_cluster.url, RedisPoolSettings())
    # The slot table, which pub/sub needs before any command loads it.
    await client.initialize()  # type: ignore[attr-defined]
    try:
        yield client
    finally:
        await client.aclose()
        # The cluster client's objects are cyclic: collected here, not inside a later
        # test's ast.parse (CPython 3.11 then fails with "AST constructor recursion
        # depth mismatch" when a finalizer runs mid-parse).
        gc.collect()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop, from the modules here, imported tests that do not run on the cluster: the
    in-memory ones (``unit``) and those that need the standalone server process."""
    dropped = [
        item
        for item in items
        if Path(str(item.fspath)).parent == _HERE
        and item.get_closest_marker("cluster") is None
        and (item.get_closest_marker("unit") or "redis_server" in item.fixturenames)
    ]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]
