"""A tiny authoritative DNS server on loopback for tests (dnspython's message codec over a
real UDP socket): SRV answers from a table, NXDOMAIN for everything else. The code under
test resolves through a real resolver pointed at it; nothing is mocked."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import cast

import dns.asyncresolver
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset


class _Responder(asyncio.DatagramProtocol):
    def __init__(self, records: Mapping[str, Sequence[str]]) -> None:
        self.records = records

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        query = dns.message.from_wire(data)
        response = dns.message.make_response(query)
        question = query.question[0]
        answers = self.records.get(question.name.to_text())
        if answers is None or question.rdtype != dns.rdatatype.SRV:
            response.set_rcode(dns.rcode.NXDOMAIN)
        else:
            response.answer.append(
                dns.rrset.from_text_list(question.name, 60, "IN", "SRV", list(answers))
            )
        self.transport.sendto(response.to_wire(), addr)


@contextlib.asynccontextmanager
async def dns_server(
    records: Mapping[str, Sequence[str]],
) -> AsyncIterator[dns.asyncresolver.Resolver]:
    """Serve ``records`` (owner name with trailing dot -> SRV rdata texts such as
    ``"10 5 10288 relay.example.com."``); yield a resolver that asks only this server."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(
        lambda: _Responder(records), local_addr=("127.0.0.1", 0)
    )
    port = transport.get_extra_info("sockname")[1]
    resolver = dns.asyncresolver.Resolver(configure=False)
    resolver.port = port  # before nameservers: dnspython binds the port when they are set
    resolver.nameservers = ["127.0.0.1"]
    try:
        yield resolver
    finally:
        transport.close()
