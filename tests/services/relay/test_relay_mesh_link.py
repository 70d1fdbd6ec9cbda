"""The relay-relay link used in both directions (RFC 3340 sections 2.1 and 4.5.2): the
relay that initiated the link reads and processes the data and terminate its peer sends
back over it. The peer here is a stand-in listening relay of ``slate.com`` built on the
BEEP adapter (a foreign implementation, as Vortex or beepcore-java would be), reached
through a static route."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from apexmesh.aio import AcceptChannel, BeepConnection, Channel, Incoming, RejectChannel, listen
from apexmesh.apex.content import parse_payload
from apexmesh.beep import events as ev
from apexmesh.beep.mime import beep_xml
from apexmesh.beep.session import SessionConfig
from apexmesh.beep.xml import parse_xml
from tests.support.mesh import Mesh, cid_payload, endpoint_client, receive
from tests.support.polling import scaled

pytestmark = pytest.mark.integration

APEX = "http://iana.org/beep/APEX"


@dataclass
class ForeignRelay:
    """A listening relay of slate.com: accepts the bind, answers data ``ok``, and keeps
    the channel so the test can send over it."""

    port: int = 0
    channel: Channel | None = None
    bound: asyncio.Event = field(default_factory=asyncio.Event)
    received: asyncio.Queue[Incoming] = field(default_factory=asyncio.Queue)

    async def on_start(
        self, conn: BeepConnection, request: ev.ChannelStartRequested
    ) -> AcceptChannel | RejectChannel:
        return AcceptChannel(profile=APEX, content="<ok />", serve=self.serve)

    async def serve(self, channel: Channel) -> None:
        self.channel = channel
        self.bound.set()
        while True:
            incoming = await channel.receive()
            incoming.reply(beep_xml(b"<ok />"))
            await self.received.put(incoming)


@pytest.fixture
async def slate(mesh: Mesh) -> AsyncIterator[ForeignRelay]:
    foreign = ForeignRelay()
    server = await listen(
        "127.0.0.1", 0, lambda: SessionConfig(profiles=(APEX,)), on_start=foreign.on_start
    )
    foreign.port = server.sockets[0].getsockname()[1]
    mesh.a.mesh.routes["slate.com"] = f"127.0.0.1:{foreign.port}"
    try:
        yield foreign
    finally:
        server.close()


async def open_link(mesh: Mesh, slate: ForeignRelay) -> None:
    """fred (pod a) sends to slate.com: pod a binds to the foreign relay."""
    async with endpoint_client(mesh.a.edge_port) as client:
        fred = await client.attach("fred@example.com")
        await fred.send("mr.slate@slate.com", b"hello slate")
        async with asyncio.timeout(scaled(5)):
            incoming = await slate.received.get()
    control = parse_xml(parse_payload(incoming.payload).control)
    assert control.find("originator").get("identity") == "fred@example.com"  # type: ignore[union-attr]


FROM_SLATE = (
    "<data content='cid:1@slate.com'><originator identity='mr.slate@slate.com' />"
    "<recipient identity='barney@example.com' /></data>"
)


async def test_data_sent_back_over_the_link_is_delivered(mesh: Mesh, slate: ForeignRelay) -> None:
    await open_link(mesh, slate)
    assert slate.channel is not None
    async with endpoint_client(mesh.b.edge_port) as client:
        barney = await client.attach("barney@example.com")
        async with asyncio.timeout(scaled(5)):
            reply = await slate.channel.request(
                cid_payload(FROM_SLATE, "1@slate.com", b"quarry closes")
            )
        assert reply.kind == "RPY", reply.payload
        received = await receive(barney)
        assert received.content == b"quarry closes"
        assert str(received.originator) == "mr.slate@slate.com"


async def test_data_for_another_domains_originator_is_refused_537(
    mesh: Mesh, slate: ForeignRelay
) -> None:
    await open_link(mesh, slate)
    assert slate.channel is not None
    spoofed = FROM_SLATE.replace("mr.slate@slate.com", "fred@rubble.com")
    async with asyncio.timeout(scaled(5)):
        reply = await slate.channel.request(cid_payload(spoofed, "1@slate.com"))
    assert reply.kind == "ERR"
    assert b"537" in reply.payload


async def test_terminate_from_the_listening_relay_is_answered_and_ends_the_link(
    mesh: Mesh, slate: ForeignRelay
) -> None:
    await open_link(mesh, slate)
    assert slate.channel is not None
    async with asyncio.timeout(scaled(5)):
        reply = await slate.channel.request(beep_xml(b"<terminate transID='0' />"))
    assert reply.kind == "RPY"
    assert b"<ok" in reply.payload
    # the next data for slate.com opens a new link (a new bind arrives)
    first = slate.channel
    async with endpoint_client(mesh.a.edge_port) as client:
        fred = await client.attach("fred@example.com")
        await fred.send("mr.slate@slate.com", b"again")
        async with asyncio.timeout(scaled(5)):
            await slate.received.get()
    assert slate.channel is not first
