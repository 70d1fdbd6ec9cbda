"""Malformed input, one table row per attack (STYLE.md 3.3 habit 8).

Each row builds a session in a known state from bytes, then feeds it the bad octets,
whole and one byte at a time. Outcomes:

* ``terminated(code)``: RFC 3080 section 2.2.1.1, the session ends without a response
  and reports ``SessionTerminated`` with the code;
* ``error(code)``: a poorly-formed or invalid channel-zero MSG is answered with an ERR
  carrying ``<error code=...>`` (section 2.3.1.5) and the session goes on.

No row may raise, and no row may leave the session waiting for octets it will never need.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from apexmesh.beep import events as ev
from apexmesh.beep.errors import LocalProtocolError
from apexmesh.beep.frames import Frame, FrameReader, encode_frame, encode_seq
from apexmesh.beep.management import ProfileOffer
from apexmesh.beep.mime import beep_xml, build_entity
from apexmesh.beep.session import Role, Session, SessionConfig, State

pytestmark = pytest.mark.unit

ECHO = "http://example.org/beep/echo"
GREETING = beep_xml(b"<greeting />")


class Peer:
    """Writes the other side's frames with correct sequence numbers unless told not to."""

    def __init__(self) -> None:
        self.seq: defaultdict[int, int] = defaultdict(int)

    def frame(
        self,
        keyword: str,
        channel: int,
        msgno: int,
        payload: bytes,
        *,
        more: bool = False,
        ansno: int | None = None,
        seqno: int | None = None,
    ) -> bytes:
        start = self.seq[channel] if seqno is None else seqno
        self.seq[channel] = start + len(payload)
        return encode_frame(keyword, channel, msgno, more, start, payload, ansno)

    def start(self, msgno: int, number: int, profile: str = ECHO) -> bytes:
        xml = f"<start number='{number}'><profile uri='{profile}' /></start>".encode()
        return self.frame("MSG", 0, msgno, beep_xml(xml))

    def mgmt(self, msgno: int, xml: bytes) -> bytes:
        return self.frame("MSG", 0, msgno, beep_xml(xml))


Setup = Callable[[], tuple[Session, Peer]]


def fresh(role: Role = Role.LISTENER) -> tuple[Session, Peer]:
    session = Session(role, SessionConfig(profiles=(ECHO,)))
    session.data_to_send()
    return session, Peer()


def greeted(role: Role = Role.LISTENER) -> tuple[Session, Peer]:
    session, peer = fresh(role)
    events = session.receive_data(peer.frame("RPY", 0, 0, GREETING))
    assert [type(e) for e in events] == [ev.GreetingReceived]
    return session, peer


def greeted_initiator() -> tuple[Session, Peer]:
    return greeted(Role.INITIATOR)


def with_channel() -> tuple[Session, Peer]:
    session, peer = greeted()
    events = session.receive_data(peer.start(1, 1))
    assert [type(e) for e in events] == [ev.ChannelStartRequested]
    session.accept_channel(1, ECHO)
    session.data_to_send()
    return session, peer


def awaiting_two() -> tuple[Session, Peer]:
    """Channel 1 open, and the session's MSGs 0 and 1 await replies."""
    session, peer = with_channel()
    session.send_msg(1, build_entity(b"first"))
    session.send_msg(1, build_entity(b"second"))
    session.data_to_send()
    return session, peer


def awaiting_unsent() -> tuple[Session, Peer]:
    """Channel 1 open; MSG 0 is partly sent (window full), MSG 1 is queued, unsent."""
    session, peer = with_channel()
    session.send_msg(1, build_entity(b"w" * 5000))
    session.send_msg(1, build_entity(b"queued"))
    assert b"MSG 1 1 " not in session.data_to_send()
    return session, peer


def initiator_starting() -> tuple[Session, Peer]:
    """An initiator whose start for channel 1 (offering ECHO) awaits its answer."""
    session, peer = greeted(Role.INITIATOR)
    session.start_channel([ProfileOffer(uri=ECHO)])
    session.data_to_send()
    return session, peer


@dataclass(frozen=True)
class Row:
    name: str
    setup: Setup
    attack: Callable[[Peer], bytes]
    #: "terminated" or "error"
    outcome: str
    code: int


def e(xml: str) -> Callable[[Peer], bytes]:
    """A channel-zero MSG 1 carrying ``xml``."""
    return lambda p: p.mgmt(1, xml.encode())


BILLION_LAUGHS = (
    "<!DOCTYPE start [<!ENTITY a 'aaaaaaaaaa'><!ENTITY b '&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;'>"
    "<!ENTITY c '&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;'>]>"
    "<start number='1'><profile uri='&c;' /></start>"
)
EXTERNAL_ENTITY = (
    "<!DOCTYPE start [<!ENTITY x SYSTEM 'file:///etc/passwd'>]>"
    "<start number='1'><profile uri='http://example.org/&x;' /></start>"
)

ROWS = [
    # --- framing (section 2.2.1.1): terminate without a response --------------------
    Row(
        "bad-keyword", greeted, lambda p: b"FOO 0 1 . 52 10\r\n0123456789END\r\n", "terminated", 500
    ),
    Row("lowercase-keyword", greeted, lambda p: b"msg 0 1 . 52 0\r\nEND\r\n", "terminated", 500),
    Row("non-numeric-msgno", greeted, lambda p: b"MSG 0 x . 52 0\r\nEND\r\n", "terminated", 500),
    Row("negative-number", greeted, lambda p: b"MSG 0 -1 . 52 0\r\nEND\r\n", "terminated", 500),
    Row("bad-continuation", greeted, lambda p: b"MSG 0 1 + 52 0\r\nEND\r\n", "terminated", 500),
    Row(
        "channel-out-of-range",
        greeted,
        lambda p: b"MSG 2147483648 0 . 0 0\r\nEND\r\n",
        "terminated",
        500,
    ),
    Row(
        "msgno-out-of-range",
        greeted,
        lambda p: b"MSG 0 9999999999 . 52 0\r\nEND\r\n",
        "terminated",
        500,
    ),
    Row(
        "seqno-out-of-range",
        greeted,
        lambda p: b"MSG 0 1 . 4294967296 0\r\nEND\r\n",
        "terminated",
        500,
    ),
    Row(
        "eleven-digit-number",
        greeted,
        lambda p: b"MSG 0 1 . 52 00000000000\r\nEND\r\n",
        "terminated",
        500,
    ),
    Row("double-space", greeted, lambda p: b"MSG  0 1 . 52 0\r\nEND\r\n", "terminated", 500),
    Row("bare-lf-header", greeted, lambda p: b"MSG 0 1 . 52 0\nEND\r\n", "terminated", 500),
    Row("header-too-long", greeted, lambda p: b"MSG " + b"1" * 200, "terminated", 500),
    Row("missing-end", greeted, lambda p: b"MSG 0 1 . 52 4\r\nabcdXYZ\r\n", "terminated", 500),
    Row("size-too-small", greeted, lambda p: b"MSG 0 1 . 52 3\r\nabcdEND\r\n", "terminated", 500),
    Row(
        "size-too-large", greeted, lambda p: b"MSG 0 1 . 52 5\r\nabcdEND\r\nMSG", "terminated", 500
    ),
    Row(
        "wrong-seqno",
        greeted,
        lambda p: p.frame("MSG", 0, 1, beep_xml(b"<ok />"), seqno=51),
        "terminated",
        500,
    ),
    Row(
        "window-overrun",
        with_channel,
        lambda p: p.frame("MSG", 1, 0, b"\r\n" + b"x" * 5000),
        "terminated",
        500,
    ),
    Row(
        "msg-on-unstarted-channel",
        greeted,
        lambda p: p.frame("MSG", 5, 0, b"\r\nhi"),
        "terminated",
        500,
    ),
    Row(
        "rpy-to-msgno-never-sent",
        with_channel,
        lambda p: p.frame("RPY", 1, 3, b"\r\nhi"),
        "terminated",
        500,
    ),
    Row(
        "rpy-when-nothing-sent-on-zero",
        greeted,
        lambda p: p.frame("RPY", 0, 1, beep_xml(b"<ok />")),
        "terminated",
        500,
    ),
    Row(
        "rpy-to-msg-not-yet-sent",
        awaiting_unsent,
        lambda p: p.frame("ERR", 1, 0, b"\r\nno") + p.frame("RPY", 1, 1, b"\r\nguess"),
        "terminated",
        500,
    ),
    Row(
        "start-answered-with-profile-not-offered",
        initiator_starting,
        lambda p: p.frame("RPY", 0, 1, beep_xml(b"<profile uri='http://example.org/other' />")),
        "terminated",
        500,
    ),
    Row(
        "reply-out-of-order",
        awaiting_two,
        lambda p: p.frame("RPY", 1, 1, b"\r\nsecond first"),
        "terminated",
        500,
    ),
    Row(
        "keyword-change-mid-message",
        awaiting_two,
        lambda p: p.frame("RPY", 1, 0, b"\r\npart", more=True) + p.frame("ERR", 1, 0, b"x"),
        "terminated",
        500,
    ),
    Row(
        "msgno-change-mid-message",
        with_channel,
        lambda p: p.frame("MSG", 1, 0, b"\r\npart", more=True) + p.frame("MSG", 1, 1, b"x"),
        "terminated",
        500,
    ),
    Row(
        "msg-reused-while-pending",
        with_channel,
        lambda p: p.frame("MSG", 1, 0, b"\r\na") + p.frame("MSG", 1, 0, b"\r\nb"),
        "terminated",
        500,
    ),
    Row(
        "nul-with-payload", awaiting_two, lambda p: p.frame("NUL", 1, 0, b"oops"), "terminated", 500
    ),
    Row(
        "nul-intermediate",
        awaiting_two,
        lambda p: p.frame("NUL", 1, 0, b"", more=True),
        "terminated",
        500,
    ),
    Row(
        "nul-after-rpy-frame",
        awaiting_two,
        lambda p: p.frame("RPY", 1, 0, b"\r\n", more=True) + p.frame("NUL", 1, 0, b""),
        "terminated",
        500,
    ),
    Row(
        "ans-without-ansno",
        awaiting_two,
        lambda p: p.frame("ANS", 1, 0, b"\r\na"),
        "terminated",
        500,
    ),
    Row(
        "rpy-with-ansno",
        awaiting_two,
        lambda p: p.frame("RPY", 1, 0, b"\r\na", ansno=3),
        "terminated",
        500,
    ),
    Row("ans-on-channel-zero", greeted, lambda p: b"", "none", 0),  # placeholder replaced below
    Row(
        "huge-size-header", with_channel, lambda p: b"MSG 1 0 . 0 2000000000\r\n", "terminated", 500
    ),
    Row("garbage", greeted, lambda p: b"\x00\xff\xfe garbage \r\n", "terminated", 500),
    Row("http-request", fresh, lambda p: b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "terminated", 500),
    Row(
        "tls-client-hello",
        fresh,
        lambda p: b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        "terminated",
        500,
    ),
    Row("msg-before-greeting", fresh, lambda p: p.start(1, 1), "terminated", 500),
    Row(
        "greeting-msgno-not-zero",
        fresh,
        lambda p: p.frame("RPY", 0, 1, GREETING),
        "terminated",
        500,
    ),
    Row(
        "greeting-not-a-greeting",
        fresh,
        lambda p: p.frame("RPY", 0, 0, beep_xml(b"<ok />")),
        "terminated",
        500,
    ),
    Row(
        "greeting-poorly-formed",
        fresh,
        lambda p: p.frame("RPY", 0, 0, beep_xml(b"<greeting>")),
        "terminated",
        500,
    ),
    Row("greeting-twice", greeted, lambda p: p.frame("RPY", 0, 0, GREETING), "terminated", 500),
    Row("seq-unknown-channel", greeted, lambda p: encode_seq(9, 0, 4096), "terminated", 500),
    Row("seq-acks-unsent-octets", greeted, lambda p: encode_seq(0, 99999, 4096), "terminated", 500),
    Row("seq-window-out-of-range", greeted, lambda p: encode_seq(0, 0, 1 << 31), "terminated", 500),
    Row("seq-bad-syntax", greeted, lambda p: b"SEQ 0 x 4096\r\n", "terminated", 500),
    # --- channel zero (section 2.3.1.5): ERR with an error element -----------------
    Row("mgmt-poorly-formed-xml", greeted, e("<start number='1'><profile"), "error", 500),
    Row("mgmt-not-xml", greeted, e("hello there"), "error", 500),
    Row("mgmt-unknown-element", greeted, e("<bogus />"), "error", 501),
    Row("mgmt-greeting-as-msg", greeted, e("<greeting />"), "error", 501),
    Row(
        "mgmt-start-number-missing", greeted, e("<start><profile uri='x' /></start>"), "error", 501
    ),
    Row(
        "mgmt-start-number-text",
        greeted,
        e("<start number='one'><profile uri='x' /></start>"),
        "error",
        501,
    ),
    Row(
        "mgmt-start-number-zero",
        greeted,
        e("<start number='0'><profile uri='x' /></start>"),
        "error",
        501,
    ),
    Row("mgmt-start-no-profile", greeted, e("<start number='1' />"), "error", 501),
    Row(
        "mgmt-start-bad-encoding",
        greeted,
        e("<start number='1'><profile uri='x' encoding='rot13'>abc</profile></start>"),
        "error",
        501,
    ),
    Row(
        "mgmt-start-wrong-parity",
        greeted,
        e(f"<start number='2'><profile uri='{ECHO}' /></start>"),
        "error",
        501,
    ),
    Row(
        "mgmt-start-wrong-parity-initiator",
        greeted_initiator,
        e(f"<start number='1'><profile uri='{ECHO}' /></start>"),
        "error",
        501,
    ),
    Row(
        "mgmt-start-unknown-profile",
        greeted,
        e("<start number='1'><profile uri='http://example.org/none' /></start>"),
        "error",
        550,
    ),
    Row(
        "mgmt-start-channel-in-use",
        with_channel,
        lambda p: p.mgmt(2, f"<start number='1'><profile uri='{ECHO}' /></start>".encode()),
        "error",
        550,
    ),
    Row("mgmt-close-bad-code", greeted, e("<close number='1' code='abc' />"), "error", 501),
    Row("mgmt-close-unknown-channel", greeted, e("<close number='7' code='200' />"), "error", 553),
    Row("mgmt-doctype-billion-laughs", greeted, e(BILLION_LAUGHS), "error", 501),
    Row("mgmt-external-entity", greeted, e(EXTERNAL_ENTITY), "error", 501),
    Row(
        "mgmt-xml-declaration",
        greeted,
        e("<?xml version='1.0'?><start number='1'><profile uri='x' /></start>"),
        "error",
        501,
    ),
    Row("mgmt-deep-nesting", greeted, e("<a>" * 100 + "</a>" * 100), "error", 501),
    Row(
        "mgmt-unterminated-mime-headers",
        greeted,
        lambda p: p.frame("MSG", 0, 1, b"Content-Type: application/beep+xml\r\n<ok />"),
        "error",
        500,
    ),
]
ROWS = [r for r in ROWS if r.outcome != "none"]
ROWS.append(
    Row(
        "ans-on-channel-zero",
        greeted,
        lambda p: p.frame("ANS", 0, 0, beep_xml(b"<ok />"), ansno=0),
        "terminated",
        500,
    )
)


def run(row: Row, *, bytewise: bool) -> tuple[Session, list[ev.Event], bytes, Peer]:
    session, peer = row.setup()
    data = row.attack(peer)
    events: list[ev.Event] = []
    chunks = [data[i : i + 1] for i in range(len(data))] if bytewise else [data]
    for chunk in chunks:
        events += session.receive_data(chunk)
    return session, events, session.data_to_send(), peer


def error_codes(output: bytes) -> list[tuple[int, int]]:
    """(msgno, code) of every ERR on channel zero in ``output``."""
    reader = FrameReader(1 << 20)
    reader.feed(output)
    found = []
    while (frame := reader.next_frame()) is not None:
        if isinstance(frame, Frame) and frame.keyword == "ERR" and frame.channel == 0:
            match = re.search(rb"<error code='(\d{3})'", frame.payload)
            assert match, frame.payload
            found.append((frame.msgno, int(match.group(1))))
    return found


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_malformed_input(row: Row, bytewise: bool) -> None:
    session, events, output, peer = run(row, bytewise=bytewise)
    terminated = [x for x in events if isinstance(x, ev.SessionTerminated)]
    if row.outcome == "terminated":
        assert [(type(x), x.code) for x in terminated] == [(ev.SessionTerminated, row.code)]
        assert session.state is State.CLOSED
        assert output == b""  # no response (section 2.2.1.1)
        # Whatever follows is ignored, quietly.
        assert session.receive_data(b"MSG 0 1 . 0 0\r\nEND\r\n") == []
        assert session.data_to_send() == b""
    else:
        assert not terminated, terminated
        assert error_codes(output) == [(1 if "in-use" not in row.name else 2, row.code)]
        assert session.state is State.OPEN
        # The session still answers the next request.
        msgno = 9
        session.receive_data(peer.mgmt(msgno, b"<close number='77' code='200' />"))
        assert error_codes(session.data_to_send()) == [(msgno, 553)]


def test_entities_are_not_expanded_in_the_answer() -> None:
    _, _, output, _ = run(Row("x", greeted, e(BILLION_LAUGHS), "error", 501), bytewise=False)
    assert b"aaaaaaaaaa" not in output
    _, _, output, _ = run(Row("x", greeted, e(EXTERNAL_ENTITY), "error", 501), bytewise=False)
    assert b"root:" not in output


def test_oversized_greeting_ends_the_session_with_554() -> None:
    """A greeting may span frames (the peer waits for SEQ), but not past 64 KiB."""
    session, peer = fresh()
    events: list[ev.Event] = []
    payload = beep_xml(b"<greeting>" + b"<profile uri='http://example.org/p' />" * 3000)
    for offset in range(0, len(payload), 2048):
        piece = payload[offset : offset + 2048]
        more = offset + 2048 < len(payload)
        events += session.receive_data(peer.frame("RPY", 0, 0, piece, more=more))
        if events:
            break
        # The session keeps the window open with SEQ while the greeting is small.
        reader = FrameReader(1 << 20)
        reader.feed(session.data_to_send())
        assert reader.next_frame() is not None
    assert [(type(x), x.code) for x in events] == [(ev.SessionTerminated, 554)]


def test_oversized_message_gets_a_preemptive_554_and_the_rest_is_discarded() -> None:
    """Section 2.6.3: ERR before the MSG is complete; its remaining frames are dropped."""
    session = Session(Role.LISTENER, SessionConfig(profiles=(ECHO,), max_message_octets=10_000))
    session.data_to_send()
    peer = Peer()
    session.receive_data(peer.frame("RPY", 0, 0, GREETING))
    session.receive_data(peer.start(1, 1))
    session.accept_channel(1, ECHO)
    session.data_to_send()
    events: list[ev.Event] = []
    output = b""
    total = 30_000
    for offset in range(0, total, 2000):
        more = offset + 2000 < total
        events += session.receive_data(peer.frame("MSG", 1, 0, b"z" * 2000, more=more))
        output += session.data_to_send()
    events += session.receive_data(peer.frame("MSG", 1, 1, build_entity(b"small")))
    output += session.data_to_send()
    events = [x for x in events if not isinstance(x, ev.ChannelStarted)]
    assert events == [ev.MessageReceived(channel=1, msgno=1, payload=b"\r\nsmall")]
    reader = FrameReader(1 << 20)
    reader.feed(output)
    errs = []
    while (frame := reader.next_frame()) is not None:
        if isinstance(frame, Frame):
            errs.append((frame.keyword, frame.channel, frame.msgno))
            assert b"code='554'" in frame.payload
    # The ERR was sent before the MSG's last frame arrived.
    assert errs == [("ERR", 1, 0)]
    session.send_rpy(1, 1, build_entity(b"fine"))
    assert session.data_to_send().startswith(b"RPY 1 1 .")
    assert session.state is State.OPEN


def test_too_many_channels_are_refused() -> None:
    session, peer = greeted()
    codes = []
    reader = FrameReader(1 << 20)
    acked = 0
    for i in range(1100):
        number = 2 * i + 1
        events = session.receive_data(peer.start(i + 1, number))
        if any(isinstance(x, ev.ChannelStartRequested) for x in events):
            session.accept_channel(number, ECHO)
        output = session.data_to_send()
        codes += [c for _, c in error_codes(output)]
        reader.feed(output)
        while (frame := reader.next_frame()) is not None:
            if isinstance(frame, Frame) and frame.channel == 0:
                acked = frame.seqno + len(frame.payload)
        session.receive_data(encode_seq(0, acked, 4096))  # keep the reply window open
    assert len(session.channels) == 1025  # channel zero and 1024 data channels
    assert codes == [550] * (1100 - 1024)
    assert session.state is State.OPEN


def test_unanswered_tiny_msgs_are_refused_then_the_session_ends() -> None:
    """Windows bound octets, not message counts: 450 past 1024 MSGs, then 554."""
    session, peer = with_channel()
    events: list[ev.Event] = []
    for msgno in range(3000):
        events += session.receive_data(peer.frame("MSG", 1, msgno, b"\r\n"))
        session.data_to_send()
        if session.state is State.CLOSED:
            break
    received = [x for x in events if isinstance(x, ev.MessageReceived)]
    assert len(received) == 1024
    assert [(type(x), x.code) for x in events if isinstance(x, ev.SessionTerminated)] == [
        (ev.SessionTerminated, 554)
    ]
    assert msgno == 2048


def test_unanswered_msgs_get_450_once_the_application_catches_up() -> None:
    session, peer = with_channel()
    for msgno in range(1030):
        session.receive_data(peer.frame("MSG", 1, msgno, b"\r\n"))
    session.data_to_send()
    for msgno in range(1024):
        session.send_rpy(1, msgno, b"\r\n")
    reader = FrameReader(1 << 20)
    reader.feed(session.data_to_send())
    frames = []
    while (frame := reader.next_frame()) is not None:
        if isinstance(frame, Frame):
            frames.append((frame.keyword, frame.msgno))
    assert frames == [("RPY", m) for m in range(1024)] + [("ERR", m) for m in range(1024, 1030)]


def test_start_with_oversized_initialization_message_gets_501() -> None:
    """Section 2.3.1.2: a piggybacked initialization message is at most 4K octets."""
    session, peer = greeted()
    xml = b"<start number='1'><profile uri='x'>" + b"a" * 4100 + b"</profile></start>"
    payload = beep_xml(xml)
    session.receive_data(peer.frame("MSG", 0, 1, payload[:2048], more=True))
    assert session.data_to_send().startswith(b"SEQ 0 ")  # the window reopens
    events = session.receive_data(peer.frame("MSG", 0, 1, payload[2048:]))
    assert events == []
    assert error_codes(session.data_to_send()) == [(1, 501)]


def test_nothing_is_sent_after_a_termination() -> None:
    """A start and a violation in one chunk: the application may not answer the start."""
    session, peer = greeted()
    events = session.receive_data(peer.start(1, 1) + b"GARBAGE\r\n")
    assert [type(x) for x in events] == [ev.ChannelStartRequested, ev.SessionTerminated]
    with pytest.raises(LocalProtocolError):
        session.accept_channel(1, ECHO)
    with pytest.raises(LocalProtocolError):
        session.reject_channel(1, 550)
    with pytest.raises(LocalProtocolError):
        session.set_receive_window(0, 8192)
    assert session.data_to_send() == b""
    assert session.pending_events() == []
