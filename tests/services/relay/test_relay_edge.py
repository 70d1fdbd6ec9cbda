"""The relay's APEX channels under faults (services/relay/edge.py, RFC 3340 section 4.4
and RFC 3080 section 2.3.1.2), against a running mesh over real TCP and a real Redis:

* a session that drops while its piggybacked attach is being accepted leaves nothing
  attached (every claim is released on every failure path);
* a channel start that fails inside the relay (Redis down) is answered with an error;
* ``terminate`` with transID 0 ends every association of the BEEP session, not only of
  the channel it arrived on (section 4.4.3 step 1).
"""

from __future__ import annotations

import asyncio

import pytest

from apexmesh.aio import Channel, ChannelStartError
from apexmesh.aio.tasks import within
from apexmesh.beep.frames import encode_frame
from apexmesh.beep.mime import beep_xml
from apexmesh.client import ApexRequestError
from tests.support.mesh import Mesh, apex_channel, ask, beep_session, endpoint_client, start_answer
from tests.support.polling import scaled, wait_until
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

OK = ("RPY", "ok", "")
GREETING = beep_xml(b"<greeting />")


def start_with_attach(endpoint: str) -> bytes:
    """The initiator's greeting and a start of channel 1 with an attach piggybacked, as
    one write (RFC 3340 section 4.2)."""
    start = beep_xml(
        b"<start number='1'><profile uri='http://iana.org/beep/APEX'><![CDATA["
        + f"<attach endpoint='{endpoint}' transID='1' />".encode()
        + b"]]></profile></start>"
    )
    return encode_frame("RPY", 0, 0, False, 0, GREETING) + encode_frame(
        "MSG", 0, 1, False, len(GREETING), start
    )


async def attach_eventually(port: int, endpoint: str, within: float = 5.0) -> None:
    """Attach ``endpoint`` on a fresh session; a 554 (still attached elsewhere) is retried
    until ``within`` seconds have passed, then raised."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        async with endpoint_client(port) as client:
            try:
                await client.attach(endpoint)
            except ApexRequestError as exc:
                if exc.code != 554 or asyncio.get_running_loop().time() > deadline:
                    raise
            else:
                return
        await asyncio.sleep(0.1)  # poll interval while the relay releases


async def test_a_session_lost_during_a_piggybacked_attach_releases_the_claim(mesh: Mesh) -> None:
    for _ in range(3):
        reader, writer = await asyncio.open_connection("127.0.0.1", mesh.a.edge_port)
        await reader.readuntil(b"END\r\n")  # the relay's greeting
        writer.write(start_with_attach("fred@example.com"))
        await writer.drain()
        writer.close()  # gone before the relay can answer the start
        await writer.wait_closed()
    # The relay answers every later attach of fred with ok, on either pod, at once.
    await attach_eventually(mesh.b.edge_port, "fred@example.com", within=2.0)
    await attach_eventually(mesh.a.edge_port, "fred@example.com", within=2.0)
    assert len(mesh.a.router.table) == 0


async def test_a_start_that_fails_inside_the_relay_is_answered(
    mesh: Mesh, redis_server: RedisServer
) -> None:
    async with beep_session(mesh.a.edge_port) as conn:
        redis_server.stop()
        try:
            with pytest.raises(ChannelStartError) as refused:
                await within(
                    apex_channel(conn, "<attach endpoint='fred@example.com' transID='1' />"),
                    scaled(10),
                )
        finally:
            redis_server.start()
        assert refused.value.code in (421, 451)
        # The session goes on: once Redis is back the same start succeeds.
        attach = "<attach endpoint='fred@example.com' transID='1' />"

        async def started() -> Channel | None:
            try:
                return await apex_channel(conn, attach)
            except ChannelStartError:
                return None

        channel = await wait_until(started, 10, every=0.1, what="an attach once Redis is back")
        assert start_answer(channel) == ("ok", "")


async def test_terminate_zero_ends_the_associations_of_the_whole_session(mesh: Mesh) -> None:
    async with beep_session(mesh.a.edge_port) as conn:
        one = await apex_channel(conn, "<attach endpoint='fred@example.com' transID='1' />")
        two = await apex_channel(conn, "<attach endpoint='wilma@example.com' transID='1' />")
        assert start_answer(one) == ("ok", "")
        assert start_answer(two) == ("ok", "")
        assert await ask(one, "<terminate transID='0' />") == OK
        # wilma, attached over the other channel of the same session, is free too
        async with endpoint_client(mesh.b.edge_port) as other:
            await other.attach("wilma@example.com")
            await other.attach("fred@example.com")
        # and the channel wilma was attached over no longer knows its transID
        assert await ask(two, "<terminate transID='1' />") == ("ERR", "error", "550")
