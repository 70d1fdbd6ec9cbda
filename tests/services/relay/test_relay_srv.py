"""Relay-relay discovery by DNS SRV (RFC 3340 section 3.1) against a real DNS server.

A tiny authoritative DNS responder (dnspython's message codec over a real UDP socket on
loopback) answers ``_apex-mesh._tcp.DOMAIN`` SRV queries; the relay's mesh pool resolves
through it, prefers the lowest priority and the highest weight, and reports 550 for a
domain no relay serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import dns.asyncresolver
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from services.relay.mesh import MeshError, MeshPool

pytestmark = pytest.mark.integration

RECORDS = {
    "_apex-mesh._tcp.rubble.com.": [
        "20 5 10289 backup.rubble.com.",
        "10 1 10300 relay-b.rubble.com.",
        "10 9 10301 relay-a.rubble.com.",
    ],
}


class _Responder(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        query = dns.message.from_wire(data)
        response = dns.message.make_response(query)
        question = query.question[0]
        answers = RECORDS.get(question.name.to_text())
        if answers is None or question.rdtype != dns.rdatatype.SRV:
            response.set_rcode(dns.rcode.NXDOMAIN)
        else:
            response.answer.append(
                dns.rrset.from_text_list(question.name, 60, "IN", "SRV", answers)
            )
        self.transport.sendto(response.to_wire(), addr)


@pytest.fixture
async def resolver() -> AsyncIterator[dns.asyncresolver.Resolver]:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(_Responder, local_addr=("127.0.0.1", 0))
    port = transport.get_extra_info("sockname")[1]
    resolver = dns.asyncresolver.Resolver(configure=False)
    resolver.port = port  # before nameservers: dnspython binds the port when they are set
    resolver.nameservers = ["127.0.0.1"]
    yield resolver
    transport.close()


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
