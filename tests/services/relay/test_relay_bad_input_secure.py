"""The bad-input list of RFC 3080 and RFC 3340, as one table, against a relay pod in
production settings (TLS required before anything else, SASL, access checks;
tests/support/secure.py). Every case gets its code, and an unrelated session (barney and
wilma, attached over TLS and SASL before the case) keeps exchanging data after it.

Framing errors end the offending session without a response (RFC 3080 section
2.2.1.1): their code is the one the relay ended the session with. Everything else is
answered on the wire: an ERR to a channel-zero MSG, or an APEX ``error`` element.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from apexmesh.aio import BeepConnection, ChannelStartError, ConnectionClosedError
from apexmesh.aio.tasks import within
from apexmesh.beep import events as ev
from apexmesh.beep.frames import encode_frame
from apexmesh.beep.management import ProfileOffer
from apexmesh.beep.mime import beep_xml
from apexmesh.client import ApexClient
from apexmesh.store.keys import Keys
from tests.support.mesh import APEX, apex_channel, ask, ask_payload, cid_payload, start_answer
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer
from tests.support.secure import HOST, SecureRelay, secure_relay

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

GREETING = beep_xml(b"<greeting />")
TLS_START = beep_xml(
    b"<start number='1'><profile uri='http://iana.org/beep/TLS'>"
    b"<![CDATA[<ready />]]></profile></start>"
)
FRED = "<attach endpoint='fred@example.com' transID='1' />"
TO_BARNEY = (
    "<data content='cid:1@example.com'><originator identity='{who}' />"
    "<recipient identity='barney@example.com' />{extra}</data>"
)


@dataclass
class Bystanders:
    """The unrelated session: wilma (one session) sends to barney (another)."""

    wilma: ApexClient
    barney: ApexClient

    async def still_exchange(self, n: int) -> None:
        sender = self.wilma.attachments[0]
        receiver = self.barney.attachments[0]
        await sender.send("barney@example.com", f"still here {n}".encode())
        async with asyncio.timeout(scaled(10)):
            received = await receiver.receive()
        assert received.content == f"still here {n}".encode()


@pytest.fixture
async def pod(locked_redis: RedisServer, keys: Keys, tmp_path: Path) -> AsyncIterator[SecureRelay]:
    async with secure_relay(locked_redis, keys, tmp_path) as running:
        yield running


@pytest.fixture
async def bystanders(pod: SecureRelay) -> AsyncIterator[Bystanders]:
    async with (
        await pod.client("wilma@example.com") as wilma,
        await pod.client("barney@example.com") as barney,
    ):
        await wilma.attach("wilma@example.com")
        await barney.attach("barney@example.com")
        pair = Bystanders(wilma, barney)
        await pair.still_exchange(0)
        yield pair


# --------------------------------------------------------------------------- raw frames


async def read_message(reader: asyncio.StreamReader) -> bytes:
    """One whole frame as the relay wrote it (header line to the END trailer)."""
    return await within(reader.readuntil(b"END\r\n"), scaled(10))


async def plain_session(pod: SecureRelay) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw connection that has read the relay's (TLS-only) greeting."""
    reader, writer = await asyncio.open_connection("127.0.0.1", pod.port)
    greeting = await read_message(reader)
    assert b"http://iana.org/beep/TLS" in greeting
    assert b"APEX" not in greeting
    return reader, writer


async def tls_session(pod: SecureRelay) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw connection tuned to TLS by hand (RFC 3080 section 3.1), both new greetings
    exchanged: the next channel-zero MSG is number 1 at seqno len(GREETING)."""
    reader, writer = await plain_session(pod)
    writer.write(
        encode_frame("RPY", 0, 0, False, 0, GREETING)
        + encode_frame("MSG", 0, 1, False, len(GREETING), TLS_START)
    )
    assert b"proceed" in await read_message(reader)
    await writer.start_tls(pod.client_context(), server_hostname=HOST)
    assert b"APEX" in await read_message(reader)
    writer.write(encode_frame("RPY", 0, 0, False, 0, GREETING))
    await writer.drain()
    return reader, writer


def msg0(payload: bytes) -> bytes:
    """Channel zero's first MSG after our greeting."""
    return encode_frame("MSG", 0, 1, False, len(GREETING), payload)


async def ended_with(
    send: Callable[[Callable[[object], None]], Awaitable[None]],
) -> int:
    """Run ``send`` (which tells the local address of the connection it opens) and return
    the code the relay ended that session with: its ``SessionTerminated``, which the
    relay's adapter logs as ``BEEP session with PEER terminated: CODE REASON``."""
    records: list[logging.LogRecord] = []
    ours: list[object] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect(logging.INFO)
    adapter = logging.getLogger("apexmesh.aio.connection")
    level = adapter.level
    adapter.addHandler(handler)
    adapter.setLevel(logging.INFO)
    try:
        await send(ours.append)
        async with asyncio.timeout(scaled(10)):
            while True:
                for record in records:
                    args = record.args if isinstance(record.args, tuple) else ()
                    if "terminated" in str(record.msg) and args and args[0] in ours:
                        return int(args[1])
                await asyncio.sleep(0.01)  # poll interval: the relay logs the end
    finally:
        adapter.removeHandler(handler)
        adapter.setLevel(level)


def framing_case(raw: Callable[[], bytes], *, plain: bool = False) -> Callable[..., Awaitable[int]]:
    async def run(pod: SecureRelay) -> int:
        async def send(note: Callable[[object], None]) -> None:
            reader, writer = await (plain_session(pod) if plain else tls_session(pod))
            note(writer.get_extra_info("sockname"))
            writer.write(raw())
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, TimeoutError):
                await writer.drain()
                await within(reader.read(), scaled(10))  # the relay closes, unanswered
            writer.close()

        return await ended_with(send)

    return run


def management_case(payload: bytes) -> Callable[..., Awaitable[int]]:
    """A channel-zero MSG answered with ERR (RFC 3080 section 2.3.1.5)."""

    async def run(pod: SecureRelay) -> int:
        reader, writer = await tls_session(pod)
        try:
            writer.write(msg0(payload))
            answer = await read_message(reader)
            assert answer.startswith(b"ERR 0 1 ")
            return int(answer.split(b"code='")[1][:3])
        finally:
            writer.close()

    return run


# --------------------------------------------------------------------------- APEX


@contextlib.asynccontextmanager
async def fred_channel(pod: SecureRelay) -> AsyncIterator[tuple[BeepConnection, object]]:
    conn = await pod.session("fred@example.com")
    try:
        channel = await apex_channel(conn, FRED)
        assert start_answer(channel) == ("ok", "")
        yield conn, channel
    finally:
        await conn.close()


def apex_case(control: str | bytes, *, payload: bool = False) -> Callable[..., Awaitable[int]]:
    """An APEX element (or a whole payload) sent by fred, attached; the error's code."""

    async def run(pod: SecureRelay) -> int:
        async with fred_channel(pod) as (_, channel):
            if payload:
                assert isinstance(control, bytes)
                kind, tag, code = await ask_payload(channel, control, within=30)  # type: ignore[arg-type]
            else:
                kind, tag, code = await ask(channel, control)  # type: ignore[arg-type]
            assert (kind, tag) == ("ERR", "error")
            # fred's own session is still served: data to himself, so that barney, a
            # bystander, receives only what the bystanders send (the relay answers
            # ok once the data is queued for its recipient: it arrives first)
            ok = TO_BARNEY.format(who="fred@example.com", extra="").replace(
                "barney@example.com", "fred@example.com"
            )
            assert await ask_payload(channel, cid_payload(ok)) == ("RPY", "ok", "")  # type: ignore[arg-type]
            return int(code)

    return run


async def many_channel_starts(pod: SecureRelay) -> int:
    """10,000 channel starts pipelined on one session: refused beyond the relay's limits
    (550 too many channels, 450 too many outstanding), or the session ended (554)."""
    conn = await pod.session("fred@example.com")
    loop = asyncio.get_running_loop()
    futures = []
    try:
        for _ in range(10_000):
            future: asyncio.Future[object] = loop.create_future()
            number = conn.call(lambda s: s.start_channel([ProfileOffer(uri=APEX)]))
            conn._starting[number] = future  # type: ignore[assignment]
            futures.append(future)
    except ConnectionClosedError:
        pass
    async with asyncio.timeout(scaled(60)):
        results = await asyncio.gather(*futures, return_exceptions=True)
    refused = {r.code for r in results if isinstance(r, ChannelStartError)}
    accepted = sum(1 for r in results if not isinstance(r, BaseException))
    await conn.close()
    assert accepted <= 1024
    if refused:
        assert refused <= {450, 550}
        return 550 if 550 in refused else 450
    ended = conn.closed.result()
    assert isinstance(ended, ev.SessionTerminated)
    return int(ended.code)


async def foreign_attach(pod: SecureRelay) -> int:
    async with fred_channel(pod) as (_, channel):
        kind, tag, code = await ask(channel, "<attach endpoint='barney@example.com' transID='2' />")  # type: ignore[arg-type]
        assert (kind, tag) == ("ERR", "error")
        return int(code)


async def bind_on_the_edge(pod: SecureRelay) -> int:
    async with fred_channel(pod) as (_, channel):
        kind, tag, code = await ask(channel, "<bind relay='example.com' transID='2' />")  # type: ignore[arg-type]
        assert (kind, tag) == ("ERR", "error")
        return int(code)


async def bind_as_another_domain(pod: SecureRelay) -> int:
    """fred, authenticated, binds as a relay of rubble.com on the apex-mesh port."""
    from apexmesh.aio import connect
    from apexmesh.beep.sasl import SaslClientExchange
    from tests.support.secure import PASSWORDS

    conn = await connect(
        "127.0.0.1", pod.relay.mesh_port, ssl_context=pod.client_context(), server_hostname=HOST
    )
    try:
        await conn.start_tls()
        exchange = SaslClientExchange(
            "SCRAM-SHA-256",
            authcid="fred@example.com",
            password=PASSWORDS["fred@example.com"],
            host=HOST,
        )
        await conn.authenticate("SCRAM-SHA-256", exchange)
        channel = await apex_channel(conn, "<bind relay='rubble.com' transID='1' />")
        return int(start_answer(channel)[1])
    finally:
        await conn.close()


BOMB = (
    "<!DOCTYPE data [<!ENTITY a 'aaaaaaaaaa'>"
    + "".join(f"<!ENTITY {chr(98 + i)} '{('&' + chr(97 + i) + ';') * 10}'>" for i in range(8))
    + "]><data content='#C'><originator identity='fred@example.com' />"
    "<recipient identity='barney@example.com' /><data-content Name='C'>&i;</data-content></data>"
)
XXE = (
    "<!DOCTYPE data [<!ENTITY x SYSTEM 'file:///etc/passwd'>]>"
    "<data content='#C'><originator identity='fred@example.com' />"
    "<recipient identity='barney@example.com' /><data-content Name='C'>&x;</data-content></data>"
)
DTD = "<!DOCTYPE terminate SYSTEM 'http://attacker.example/apex.dtd'><terminate transID='1' />"
DEEP = "<terminate transID='1'>" + "<x>" * 10_000 + "</x>" * 10_000 + "</terminate>"
MUST = "<option internal='noSuchOption' mustUnderstand='true' transID='9' />"
OVERSIZE = cid_payload(TO_BARNEY.format(who="fred@example.com", extra=""), body=b"x" * (10 << 20))


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[SecureRelay], Awaitable[int]]
    codes: frozenset[int]


def case(name: str, run: Callable[[SecureRelay], Awaitable[int]], *codes: int) -> Case:
    return Case(name, run, frozenset(codes))


CASES = [
    # RFC 3080 section 2.2.1.1: framing errors end the session without a response
    case("malformed header", framing_case(lambda: b"MSG 0 one . 52 10\r\n"), 500),
    case("header without END", framing_case(lambda: msg0(b"x")[:-5] + b"NOT\r\n"), 500),
    case(
        "wrong seqno",
        framing_case(lambda: encode_frame("MSG", 0, 1, False, 9999, beep_xml(b"<x/>"))),
        500,
    ),
    case(
        "window overrun",
        framing_case(lambda: msg0(beep_xml(b"<start number='1'>" + b" " * 5000 + b"</start>"))),
        500,
    ),
    case("size 2^31", framing_case(lambda: b"MSG 0 1 . 52 2147483648\r\n"), 500, 554),
    case(
        "frames before the greeting",
        framing_case(lambda: encode_frame("MSG", 0, 1, False, 0, TLS_START), plain=True),
        500,
    ),
    # RFC 3080 sections 2.3.1.2 and 2.3.1.5: channel management answered with ERR
    case("poorly-formed start", management_case(beep_xml(b"<start number='1'>")), 500),
    case(
        "unknown management element",
        management_case(beep_xml(b"<frobnicate number='1' />")),
        501,
    ),
    case(
        "start of an even channel",
        management_case(beep_xml(f"<start number='2'><profile uri='{APEX}' /></start>".encode())),
        501,
    ),
    case("10,000 channel starts", many_channel_starts, 450, 550, 554),
    # RFC 3340: APEX elements answered with an error element
    case("billion laughs", apex_case(BOMB), 501),
    case("XXE", apex_case(XXE), 501),
    case("DTD", apex_case(DTD), 501),
    case("10,000-deep nesting", apex_case(DEEP), 501),
    case(
        "invalid UTF-8",
        apex_case(beep_xml(b"<terminate transID='1'>\xff\xfe</terminate>"), payload=True),
        500,
    ),
    case("oversize message", apex_case(OVERSIZE, payload=True), 554),
    case("unknown element", apex_case("<frobnicate transID='2' />"), 501),
    case(
        "mustUnderstand option not understood",
        apex_case(cid_payload(TO_BARNEY.format(who="fred@example.com", extra=MUST)), payload=True),
        504,
    ),
    case(
        "spoofed originator",
        apex_case(cid_payload(TO_BARNEY.format(who="wilma@example.com", extra="")), payload=True),
        537,
    ),
    case("foreign attach", foreign_attach, 537),
    case("bind on the apex-edge service", bind_on_the_edge, 550),
    case("bind as another domain", bind_as_another_domain, 537),
]


@pytest.mark.parametrize("bad", CASES, ids=[c.name for c in CASES])
async def test_bad_input_gets_its_code_and_others_keep_exchanging(
    pod: SecureRelay, bystanders: Bystanders, bad: Case
) -> None:
    code = await bad.run(pod)
    assert code in bad.codes, f"{bad.name}: {code}"
    await bystanders.still_exchange(1)
    await bystanders.still_exchange(2)
