"""Shared fixtures: a real redis-server per test session, a fresh key space per test.

Every test that touches Redis gets its own key prefix (``Keys``), so tests never see each
other's data and nothing needs flushing; the server itself is started once per session
on a free loopback port (tests/support/redis_server.py).
"""

from __future__ import annotations

import os

# gRPC's fork handlers (on by default in grpcio's core) restart its poller in a child
# that is about to exec; when the child closes its descriptors first, that poller fails
# with EBADF and the child dies before exec (grpc/grpc#43055: since grpcio 1.81). The
# test process forks with gRPC running (the Spark gateway is started with a preexec_fn,
# so with fork, not vfork) and never uses gRPC in a child: the handlers are turned off
# before gRPC is initialised (grpc's doc/fork_support.md: "should be set whenever a user
# expects to always call exec immediately following fork").
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest
from redis.asyncio import Redis

from apexmesh.store.keys import Keys
from tests.support.demo_mesh import DemoMesh, start_demo
from tests.support.polling import TIME_FACTOR, scaled
from tests.support.redis_server import RedisServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _running(server: RedisServer) -> Iterator[RedisServer]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from _running(RedisServer(tmp_path_factory.mktemp("redis")))


@pytest.fixture(scope="session")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server with a password, as services outside development runs need it
    (tests/support/secure.py)."""
    yield from _running(RedisServer(tmp_path_factory.mktemp("redis-locked"), password="s3cret"))


@pytest.fixture
def keys() -> Keys:
    return Keys(prefix=f"test-{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The one local SparkSession of a test run (``spark`` marker; each start costs 5 s
    or more: shared/ECOSYSTEM.md section 5), configured as the job's own
    (spark/session.py), on two cores at most.

    One difference, for time only: the JVM compiles with its quick compiler alone
    (:data:`tests.support.spark.TEST_JVM`). The tests' folds are small and each query is
    new code, so the optimizing compiler's work never pays back here; a job's large
    fold keeps it."""
    from spark.session import spark_session
    from tests.support.spark import TEST_CONF

    session = spark_session("local[2]", driver_memory="1g", shuffle_partitions=4, conf=TEST_CONF)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def demo_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoMesh]:
    """The README's run command, running (tests/support/demo_mesh.py): one per session,
    shared by the operator tests (apexctl, admin APIs, dashboard); it costs half a
    minute to start on two cores."""
    mesh = start_demo(tmp_path_factory.mktemp("demo-mesh"))
    try:
        yield mesh
    finally:
        mesh.stop()


#: Every test says which kind it is (pyproject's markers; ``scripts/test -m unit`` runs
#: only the in-memory ones, so an unmarked test would silently fall out of every kind).
KINDS = ("unit", "integration", "system")


def _scale_timeouts(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest-timeout's limit of every test (its marker's, else the ini's) times the one
    time factor (APEXMESH_TEST_TIME_FACTOR, tests/README.md): a loaded run raises every
    deadline alike, the tests' own and the harness's."""
    if TIME_FACTOR == 1.0:
        return
    default = float(config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = default
        if marker is not None:
            seconds = float(marker.args[0] if marker.args else marker.kwargs.get("timeout", 0))
        if seconds > 0:
            item.add_marker(pytest.mark.timeout(scaled(seconds)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _scale_timeouts(config, items)
    unmarked = [item.nodeid for item in items if not any(item.get_closest_marker(k) for k in KINDS)]
    if unmarked:
        raise pytest.UsageError(
            "tests without a unit, integration or system marker:\n  " + "\n  ".join(unmarked)
        )
