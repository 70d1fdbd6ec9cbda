"""The endpoint SDK against a small but real APEX peer over loopback TCP.

The peer below is written with :func:`apexmesh.aio.listen` and the APEX element model:
it accepts the APEX profile, answers a piggybacked or MSG attach with ``<ok />`` or an
error chosen by the endpoint (RFC 3340 section 4.4.1), answers data with ``<ok />``
(section 4.4.4.1) and records every payload octet for octet, sends a statusResponse from
``apex=report@example.com`` for each statusRequest (section 5.1), and can push data and
terminates to the client (sections 4.4.3 and 4.4.4.2).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
import trustme

from apexmesh.aio import (
    AcceptChannel,
    AuthenticationError,
    BeepConnection,
    Channel,
    ConnectionClosedError,
    RejectChannel,
    Reply,
    listen,
)
from apexmesh.aio.tasks import within
from apexmesh.apex.content import MimePart, parse_payload, resolve_content
from apexmesh.apex.data import Data, DataContent, Originator, Recipient
from apexmesh.apex.elements import Attach, Error, Ok, Terminate, parse_attach, parse_message
from apexmesh.apex.elements import Reply as ApexReply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.options import STATUS_REQUEST, Option, TargetHop
from apexmesh.apex.report import Destination, StatusResponse, report_data
from apexmesh.beep import events as ev
from apexmesh.beep.mime import beep_xml, split_entity
from apexmesh.beep.sasl import SaslServerExchange, StaticCredentials
from apexmesh.beep.session import SessionConfig
from apexmesh.beep.xml import parse_xml
from apexmesh.client import (
    APEX_PROFILE,
    ApexClient,
    ApexRequestError,
    AttachmentTerminatedError,
    SessionClosedError,
    XmlContent,
    connect_endpoint,
)
from tests.support.polling import scaled, wait_until

pytestmark = pytest.mark.integration

CREDENTIALS = StaticCredentials({"fred": "flintstone"})
DOMAIN = "example.com"
#: Endpoint addresses the peer refuses, and with which code (RFC 3340 section 4.4.1).
REFUSED = {"denied": 537, "taken": 554, "busy": 555}
#: Recipients the peer refuses data for (section 4.4.4.1, step 1).
BLOCKED = "blocked"
#: Endpoints the peer sends data to right after accepting their attach.
EAGER = "eager"

OK = beep_xml(Ok().to_xml())


def ep(text: str) -> Endpoint:
    return Endpoint.parse(text)


def error(code: int, text: str) -> bytes:
    return beep_xml(Error(code=code, text=text).to_xml())


def decide(attach: Attach) -> bytes:
    """The peer's attach decision: ok, or the error element (without entity headers)."""
    if attach.endpoint.domain != DOMAIN:
        return Error(code=553, text="not this administrative domain").to_xml()
    code = REFUSED.get(attach.endpoint.address)
    if code is not None:
        return Error(code=code, text="refused").to_xml()
    return Ok().to_xml()


@dataclass
class Peer:
    """A minimal APEX relay: every observation is kept for the tests."""

    conns: list[BeepConnection] = field(default_factory=list)
    starts: list[str | None] = field(default_factory=list)
    attaches: list[Attach] = field(default_factory=list)
    terminates: list[Terminate] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    data: list[Data] = field(default_factory=list)
    report_replies: list[Reply] = field(default_factory=list)
    eager_replies: list[asyncio.Future[Reply]] = field(default_factory=list)
    channel: Channel | None = None
    #: True: data is recorded but never answered.
    silent: bool = False
    channel_ready: asyncio.Event = field(default_factory=asyncio.Event)
    report_sent: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_start(
        self, conn: BeepConnection, request: ev.ChannelStartRequested
    ) -> AcceptChannel | RejectChannel:
        offer = next((p for p in request.profiles if p.uri == APEX_PROFILE), None)
        if offer is None:
            return RejectChannel(code=550, text="APEX only")
        self.starts.append(offer.content)
        answer: str | None = None
        if offer.content is not None:
            attach = parse_attach(offer.content)
            self.attaches.append(attach)
            answer = decide(attach).decode()
        return AcceptChannel(profile=APEX_PROFILE, content=answer, serve=self.serve)

    async def serve(self, channel: Channel) -> None:
        self.channel = channel
        self.channel_ready.set()
        while True:
            try:
                incoming = await channel.receive()
            except ConnectionClosedError:
                return
            payload = parse_payload(incoming.payload)
            message = parse_message(payload.control)
            if isinstance(message, Attach):
                self.attaches.append(message)
                answer = decide(message)
                (incoming.reply if answer == Ok().to_xml() else incoming.error)(beep_xml(answer))
                if message.endpoint.address == EAGER:
                    # Data right behind the ok, in the same write: the client must not
                    # answer it 550 while its attach() has yet to see the ok.
                    self.eager_replies.append(
                        channel.send(data_to([str(message.endpoint)], b"<early/>"))
                    )
            elif isinstance(message, Terminate):
                self.terminates.append(message)
                incoming.reply(OK)
            elif isinstance(message, Data):
                self.payloads.append(incoming.payload)
                self.data.append(message)
                if self.silent:
                    continue
                if any(r.identity.address == BLOCKED for r in message.recipients):
                    incoming.error(error(537, "access denied"))
                    continue
                incoming.reply(OK)
                for option in message.options:
                    if option.internal == STATUS_REQUEST:
                        self._report(channel, message, option.trans_id)

    def _report(self, channel: Channel, data: Data, trans_id: int) -> None:
        response = StatusResponse(
            trans_id=trans_id,
            destinations=tuple(
                Destination(identity=r.identity, reply=ApexReply(code=250, trans_id=None))
                for r in data.recipients
            ),
        )
        report = report_data(
            relay_domain=DOMAIN, originator=data.originator.identity, response=response
        )
        future = channel.send(beep_xml(report.to_xml()))

        def done(f: asyncio.Future[Reply]) -> None:
            if not f.cancelled() and f.exception() is None:
                self.report_replies.append(f.result())
                self.report_sent.set()

        future.add_done_callback(done)

    async def push(self, payload: bytes) -> Reply:
        """Send a MSG to the client on the APEX channel and wait for its answer."""
        await self.channel_ready.wait()
        assert self.channel is not None
        return await self.channel.send(payload)


def server_config(tls: bool) -> Callable[[], SessionConfig]:
    def factory(mechanism: str, tls_active: bool) -> SaslServerExchange:
        return SaslServerExchange(
            mechanism, CREDENTIALS, tls_active=tls_active, realm=DOMAIN, host="localhost"
        )

    return lambda: SessionConfig(
        profiles=(APEX_PROFILE,),
        tls_available=tls,
        sasl_mechanisms=("SCRAM-SHA-256",),
        sasl_server=factory,
    )


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_ssl(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    return context


@pytest.fixture(scope="module")
def client_ssl(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(context)
    return context


@pytest.fixture
async def peer(server_ssl: ssl.SSLContext) -> AsyncIterator[tuple[int, Peer]]:
    state = Peer()
    server = await listen(
        "127.0.0.1",
        0,
        server_config(True),
        ssl_context=server_ssl,
        on_start=state.on_start,
        on_connection=state.conns.append,
    )
    port = server.sockets[0].getsockname()[1]
    yield port, state
    for conn in state.conns:
        conn.abort()
    server.close()
    await server.wait_closed()


@pytest.fixture
async def client(peer: tuple[int, Peer]) -> AsyncIterator[ApexClient]:
    port, _ = peer
    apex = await connect_endpoint("127.0.0.1", port)
    yield apex
    await apex.close()


def data_to(recipients: list[str], content: bytes = b"<ping/>") -> bytes:
    """A data with inline XML content from wilma@example.com, as a relay delivers it."""
    data = Data(
        content="#Content",
        originator=Originator(identity=ep("wilma@example.com")),
        recipients=tuple(Recipient(identity=ep(r)) for r in recipients),
        data_content=DataContent(name="Content", content=content),
    )
    return beep_xml(data.to_xml())


# --------------------------------------------------------------------------- attach


async def test_first_attach_rides_on_the_start_and_the_second_is_a_msg(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    assert fred.attached
    assert len(state.starts) == 1
    piggyback = state.starts[0]
    assert piggyback is not None
    assert parse_attach(piggyback) == Attach(
        endpoint=ep("fred@example.com"), trans_id=fred.trans_id
    )
    wilma = await client.attach(ep("wilma@example.com"))
    assert wilma.attached
    assert len(state.starts) == 1  # same channel
    assert [a.endpoint for a in state.attaches] == [ep("fred@example.com"), ep("wilma@example.com")]
    assert fred.trans_id != wilma.trans_id
    assert all(1 <= a.trans_id <= 2_147_483_647 for a in state.attaches)
    assert set(client.attachments) == {fred, wilma}


@pytest.mark.parametrize(
    ("endpoint", "code"),
    [
        ("denied@example.com", 537),
        ("taken@example.com", 554),
        ("busy@example.com", 555),
        ("fred@rubble.com", 553),
    ],
)
@pytest.mark.parametrize("first", [True, False], ids=["on-start", "as-msg"])
async def test_attach_errors_carry_the_relay_code(
    client: ApexClient, peer: tuple[int, Peer], endpoint: str, code: int, first: bool
) -> None:
    _, state = peer
    if not first:
        await client.attach("fred@example.com")
    with pytest.raises(ApexRequestError) as info:
        await client.attach(endpoint)
    assert info.value.code == code
    assert info.value.trans_id == state.attaches[-1].trans_id
    # The channel stays usable: the next attach goes as a MSG on it.
    barney = await client.attach("barney@example.com")
    assert barney.attached
    assert len(state.starts) == 1
    assert ep(endpoint) not in {a.endpoint for a in client.attachments}


async def test_concurrent_attaches_share_one_channel(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    names = [f"user{i}@example.com" for i in range(10)]
    attachments = await asyncio.gather(*(client.attach(name) for name in names))
    assert all(a.attached for a in attachments)
    assert len(state.starts) == 1
    assert len({a.trans_id for a in attachments}) == 10


async def test_data_right_behind_the_attach_ok_is_accepted(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    await client.attach("fred@example.com")
    eager = await client.attach("eager@example.com")
    reply = await within(state.eager_replies[0], scaled(5))
    assert reply.kind == "RPY"
    assert (await within(eager.receive(), scaled(5))).content == b"<early/>"


async def test_attaching_twice_as_one_endpoint_is_refused_locally(client: ApexClient) -> None:
    await client.attach("fred@example.com")
    with pytest.raises(ApexRequestError) as info:
        await client.attach("fred@example.com")
    assert info.value.code == 554


async def test_attach_options_reach_the_relay(client: ApexClient, peer: tuple[int, Peer]) -> None:
    _, state = peer
    option = Option(external="http://example.com/opt", trans_id=7, content=b"<x/>")
    await client.attach("fred@example.com", options=[option])
    assert state.attaches[0].options == (option,)


# --------------------------------------------------------------------------- send


async def test_octet_content_travels_as_a_cid_mime_part_byte_exact(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    body = bytes(range(256)) * 64 + b"\r\n--apex-\r\n--\r\n"
    result = await fred.send("barney@example.com", body, content_type="image/gif")
    assert result.recipients == ("barney@example.com",)
    raw = state.payloads[-1]
    assert split_entity(raw).content_type == "multipart/related"
    assert body in raw
    payload = parse_payload(raw)
    data = parse_message(payload.control)
    assert isinstance(data, Data)
    assert data.content.startswith("cid:")
    assert data.originator.identity == ep("fred@example.com")
    assert [r.identity for r in data.recipients] == [ep("barney@example.com")]
    part = resolve_content(data, payload.parts)
    assert isinstance(part, MimePart)
    assert part.body == body
    assert part.content_type == "image/gif"


@pytest.mark.parametrize("as_element", [False, True])
async def test_xml_content_travels_inline_as_data_content(
    client: ApexClient, peer: tuple[int, Peer], as_element: bool
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    xml = b'<note xmlns="urn:example:note" n="1"><b>hi</b> &amp; more</note>'
    content = parse_xml(xml) if as_element else XmlContent(xml)
    await fred.send(["barney@example.com", "betty@example.com"], content)
    raw = state.payloads[-1]
    assert split_entity(raw).content_type == "application/beep+xml"
    assert b"<data-content Name='Content'>" + xml + b"</data-content>" in raw
    data = state.data[-1]
    assert data.content == "#Content"
    assert data.data_content is not None
    assert data.data_content.content == xml
    assert len(data.recipients) == 2


async def test_data_error_raises_with_its_code(client: ApexClient) -> None:
    fred = await client.attach("fred@example.com")
    with pytest.raises(ApexRequestError) as info:
        await fred.send("blocked@example.com", b"x")
    assert info.value.code == 537
    assert fred.attached  # a refused data does not end the attachment


async def test_text_content_is_refused(client: ApexClient) -> None:
    fred = await client.attach("fred@example.com")
    with pytest.raises(TypeError):
        await fred.send("barney@example.com", "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="media type"):
        await fred.send("barney@example.com", b"x", content_type="text/plain\r\nX-Evil: 1")


async def test_many_sends_pipeline(client: ApexClient, peer: tuple[int, Peer]) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    await asyncio.gather(*(fred.send("barney@example.com", b"%d" % i) for i in range(100)))
    assert len(state.payloads) == 100


async def test_submit_keeps_many_in_flight_without_tasks(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    tasks_before = len(asyncio.all_tasks())
    futures = [fred.submit("barney@example.com", b"%d" % i) for i in range(50)]
    assert len(asyncio.all_tasks()) == tasks_before
    results = await asyncio.gather(*futures)
    assert [r.recipients for r in results] == [("barney@example.com",)] * 50
    bodies = [
        resolve_content(data, parse_payload(raw).parts)
        for data, raw in zip(state.data[-50:], state.payloads[-50:], strict=True)
    ]
    assert [b.body for b in bodies if isinstance(b, MimePart)] == [b"%d" % i for i in range(50)]


async def test_submit_fails_its_future_with_the_relay_code(client: ApexClient) -> None:
    fred = await client.attach("fred@example.com")
    future = fred.submit("blocked@example.com", b"x")
    with pytest.raises(ApexRequestError) as info:
        await future
    assert info.value.code == 537


async def test_submit_refuses_at_once_what_cannot_be_sent(client: ApexClient) -> None:
    fred = await client.attach("fred@example.com")
    with pytest.raises(TypeError):
        fred.submit("barney@example.com", "text")  # type: ignore[arg-type]
    await fred.terminate()
    with pytest.raises(AttachmentTerminatedError):
        fred.submit("barney@example.com", b"x")


async def test_submit_fails_when_the_session_ends(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    state.silent = True  # the peer stops answering data
    before = len(state.data)
    future = fred.submit("barney@example.com", b"x")
    await wait_until(lambda: len(state.data) > before, what="the data at the peer")
    client.conn.abort()
    with pytest.raises(SessionClosedError):
        await future


async def test_content_ids_differ_and_the_boundary_never_cuts_a_body(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    await fred.send("barney@example.com", b"first")
    boundary = split_entity(state.payloads[-1]).headers["content-type"].split('"')[1]
    crafted = b"a\r\n--" + boundary.encode() + b"--\r\nb"  # the boundary in use, in a body
    await fred.send("barney@example.com", crafted)
    await fred.send("barney@example.com", b"third")
    payloads = [parse_payload(raw) for raw in state.payloads[-3:]]
    contents = [resolve_content(d, p.parts) for d, p in zip(state.data[-3:], payloads, strict=True)]
    assert [c.body for c in contents if isinstance(c, MimePart)] == [b"first", crafted, b"third"]
    assert len({d.content for d in state.data[-3:]}) == 3
    assert boundary.encode() not in state.payloads[-2].partition(crafted)[0]


# --------------------------------------------------------------------------- statusRequest


async def test_status_request_is_on_the_wire_and_its_report_is_collected(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    result = await fred.send("barney@example.com", b"hello", status_request=True)
    trans_id = result.status_trans_id
    assert trans_id is not None
    wire = (
        f"<option internal='statusRequest' targetHop='final' mustUnderstand='true' "
        f"transID='{trans_id}' />"
    ).encode()
    assert wire in state.payloads[-1]
    assert state.data[-1].options == (
        Option(
            internal=STATUS_REQUEST,
            target_hop=TargetHop.FINAL,
            must_understand=True,
            trans_id=trans_id,
        ),
    )
    reports = await result.reports(1, timeout=scaled(5))
    assert [r.trans_id for r in reports] == [trans_id]
    destination = reports[0].destinations[0]
    assert destination.identity == ep("barney@example.com")
    assert destination.reply.code == 250
    await within(state.report_sent.wait(), scaled(5))
    assert state.report_replies[0].kind == "RPY"  # the client answered the report ok
    assert fred.receive_nowait() is None  # a collected report is not queued


async def test_missing_reports_time_out(client: ApexClient) -> None:
    fred = await client.attach("fred@example.com")
    result = await fred.send("barney@example.com", b"hello", status_request=True)
    with pytest.raises(TimeoutError):
        await result.reports(2, timeout=scaled(0.2))  # the second never comes
    assert len(result.collected) == 1


async def test_uncollected_report_reaches_the_receive_queue(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    response = StatusResponse(
        trans_id=4242,
        destinations=(
            Destination(
                identity=ep("barney@example.com"), reply=ApexReply(code=550, trans_id=None)
            ),
        ),
    )
    report = report_data(relay_domain=DOMAIN, originator=fred.endpoint, response=response)
    reply = await state.push(beep_xml(report.to_xml()))
    assert reply.kind == "RPY"
    received = await within(fred.receive(), scaled(5))
    assert received.originator == ep("apex=report@example.com")
    assert received.status_response == response
    assert received.is_xml


async def test_reports_without_status_request_is_an_error(client: ApexClient) -> None:
    fred = await client.attach("fred@example.com")
    result = await fred.send("barney@example.com", b"x")
    with pytest.raises(ValueError, match="statusRequest"):
        await result.reports()


# --------------------------------------------------------------------------- receive


async def test_data_for_an_attached_recipient_is_accepted_and_queued(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    reply = await state.push(data_to(["fred@example.com"], b"<ping n='1'/>"))
    assert reply.kind == "RPY"
    assert split_entity(reply.payload).body == Ok().to_xml()
    received = await within(fred.receive(), scaled(5))
    assert received.originator == ep("wilma@example.com")
    assert received.recipients == (ep("fred@example.com"),)
    assert received.content == b"<ping n='1'/>"
    assert received.content_type == "application/beep+xml"


async def test_data_for_no_attached_recipient_is_550(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    reply = await state.push(data_to(["barney@example.com"]))
    assert reply.kind == "ERR"
    answer = parse_message(split_entity(reply.payload).body)
    assert isinstance(answer, Error)
    assert answer.code == 550
    # One attached recipient among several is enough (section 4.4.4.2 step 3).
    reply = await state.push(data_to(["barney@example.com", "fred@example.com"]))
    assert reply.kind == "RPY"
    received = await within(fred.receive(), scaled(5))
    assert received.recipients == (ep("barney@example.com"), ep("fred@example.com"))
    assert fred.receive_nowait() is None


async def test_octet_data_and_unprocessed_options_are_exposed(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    wilma = await client.attach("wilma@example.com")
    per_data = Option(internal="statusRequest", trans_id=9, must_understand=True)
    per_recipient = Option(external="http://example.com/x", trans_id=10, target_hop=TargetHop.ALL)
    body = b"\x00\x01binary\r\n"
    from apexmesh.apex.content import build_payload

    data = Data(
        content="cid:1@example.com",
        originator=Originator(identity=ep("barney@example.com")),
        recipients=(
            Recipient(identity=ep("fred@example.com"), options=(per_recipient,)),
            Recipient(identity=ep("wilma@example.com")),
        ),
        options=(per_data,),
    )
    part = MimePart(content_id="1@example.com", content_type="text/plain", body=body)
    reply = await state.push(build_payload(data, (part,), boundary="b0undary"))
    assert reply.kind == "RPY"
    for attachment in (fred, wilma):
        received = await within(attachment.receive(), scaled(5))
        assert received.content == body
        assert received.content_type == "text/plain"
        assert received.options == (per_data,)
        assert received.recipient_options[ep("fred@example.com")] == (per_recipient,)
        assert not received.is_xml
    # The client answered ok only; it sent no report for the statusRequest it got.
    assert state.data == []


async def test_malformed_data_is_answered_with_its_code(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    await client.attach("fred@example.com")
    reply = await state.push(beep_xml(b"<data content='#C'><originator/></data>"))
    assert reply.kind == "ERR"
    answer = parse_message(split_entity(reply.payload).body)
    assert isinstance(answer, Error)
    assert answer.code == 501


# --------------------------------------------------------------------------- terminate


async def test_relay_initiated_terminate_ends_the_attachment(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    wilma = await client.attach("wilma@example.com")
    waiter = asyncio.create_task(fred.receive())
    await asyncio.sleep(0)
    terminate = Terminate(trans_id=fred.trans_id, code=421, text="relay going down")
    reply = await state.push(beep_xml(terminate.to_xml()))
    assert reply.kind == "RPY"
    with pytest.raises(AttachmentTerminatedError) as info:
        await within(waiter, scaled(5))
    assert info.value.code == 421
    assert info.value.text == "relay going down"
    assert not fred.attached
    assert wilma.attached
    with pytest.raises(AttachmentTerminatedError):
        await fred.send("barney@example.com", b"x")
    # Data for fred is now refused; an unknown transaction is 550.
    assert (await state.push(data_to(["fred@example.com"]))).kind == "ERR"
    unknown = await state.push(beep_xml(Terminate(trans_id=fred.trans_id).to_xml()))
    assert unknown.kind == "ERR"
    # The relay's transID 0 ends every attachment.
    assert (await state.push(beep_xml(Terminate().to_xml()))).kind == "RPY"
    with pytest.raises(AttachmentTerminatedError) as info:
        await wilma.receive()
    assert info.value.code == 250


async def test_terminate_and_terminate_all(client: ApexClient, peer: tuple[int, Peer]) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    wilma = await client.attach("wilma@example.com")
    barney = await client.attach("barney@example.com")
    # Data queued before the terminate is still handed out.
    await state.push(data_to(["fred@example.com"]))
    await fred.terminate()
    assert state.terminates[-1] == Terminate(trans_id=fred.trans_id)
    assert (await fred.receive()).content == b"<ping/>"
    with pytest.raises(AttachmentTerminatedError) as info:
        await fred.receive()
    assert info.value.code == 250
    assert [item async for item in fred] == []
    await client.terminate_all()
    assert state.terminates[-1] == Terminate(trans_id=0)
    assert not wilma.attached
    assert not barney.attached
    assert client.attachments == ()
    # Endpoints can be attached again afterwards, with a fresh transID.
    again = await client.attach("fred@example.com")
    assert again.attached


async def test_close_wakes_receivers_and_refuses_more_work(client: ApexClient) -> None:
    fred = await client.attach("fred@example.com")
    waiter = asyncio.create_task(fred.receive())
    await asyncio.sleep(0)
    await client.close()
    with pytest.raises(AttachmentTerminatedError) as info:
        await within(waiter, scaled(5))
    assert info.value.code == 421
    with pytest.raises(SessionClosedError):
        await client.attach("wilma@example.com")


async def test_relay_closing_the_session_ends_attachments(
    client: ApexClient, peer: tuple[int, Peer]
) -> None:
    _, state = peer
    fred = await client.attach("fred@example.com")
    state.conns[0].abort()
    with pytest.raises(AttachmentTerminatedError) as info:
        await within(fred.receive(), scaled(5))
    assert info.value.code == 421


# --------------------------------------------------------------------------- TLS + SASL


async def test_tls_and_scram_before_the_apex_channel(
    peer: tuple[int, Peer], client_ssl: ssl.SSLContext
) -> None:
    port, state = peer
    async with await connect_endpoint(
        "127.0.0.1",
        port,
        ssl_context=client_ssl,
        server_hostname="localhost",
        sasl=("SCRAM-SHA-256", "fred", "flintstone"),
    ) as apex:
        assert apex.conn.session.tls_active
        assert state.conns[0].session.tls_active
        assert state.conns[0].session.peer_identity == "fred"
        fred = await apex.attach("fred@example.com")
        await fred.send("barney@example.com", b"over tls")
        assert b"over tls" in state.payloads[-1]


async def test_wrong_password_fails_and_closes(
    peer: tuple[int, Peer], client_ssl: ssl.SSLContext
) -> None:
    port, _ = peer
    with pytest.raises(AuthenticationError) as info:
        await connect_endpoint(
            "127.0.0.1",
            port,
            ssl_context=client_ssl,
            server_hostname="localhost",
            sasl=("SCRAM-SHA-256", "fred", "wrong"),
        )
    assert info.value.code == 535


async def test_refused_apex_profile_is_a_request_error() -> None:
    async def refuse(
        conn: BeepConnection, request: ev.ChannelStartRequested
    ) -> AcceptChannel | RejectChannel:
        return RejectChannel(code=550, text="no APEX here")

    server = await listen("127.0.0.1", 0, SessionConfig(profiles=(APEX_PROFILE,)), on_start=refuse)
    try:
        port = server.sockets[0].getsockname()[1]
        async with await connect_endpoint("127.0.0.1", port) as apex:
            with pytest.raises(ApexRequestError) as info:
                await apex.attach("fred@example.com")
            assert info.value.code == 550
    finally:
        server.close()
        await server.wait_closed()
