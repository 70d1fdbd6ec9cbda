"""The access service over real gRPC (grpc.aio on loopback port 0) with a real Redis:
Check, CheckMany, HandleOperation and GetVersion through the typed client, and the
relay-side decision cache kept correct by the change channel."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from apexmesh.apex.access import Domains, TokenRegistry
from apexmesh.contracts.access.v1 import access_pb2_grpc
from apexmesh.rpc.access import AccessClient
from apexmesh.rpc.server import create_server, graceful_stop
from apexmesh.store.access_cache import CachedAccessChecker
from apexmesh.store.access_entries import AccessEntryStore
from apexmesh.store.keys import Keys
from services.access.servicer import AccessMetrics, AccessOperations, AccessServicer
from tests.support.grpc_channels import ready_channel
from tests.support.polling import eventually

pytestmark = pytest.mark.integration


@dataclass
class Running:
    client: AccessClient
    operations: AccessOperations
    registry: CollectorRegistry


@pytest.fixture
async def service(redis: Redis, keys: Keys) -> AsyncIterator[Running]:
    registry = CollectorRegistry()
    metrics = AccessMetrics.create(registry)
    operations = AccessOperations(
        AccessEntryStore(redis, keys),
        Domains.of("example.com"),
        TokenRegistry(),
        clock=lambda: datetime.now(UTC),
        metrics=metrics,
    )
    checker = CachedAccessChecker(operations, redis, keys, resync_interval=0.2)
    await checker.start()
    servicer = AccessServicer(operations, checker, metrics)
    server, port = await create_server(
        [lambda s: access_pb2_grpc.add_AccessServiceServicer_to_server(servicer, s)]
    )
    try:
        async with ready_channel(port) as channel:
            yield Running(AccessClient(channel), operations, registry)
    finally:
        await graceful_stop(server, 1.0)
        await checker.aclose()


async def test_check_defaults_and_bad_input(service: Running) -> None:
    client = service.client
    allowed, version = await client.check("fred@example.com", "fred@example.com", "core:data")
    assert allowed.allowed
    assert allowed.code == 250
    assert version == 0
    denied, _ = await client.check("fred@example.com", "dino@bedrock.org", "core:data")
    assert (denied.allowed, denied.code) == (False, 537)
    for owner, actor, token, code in [
        ("fred", "a@b.org", "core:data", 553),
        ("fred@other.org", "a@b.org", "core:data", 553),
        ("apex=nosuch@example.com", "a@b.org", "core:data", 550),
        ("fred@example.com", "a", "core:data", 553),
        ("fred@example.com", "a@b.org", "core:dat", 553),
        ("fred@example.com", "a@b.org", "coredata", 501),
    ]:
        decision, _ = await client.check(owner, actor, token)
        assert (decision.allowed, decision.code) == (False, code), (owner, actor, token)


async def test_check_many_for_many_recipients(service: Running) -> None:
    client = service.client
    set_star = (
        b"<set transID='1'><access owner='barney@example.com' actor='*@*'"
        b" actions='core:data' /></set>"
    )
    result = await client.handle_operation("barney@example.com", set_star)
    assert result.code == 250
    assert [n.recipient for n in result.notifications] == ["barney@example.com"]
    recipients = ["fred@example.com", "barney@example.com", "wilma@example.com", "x@other.org"]
    decisions, version = await client.check_many(
        [(r, "dino@bedrock.org", "core:data") for r in recipients]
    )
    assert [d.code for d in decisions] == [537, 250, 537, 553]
    assert version == 1
    assert await client.version() == 1


async def test_relay_side_cache_over_grpc(service: Running, redis: Redis, keys: Keys) -> None:
    client = service.client
    async with CachedAccessChecker(client, redis, keys) as cache:
        first = await cache.check("fred@example.com", "dino@bedrock.org", "core:data")
        assert not first.allowed
        assert cache.lookup("fred@example.com", "dino@bedrock.org", "core:data") == first
        await client.handle_operation(
            "fred@example.com",
            b"<set transID='2'><access owner='fred@example.com' actor='*@*'"
            b" actions='core:data' /></set>",
        )
        await eventually(
            lambda: cache.lookup("fred@example.com", "dino@bedrock.org", "core:data") is None
        )
        again = await cache.check("fred@example.com", "dino@bedrock.org", "core:data")
        assert again.allowed
        await eventually(lambda: cache.version == 1)
        assert (await cache.check("fred@example.com", "dino@bedrock.org", "core:data")).allowed
        assert cache.hits >= 1


async def test_metrics_are_counted(service: Running) -> None:
    await service.client.check("fred@example.com", "fred@example.com", "core:data")
    await service.client.handle_operation("fred@example.com", b"<bogus/>")
    registry = service.registry
    assert registry.get_sample_value("apexmesh_access_checks_total", {"result": "allowed"}) == 1
    assert (
        registry.get_sample_value(
            "apexmesh_access_operations_total", {"operation": "unknown", "code": "501"}
        )
        == 1
    )
