"""Relay-relay discovery by DNS SRV (RFC 3340 section 3.1) against a real DNS server.

A tiny authoritative DNS server (tests/support/dns_server.py) answers
``_apex-mesh._tcp.DOMAIN`` SRV queries; the relay's mesh pool resolves through it, orders
the targets as RFC 2782 says (lowest priority first, weighted within one), and reports
550 for a domain no relay serves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import dns.asyncresolver
import pytest

from services.relay.mesh import MeshError, MeshPool
from tests.support.dns_server import dns_server

pytestmark = pytest.mark.integration

RECORDS = {
    "_apex-mesh._tcp.rubble.com.": [
        "20 5 10289 backup.rubble.com.",
        "10 1 10300 relay-b.rubble.com.",
        "10 9 10301 relay-a.rubble.com.",
    ],
}


@pytest.fixture
async def resolver() -> AsyncIterator[dns.asyncresolver.Resolver]:
    async with dns_server(RECORDS) as answering:
        yield answering


async def test_srv_record_locates_the_preferred_relay(resolver: dns.asyncresolver.Resolver) -> None:
    pool = MeshPool(
        domain="example.com", routes={}, ssl_context=None, credentials={}, resolver=resolver
    )
    targets, static = await pool._locate("rubble.com")
    assert not static
    # RFC 2782: priority 10 before 20; within it, the weights decide (9 against 1)
    assert {t[0] for t in targets[:2]} == {"relay-a.rubble.com", "relay-b.rubble.com"}
    assert targets[2] == ("backup.rubble.com", 10289)


async def test_static_route_wins_over_dns(resolver: dns.asyncresolver.Resolver) -> None:
    pool = MeshPool(
        domain="example.com",
        routes={"rubble.com": "127.0.0.1:4242"},
        ssl_context=None,
        credentials={},
        resolver=resolver,
    )
    assert await pool._locate("rubble.com") == ([("127.0.0.1", 4242)], True)


async def test_domain_without_relay_gets_550(resolver: dns.asyncresolver.Resolver) -> None:
    pool = MeshPool(
        domain="example.com", routes={}, ssl_context=None, credentials={}, resolver=resolver
    )
    with pytest.raises(MeshError) as info:
        await pool._locate("slate.com")
    assert info.value.outcome.code == 550
    outcome = await pool.send("slate.com", b"")
    assert outcome.code == 550
