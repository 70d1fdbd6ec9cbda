"""Every example exchange printed in RFC 3080, replayed against the session as bytes.

Each file in ``tests/data/rfc3080`` is one example, written the way the RFC prints it
(``C:``/``S:`` or ``I:``/``L:`` prefixed lines, each line one CRLF-terminated line on the
wire) with consistent sizes and sequence numbers (see ``tests/data/README.md``).

For each example and each role, a real :class:`Session` plays that role: it is fed the
other side's frames exactly as printed (whole, then one byte at a time), and it is made
to produce its own side through the public API (``start_channel``, ``accept_channel``,
``send_rpy`` ...) or by itself (greetings, automatic errors, ``ok``, TLS ``proceed``).
Its output must equal the example's frames message by message, modulo the documented
whitespace differences; its events must be the ones listed in ``EXPECTED``.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from apexmesh.beep import events as ev
from apexmesh.beep.frames import Frame, FrameReader, SeqFrame, encode_frame
from apexmesh.beep.management import (
    Close,
    ErrorElement,
    Greeting,
    ProfileOffer,
    Start,
    parse_management,
)
from apexmesh.beep.mime import split_entity
from apexmesh.beep.session import Role, Session, SessionConfig
from apexmesh.beep.tuning import READY_XML, TLS_PROFILE

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[2] / "data" / "rfc3080"
_LINE = re.compile(r"^([A-Z]):(?: (.*))?$")
_HEADER = re.compile(r"^(MSG|RPY|ERR|ANS|NUL) \d+ \d+ [.*] \d+ (\d+)(?: \d+)?$")


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class Item:
    """One frame of a transcript (``side`` is the RFC's letter) or a ``*** marker ***``."""

    side: str
    raw: bytes = b""
    marker: str = ""


@dataclass
class Transcript:
    name: str
    roles: dict[str, Role]
    items: list[Item] = field(default_factory=list)

    def side_of(self, role: Role) -> str:
        return next(side for side, r in self.roles.items() if r is role)

    def stream(self, side: str) -> bytes:
        return b"".join(i.raw for i in self.items if i.side == side)


def load(path: Path) -> Transcript:
    """Turn prefixed lines into per-frame bytes, checking each frame's declared size."""
    roles: dict[str, Role] = {}
    items: list[Item] = []
    current: tuple[str, int, list[bytes]] | None = None  # side, size, lines so far
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("# roles:"):
            for pair in line.removeprefix("# roles:").split():
                letter, role = pair.split("=")
                roles[letter] = Role(role)
            continue
        if line.startswith("#"):
            continue
        if line.startswith("***"):
            assert current is None, f"{path.name}:{number}: marker inside a frame"
            items.append(Item(side="", marker=line.strip("* ")))
            continue
        match = _LINE.match(line)
        assert match, f"{path.name}:{number}: not a transcript line: {line!r}"
        side, text = match.group(1), (match.group(2) or "")
        octets = text.encode("utf-8") + b"\r\n"
        if current is None:
            header = _HEADER.match(text)
            assert header, f"{path.name}:{number}: expected a frame header: {text!r}"
            current = (side, int(header.group(2)), [octets])
            continue
        frame_side, size, lines = current
        assert side == frame_side, f"{path.name}:{number}: side changed inside a frame"
        payload = sum(len(x) for x in lines[1:])
        if payload == size:
            assert text == "END", f"{path.name}:{number}: payload longer than its size"
            items.append(Item(side=side, raw=b"".join([*lines, octets])))
            current = None
            continue
        assert payload + len(octets) <= size, f"{path.name}:{number}: size mismatch"
        lines.append(octets)
    assert current is None, f"{path.name}: last frame lacks END"
    assert len(roles) == 2, f"{path.name}: roles line missing"
    return Transcript(name=path.name, roles=roles, items=items)


TRANSCRIPTS = sorted(DATA.glob("*.txt"))


# --------------------------------------------------------------------------- comparing


def _squash(text: str) -> str:
    return re.sub(r">\s+<", "><", " ".join(text.split()))


def normalize(keyword: str, channel: int, msgno: int, ansno: int | None, payload: bytes) -> Any:
    """What must match between the example and the session's output.

    Channel-zero payloads are compared as parsed elements (so ``<close code='200' />``
    equals ``<close number='0' code='200' />``), with whitespace runs in text and in
    piggybacked content collapsed; other payloads keep their entity headers exactly and
    compare bodies with whitespace runs collapsed and whitespace between tags removed.
    """
    if not payload:
        return (keyword, channel, msgno, ansno, None, None)  # NUL
    entity = split_entity(payload)
    body: Any
    if channel == 0 and entity.body:
        element = parse_management(entity.body)
        if isinstance(element, ErrorElement | Close):
            element = replace(element, text=_squash(element.text))
        if isinstance(element, ProfileOffer) and element.content is not None:
            element = replace(element, content=_squash(element.content))
        body = element
    else:
        body = _squash(entity.body.decode("utf-8"))
    return (keyword, channel, msgno, ansno, entity.headers, body)


class Messages:
    """Reassembles a stream of frames into whole messages (answers by answer number)."""

    def __init__(self) -> None:
        self.reader = FrameReader(1 << 20)
        self.parts: dict[tuple[str, int, int, int | None], list[bytes]] = {}
        self.done: list[tuple[str, int, int, int | None, bytes]] = []

    def add(self, frame: Frame) -> tuple[str, int, int, int | None, bytes] | None:
        key = (frame.keyword, frame.channel, frame.msgno, frame.ansno)
        self.parts.setdefault(key, []).append(frame.payload)
        if frame.more:
            return None
        message = (*key, b"".join(self.parts.pop(key)))
        self.done.append(message)
        return message

    def feed(self, data: bytes) -> None:
        self.reader.feed(data)
        while (frame := self.reader.next_frame()) is not None:
            if isinstance(frame, SeqFrame):
                continue  # the RFC examples print no SEQ frames (RFC 3081 mapping)
            self.add(frame)


def parse_frame(raw: bytes) -> Frame:
    reader = FrameReader(1 << 20)
    reader.feed(raw)
    frame = reader.next_frame()
    assert isinstance(frame, Frame)
    assert reader.buffered == 0
    return frame


def config_for(message: tuple[str, int, int, int | None, bytes]) -> SessionConfig:
    """The configuration that makes a session send this greeting (or refusal)."""
    keyword, *_, payload = message
    element = parse_management(split_entity(payload).body)
    if keyword == "ERR":
        assert isinstance(element, ErrorElement)
        return SessionConfig(unavailable=(element.code, element.text))
    assert isinstance(element, Greeting)
    return SessionConfig(
        profiles=tuple(p for p in element.profiles if p != TLS_PROFILE),
        tls_available=TLS_PROFILE in element.profiles,
    )


# --------------------------------------------------------------------------- driving


def act(
    session: Session,
    message: tuple[str, int, int, int | None, bytes],
    start_requests: deque[int],
) -> None:
    """Make the session send ``message`` through the public API."""
    keyword, channel, msgno, _ansno, payload = message
    if channel != 0:
        if keyword == "MSG":
            assert session.send_msg(channel, payload) == msgno
        elif keyword == "RPY":
            session.send_rpy(channel, msgno, payload)
        elif keyword == "ERR":
            session.send_err(channel, msgno, payload)
        elif keyword == "ANS":
            session.send_ans(channel, msgno, payload)
        else:
            session.send_nul(channel, msgno)
        return
    element = parse_management(split_entity(payload).body)
    if isinstance(element, Start):
        offers = element.profiles
        if len(offers) == 1 and offers[0].uri == TLS_PROFILE and offers[0].content == READY_XML:
            number = session.start_tls(element.server_name)
        else:
            number = session.start_channel(offers, element.server_name)
        assert number == element.number
    elif isinstance(element, Close):
        if element.number == 0:
            session.close(element.code, element.text)
        else:
            session.close_channel(element.number, element.code, element.text)
    elif isinstance(element, ProfileOffer) and start_requests:
        session.accept_channel(
            start_requests.popleft(), element.uri, element.content, base64=element.base64
        )
    elif isinstance(element, ErrorElement) and start_requests:
        session.reject_channel(start_requests.popleft(), element.code, element.text)
    # Anything else (greetings, ok, automatic errors) the session sends by itself.


def drive(
    transcript: Transcript, role: Role, *, bytewise: bool
) -> tuple[list[ev.Event], Messages, list[tuple[str, int, int, int | None, bytes]]]:
    """Play ``role`` against the other side's bytes; return events, output, expectation."""
    own = transcript.side_of(role)
    expected = Messages()
    first_own = next(
        m
        for i in transcript.items
        if i.side == own
        if (m := Messages().add(parse_frame(i.raw))) is not None
    )
    session = Session(role, config_for(first_own))
    events: list[ev.Event] = session.pending_events()
    produced = Messages()
    produced.feed(session.data_to_send())
    start_requests: deque[int] = deque()
    pending = bytearray()

    def feed() -> None:
        chunks = [bytes([b]) for b in pending] if bytewise else [bytes(pending)]
        pending.clear()
        for chunk in chunks:
            new = session.receive_data(chunk)
            events.extend(new)
            start_requests.extend(e.channel for e in new if isinstance(e, ev.ChannelStartRequested))
        produced.feed(session.data_to_send())

    items = transcript.items
    for index, item in enumerate(items):
        if item.marker:
            feed()
            assert any(isinstance(e, ev.TlsStartRequired) for e in events)
            if "failed" in item.marker:
                break  # the adapter terminates a session whose TLS handshake failed
            next_greeting = next(
                Messages().add(parse_frame(i.raw)) for i in items[index:] if i.side == own
            )
            assert next_greeting is not None
            session.config = config_for(next_greeting)
            session.tls_established()
            produced = Messages()  # a new greeting, new sequence numbers
            produced.feed(session.data_to_send())
            expected = Messages()
            continue
        if item.side != own:
            pending += item.raw
            continue
        feed()
        message = expected.add(parse_frame(item.raw))
        if message is None:
            continue
        if len(produced.done) < len(expected.done):
            act(session, message, start_requests)
            events.extend(session.pending_events())
            produced.feed(session.data_to_send())
    else:
        feed()
    return events, produced, expected.done


# --------------------------------------------------------------------------- expectations

OTP = "http://iana.org/beep/SASL/OTP"
APEX = "http://iana.org/beep/APEX"
G = ev.GreetingReceived
INI, LIS = Role.INITIATOR, Role.LISTENER
_STARTED_BY_PEER = [
    (G, {}),
    (ev.ChannelStartRequested, {"channel": 1}),
    (ev.ChannelStarted, {"channel": 1, "initiated_locally": False}),
]
_OTP_STARTED = [(G, {}), (ev.ChannelStarted, {"channel": 1, "profile": OTP})]

#: file -> role -> (expected events as (type, fields), extra output messages allowed).
EXPECTED: dict[str, dict[Role, tuple[list[tuple[type, dict[str, Any]]], int]]] = {
    "2.2-message-frame.txt": {
        INI: ([(G, {})], 0),
        LIS: ([(G, {}), (ev.ChannelStartRequested, {"channel": 1, "server_name": None})], 0),
    },
    "2.2.1-empty-payload.txt": {INI: (_OTP_STARTED, 0), LIS: (_STARTED_BY_PEER, 0)},
    "2.2.1-ans-interleaved.txt": {
        INI: (
            [
                (G, {}),
                (ev.ChannelStarted, {"channel": 1, "profile": APEX}),
                (
                    ev.AnswerReceived,
                    {"msgno": 0, "ansno": 0, "payload": b"\r\nanswer zero, 1/2\r\n2/2 done\r\n"},
                ),
                (
                    ev.AnswerReceived,
                    {"msgno": 0, "ansno": 1, "payload": b"\r\nanswer one,  1/2\r\n2/2 done\r\n"},
                ),
                (ev.AnswersCompleted, {"channel": 1, "msgno": 0}),
            ],
            0,
        ),
        LIS: (
            [
                *_STARTED_BY_PEER,
                (
                    ev.MessageReceived,
                    {"channel": 1, "msgno": 0, "payload": b"\r\nlist everything\r\n"},
                ),
            ],
            0,
        ),
    },
    "2.3.1.1-greeting.txt": {
        INI: ([(G, {"profiles": (TLS_PROFILE,)})], 0),
        LIS: ([(G, {"profiles": ()})], 0),
    },
    "2.3.1.2-start-msg.txt": {
        INI: ([(G, {})], 0),
        LIS: ([(G, {}), (ev.ChannelStartRequested, {"channel": 1})], 0),
    },
    "2.3.1.2-start-ok.txt": {INI: (_OTP_STARTED, 0), LIS: (_STARTED_BY_PEER, 0)},
    # The initiator cannot be made to send the wrong parity: only the listener is played.
    "2.3.1.2-start-wrong-parity.txt": {LIS: ([(G, {})], 0)},
    "2.3.1.2-start-tls-init.txt": {
        INI: ([(G, {}), (ev.TlsStartRequired, {"server_side": False})], 0),
        LIS: ([(G, {}), (ev.TlsStartRequired, {"server_side": True})], 0),
    },
    "2.3.1.3-close-msg.txt": {
        INI: (_OTP_STARTED, 0),
        # The listener answers the close with <ok />, which the RFC does not print.
        LIS: ([*_STARTED_BY_PEER, (ev.ChannelClosed, {"channel": 1, "by_peer": True})], 1),
    },
    "2.3.1.3-close-ok.txt": {
        INI: ([*_OTP_STARTED, (ev.ChannelClosed, {"channel": 1, "by_peer": False})], 0),
        LIS: ([*_STARTED_BY_PEER, (ev.ChannelClosed, {"channel": 1, "by_peer": True})], 0),
    },
    "2.3.1.3-close-declined.txt": {
        INI: (
            [
                *_OTP_STARTED,
                (ev.MessageReceived, {"channel": 1, "msgno": 0}),
                (ev.ChannelCloseFailed, {"channel": 1, "code": 550, "text": "still working"}),
            ],
            0,
        ),
        LIS: (_STARTED_BY_PEER, 0),
    },
    "2.3.1.5-error-unsupported.txt": {
        INI: ([(G, {}), (ev.ChannelStartFailed, {"channel": 1, "code": 550})], 0),
        LIS: ([(G, {})], 0),
    },
    "2.4-greeting.txt": {
        INI: ([(G, {"profiles": (TLS_PROFILE,)})], 0),
        LIS: ([(G, {"profiles": ()})], 0),
    },
    "2.4-refused-421.txt": {
        INI: ([(ev.SessionTerminated, {"code": 421})], 0),
        LIS: ([(ev.SessionTerminated, {"code": 421})], 0),
    },
    "2.4-release-ok.txt": {
        INI: ([(G, {}), (ev.SessionClosed, {"code": 200, "by_peer": False})], 0),
        LIS: ([(G, {}), (ev.SessionClosed, {"code": 200, "by_peer": True})], 0),
    },
    "2.4-release-declined.txt": {
        INI: (
            [
                *_OTP_STARTED,
                (ev.MessageReceived, {"channel": 1, "msgno": 0}),
                (ev.ChannelCloseFailed, {"channel": 0, "code": 550}),
            ],
            0,
        ),
        LIS: (_STARTED_BY_PEER, 0),
    },
    "2.7-peer-to-peer-msgnos.txt": {
        INI: ([(G, {}), (ev.ChannelStartRequested, {"channel": 2})], 0),
        LIS: ([(G, {}), (ev.ChannelStartRequested, {"channel": 1})], 0),
    },
    "3-tls-new-greetings.txt": {
        INI: (
            [
                (G, {"profiles": (TLS_PROFILE,)}),
                (ev.TlsStartRequired, {"server_side": False}),
                (G, {"profiles": ("http://iana.org/beep/SASL/ANONYMOUS", OTP, APEX)}),
            ],
            0,
        ),
        LIS: (
            [(G, {}), (ev.TlsStartRequired, {"server_side": True}), (G, {"profiles": ()})],
            0,
        ),
    },
    "3-tls-failed-negotiation.txt": {
        INI: ([(G, {}), (ev.TlsStartRequired, {"server_side": False})], 0),
        LIS: ([(G, {}), (ev.TlsStartRequired, {"server_side": True})], 0),
    },
    "3.1.1-tls-proceed.txt": {
        INI: ([(G, {}), (ev.TlsStartRequired, {"server_side": False})], 0),
        LIS: ([(G, {}), (ev.TlsStartRequired, {"server_side": True})], 0),
    },
    "3.1.1-tls-bad-version.txt": {
        # start_tls() always sends <ready />: the initiator offers the odd version through
        # start_channel, and the channel starts with the error as its piggybacked reply.
        INI: ([(G, {}), (ev.ChannelStarted, {"channel": 1, "profile": TLS_PROFILE})], 0),
        LIS: ([(G, {})], 0),
    },
    "4.1.1-sasl-multiple-profiles.txt": {INI: (_OTP_STARTED, 0), LIS: (_STARTED_BY_PEER, 0)},
    "4.1.1-sasl-start-534.txt": {INI: (_OTP_STARTED, 0), LIS: (_STARTED_BY_PEER, 0)},
    "4.1.1-sasl-challenge.txt": {INI: (_OTP_STARTED, 0), LIS: (_STARTED_BY_PEER, 0)},
    "4.1.1-sasl-complete.txt": {
        INI: ([*_OTP_STARTED, (ev.ReplyReceived, {"channel": 1, "msgno": 0})], 0),
        LIS: ([*_STARTED_BY_PEER, (ev.MessageReceived, {"channel": 1, "msgno": 0})], 0),
    },
    "4.1.1-sasl-535.txt": {
        INI: ([*_OTP_STARTED, (ev.ErrorReceived, {"channel": 1, "msgno": 0})], 0),
        LIS: ([*_STARTED_BY_PEER, (ev.MessageReceived, {"channel": 1, "msgno": 0})], 0),
    },
    "4.1.1-sasl-cram-md5.txt": {
        INI: (
            [
                (G, {}),
                (
                    ev.ChannelStarted,
                    {"channel": 1, "profile": "http://iana.org/beep/SASL/CRAM-MD5"},
                ),
            ],
            0,
        ),
        LIS: (_STARTED_BY_PEER, 0),
    },
}

CASES = [
    pytest.param(path, role, id=f"{path.stem}-{role.value}")
    for path in TRANSCRIPTS
    for role in EXPECTED.get(path.name, {})
]


# --------------------------------------------------------------------------- tests


def test_every_transcript_has_expectations() -> None:
    assert len(TRANSCRIPTS) >= 25
    assert sorted(p.name for p in TRANSCRIPTS) == sorted(EXPECTED)


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
def test_frame_reader_parses_each_direction_whole_and_bytewise(path: Path) -> None:
    transcript = load(path)
    for side in transcript.roles:
        stream = transcript.stream(side)
        whole = FrameReader(1 << 20)
        whole.feed(stream)
        frames = []
        while (frame := whole.next_frame()) is not None:
            frames.append(frame)
        assert whole.buffered == 0
        bytewise = FrameReader(1 << 20)
        one_by_one = []
        for octet in stream:
            bytewise.feed(bytes([octet]))
            while (frame := bytewise.next_frame()) is not None:
                one_by_one.append(frame)
        assert one_by_one == frames
        # The frames re-encode to exactly the transcript's octets.
        assert b"".join(encode_frame(*f) for f in frames if isinstance(f, Frame)) == stream


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
@pytest.mark.parametrize(("path", "role"), CASES)
def test_session_replays_example(path: Path, role: Role, bytewise: bool) -> None:
    transcript = load(path)
    events, produced, expected = drive(transcript, role, bytewise=bytewise)

    wanted, extra = EXPECTED[path.name][role]
    assert [type(e) for e in events] == [t for t, _ in wanted], events
    for event, (_, fields) in zip(events, wanted, strict=True):
        for name, value in fields.items():
            assert getattr(event, name) == value, (event, name)

    assert len(produced.done) == len(expected) + extra
    got = [normalize(*m) for m in produced.done[: len(expected)]]
    assert got == [normalize(*m) for m in expected]


def test_piggybacked_errors_reach_the_initiator() -> None:
    """The encapsulated failures of sections 3.1.1 and 4.1.1 arrive as the reply content."""
    for name, code in (("3.1.1-tls-bad-version.txt", "501"), ("4.1.1-sasl-start-534.txt", "534")):
        events, _, _ = drive(load(DATA / name), Role.INITIATOR, bytewise=False)
        started = [e for e in events if isinstance(e, ev.ChannelStarted)]
        assert started[0].reply is not None
        assert f"<error code='{code}'>" in (started[0].reply.content or "")
