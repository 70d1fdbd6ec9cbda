"""Bad input against a running relay over real TCP: every malformed element, payload or
reference gets its reply code (RFC 3340 section 10: 500 poorly-formed XML, 501 non-valid
XML, 553 parameter invalid, 550 nothing by that name, 554 too large), and after each the
relay still serves the same session and other sessions."""

from __future__ import annotations

import asyncio

import pytest

from apexmesh.aio.tasks import within
from apexmesh.beep.mime import beep_xml
from apexmesh.client import ApexRequestError
from tests.support.mesh import (
    Mesh,
    apex_channel,
    ask,
    ask_payload,
    beep_session,
    cid_payload,
    endpoint_client,
)
from tests.support.polling import scaled

pytestmark = pytest.mark.integration

OK = ("RPY", "ok", "")
FRED = "<attach endpoint='fred@example.com' transID='1' />"


def err(code: int) -> tuple[str, str, str]:
    return ("ERR", "error", str(code))


async def still_serving(mesh: Mesh) -> None:
    """A fresh session on each example.com pod attaches, sends and delivers."""
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        endpoint_client(mesh.b.edge_port) as two,
    ):
        wilma = await one.attach("wilma@example.com")
        barney = await two.attach("barney@example.com")
        result = await wilma.send("barney@example.com", b"still here", status_request=True)
        async with asyncio.timeout(scaled(5)):
            assert (await barney.receive()).content == b"still here"
        [report] = await result.reports(1, timeout=scaled(5))
        assert [int(d.reply.code) for d in report.destinations] == [250]


BOMB = (
    "<?xml version='1.0'?><!DOCTYPE data ["
    "<!ENTITY a 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'>"
    + "".join(f"<!ENTITY {chr(98 + i)} '{('&' + chr(97 + i) + ';') * 10}'>" for i in range(8))
    + "]><data content='#Content'><originator identity='fred@example.com' />"
    "<recipient identity='barney@example.com' />"
    "<data-content Name='Content'><x>&i;</x></data-content></data>"
)


def data(body: str, content: str = " content='cid:1@example.com'") -> str:
    return f"<data{content}>{body}</data>"


FROM_FRED = "<originator identity='fred@example.com' />"
TO_BARNEY = "<recipient identity='barney@example.com' />"
BOTH = "<option internal='statusRequest' external='http://x.org/y' transID='3' />"
WILMA = "endpoint='wilma@example.com'"

ELEMENTS = [
    # (case, control element, expected answer) - sent as MSGs after fred attached
    ("poorly-formed XML -> 500", "<data content='cid:1@example.com'><originator", err(500)),
    ("not XML at all -> 500", "hello relay", err(500)),
    ("unknown element -> 501", "<frobnicate transID='2' />", err(501)),
    ("statusResponse is not an operation -> 501", "<statusResponse transID='2' />", err(501)),
    ("attach without endpoint -> 501", "<attach transID='2' />", err(501)),
    ("attach without transID -> 501", f"<attach {WILMA} />", err(501)),
    ("transID not a number -> 501", f"<attach {WILMA} transID='x' />", err(501)),
    ("transID out of range -> 501", f"<attach {WILMA} transID='2147483648' />", err(501)),
    ("terminate with a negative transID -> 501", "<terminate transID='-1' />", err(501)),
    ("bad endpoint syntax -> 553", "<attach endpoint='wilma at x.com' transID='2' />", err(553)),
    ("bad endpoint domain -> 553", "<attach endpoint='wilma@x y.com' transID='2' />", err(553)),
    ("data without recipient -> 501", data(FROM_FRED), err(501)),
    ("data without originator -> 501", data(TO_BARNEY), err(501)),
    ("data without content -> 501", data(FROM_FRED + TO_BARNEY, content=""), err(501)),
    ("bad recipient syntax -> 553", data(FROM_FRED + "<recipient identity='@x' />"), err(553)),
    ("option internal and external -> 501", data(FROM_FRED + TO_BARNEY + BOTH), err(501)),
    ("entity expansion (a DTD is refused) -> 501", BOMB, err(501)),
    ("ok/error are not requests -> 501", "<ok />", err(501)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("control", "expected"),
    [case[1:] for case in ELEMENTS],
    ids=[case[0] for case in ELEMENTS],
)
async def test_bad_element(mesh: Mesh, control: str, expected: tuple[str, str, str]) -> None:
    async with beep_session(mesh.a.edge_port) as conn:
        channel = await apex_channel(conn, FRED)
        assert await ask(channel, control) == expected
        # the same channel still works: fred is still attached and may send
        ok = data(FROM_FRED + "<recipient identity='pebbles@example.com' />")
        assert await ask_payload(channel, cid_payload(ok)) == OK
    await still_serving(mesh)


MULTIPART = b'Content-Type: multipart/related; boundary="b"\r\n\r\n'
TERMINATE = b"<terminate transID='1' />"
TEXT_PART = b"--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n--b--\r\n"

PAYLOADS = [
    ("not application/beep+xml -> 501", b"Content-Type: text/plain\r\n\r\n" + TERMINATE, err(501)),
    ("multipart without a beep+xml start -> 501", MULTIPART + TEXT_PART, err(501)),
    ("broken multipart -> 500", MULTIPART + b"no parts at all", err(500)),
    ("not UTF-8 -> 500", beep_xml(b"<terminate transID='\xff' />"), err(500)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("payload", "expected"),
    [case[1:] for case in PAYLOADS],
    ids=[case[0] for case in PAYLOADS],
)
async def test_bad_payload(mesh: Mesh, payload: bytes, expected: tuple[str, str, str]) -> None:
    async with beep_session(mesh.a.edge_port) as conn:
        channel = await apex_channel(conn, FRED)
        assert await ask_payload(channel, payload) == expected
        assert await ask(channel, "<terminate transID='1' />") == OK
    await still_serving(mesh)


async def test_bad_piggyback(mesh: Mesh) -> None:
    async with beep_session(mesh.a.edge_port) as conn:
        channel = await apex_channel(conn, "<attach endpoint='fred@example.com'")
        assert channel.reply_content is not None
        assert "code='500'" in channel.reply_content or 'code="500"' in channel.reply_content
        channel = await apex_channel(conn, "<terminate transID='1' />")
        assert channel.reply_content is not None
        assert "501" in channel.reply_content
        assert await ask(channel, FRED) == OK
    await still_serving(mesh)


async def test_cid_not_in_the_payload(mesh: Mesh) -> None:
    # The relay never looks into the content (section 4.4.4.1, last paragraph): the data
    # is accepted and relayed; the recipient application cannot resolve the reference
    # and answers 550, which the statusRequest reports.
    async with (
        beep_session(mesh.a.edge_port) as conn,
        endpoint_client(mesh.b.edge_port) as other,
    ):
        barney = await other.attach("barney@example.com")
        channel = await apex_channel(conn, FRED)
        control = (
            "<data content='cid:missing@example.com'><originator identity='fred@example.com' />"
            "<recipient identity='barney@example.com' />"
            "<option internal='statusRequest' targetHop='final' mustUnderstand='true'"
            " transID='5' /></data>"
        )
        assert await ask_payload(channel, cid_payload(control)) == OK
        async with asyncio.timeout(scaled(5)):
            incoming = await channel.receive()
        incoming.reply(beep_xml(b"<ok />"))
        text = incoming.payload.decode()
        assert "apex=report@example.com" in text
        assert "<reply code='550'" in text or '<reply code="550"' in text
        assert barney.receive_nowait() is None
    await still_serving(mesh)


async def test_ten_megabytes(mesh: Mesh) -> None:
    # Above the session's 4 MiB message limit: the BEEP session answers ERR 554 before
    # the message is complete; the session and the relay go on serving.
    async with beep_session(mesh.a.edge_port) as conn:
        channel = await apex_channel(conn, FRED)
        big = cid_payload(
            "<data content='cid:1@example.com'><originator identity='fred@example.com' />"
            "<recipient identity='barney@example.com' /></data>",
            body=b"x" * (10 * 1024 * 1024),
        )
        reply = await within(channel.request(big), scaled(20))
        assert reply.kind == "ERR"
        assert b"554" in reply.payload
        assert await ask(channel, "<terminate transID='1' />") == OK
    await still_serving(mesh)


async def test_sdk_sees_the_codes(mesh: Mesh) -> None:
    async with endpoint_client(mesh.a.edge_port) as client:
        with pytest.raises(ApexRequestError) as refused:
            await client.attach("fred@rubble.com")
        assert refused.value.code == 553
        fred = await client.attach("fred@example.com")
        assert fred.attached
    await still_serving(mesh)
