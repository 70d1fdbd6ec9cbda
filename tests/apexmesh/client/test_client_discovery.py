"""The SDK finds a domain's relay through DNS (RFC 3340 section 3.1): ``_apex-edge._tcp``
SRV records from a real DNS server on loopback, tried in RFC 2782 order with fallback to
the next target, and the registered port for a domain-literal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apexmesh.client import ApexClientError
from apexmesh.client.discovery import connect_domain, locate_relays
from apexmesh.store.keys import Keys
from tests.support.dns_server import dns_server
from tests.support.mesh import Mesh, running_mesh
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer, free_port

pytestmark = pytest.mark.integration


@pytest.fixture
async def mesh(redis_server: RedisServer, keys: Keys, tmp_path: Path) -> AsyncIterator[Mesh]:
    async with running_mesh(redis_server, keys, tmp_path) as running:
        yield running


async def test_the_srv_target_answers(mesh: Mesh) -> None:
    records = {"_apex-edge._tcp.example.com.": [f"10 5 {mesh.a.edge_port} localhost."]}
    async with dns_server(records) as resolver:
        client = await connect_domain("example.com", resolver=resolver)
        async with client:
            fred = await client.attach("fred@example.com")
            assert fred.attached


async def test_an_unreachable_target_falls_back_to_the_next(mesh: Mesh) -> None:
    dead = free_port()  # nothing listens there
    records = {
        "_apex-edge._tcp.example.com.": [
            f"10 100 {dead} localhost.",
            f"10 0 {dead} localhost.",
            f"20 5 {mesh.b.edge_port} localhost.",
        ]
    }
    async with dns_server(records) as resolver:
        order = await locate_relays("example.com", resolver=resolver, draw=lambda n: n)
        assert order == [("localhost", dead), ("localhost", dead), ("localhost", mesh.b.edge_port)]
        client = await connect_domain("example.com", resolver=resolver)
        async with client:
            await client.attach("barney@example.com")
    assert len(mesh.b.router.table) == 0  # released with the session


async def test_a_domain_without_records_is_550() -> None:
    async with dns_server({}) as resolver:
        with pytest.raises(ApexClientError) as info:
            await connect_domain("slate.com", resolver=resolver)
    assert info.value.code == 550


async def test_every_target_down_is_421() -> None:
    records = {"_apex-edge._tcp.example.com.": [f"10 5 {free_port()} localhost."]}
    async with dns_server(records) as resolver:
        with pytest.raises(ApexClientError) as info:
            await connect_domain("example.com", resolver=resolver, timeout=scaled(2.0))
    assert info.value.code == 421


async def test_a_domain_literal_uses_the_registered_port() -> None:
    assert await locate_relays("[127.0.0.1]") == [("127.0.0.1", 913)]
    assert await locate_relays("[127.0.0.1]", service="apex-mesh") == [("127.0.0.1", 912)]
