"""Property tests of the BEEP core (Hypothesis).

* Any split of a valid octet stream parses to the same frames (FrameReader) and the same
  events and output (Session).
* Random operation sequences on an initiator/listener pair keep sequence numbers,
  windows and message numbering consistent: no violation, every message delivered once,
  in order, with the octets that were sent.
* Every (state, input) pair of the session's transition table either moves to a legal
  state or raises LocalProtocolError; every public call in every reachable state either
  works or raises LocalProtocolError.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as note_event
from hypothesis import strategies as st
from test_beep_session_pair import ECHO, SINK, Pair, body

from apexmesh.beep import events as ev
from apexmesh.beep.errors import LocalProtocolError
from apexmesh.beep.frames import Frame, FrameReader, SeqFrame, encode_frame, encode_seq
from apexmesh.beep.limits import MAX_NUMBER, SEQNO_MODULUS
from apexmesh.beep.management import ProfileOffer
from apexmesh.beep.session import _TRANSITIONS, Input, Role, Session, SessionConfig, State

pytestmark = pytest.mark.unit

numbers = st.integers(0, MAX_NUMBER)
frames = st.one_of(
    st.builds(
        Frame,
        keyword=st.sampled_from(["MSG", "RPY", "ERR", "NUL"]),
        channel=numbers,
        msgno=numbers,
        more=st.booleans(),
        seqno=st.integers(0, SEQNO_MODULUS - 1),
        payload=st.binary(max_size=300),
        ansno=st.none(),
    ),
    st.builds(
        Frame,
        keyword=st.just("ANS"),
        channel=numbers,
        msgno=numbers,
        more=st.booleans(),
        seqno=st.integers(0, SEQNO_MODULUS - 1),
        payload=st.binary(max_size=300),
        ansno=numbers,
    ),
    st.builds(
        SeqFrame,
        channel=numbers,
        ackno=st.integers(0, SEQNO_MODULUS - 1),
        window=numbers,
    ),
)


def encode(frame: Frame | SeqFrame) -> bytes:
    if isinstance(frame, SeqFrame):
        return encode_seq(*frame)
    return encode_frame(*frame)


def cut(data: bytes, points: list[int]) -> list[bytes]:
    marks = sorted({p % (len(data) + 1) for p in points})
    edges = [0, *marks, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def parse_all(chunks: list[bytes]) -> list[Frame | SeqFrame]:
    reader = FrameReader(1 << 20)
    out: list[Frame | SeqFrame] = []
    for chunk in chunks:
        reader.feed(chunk)
        while (frame := reader.next_frame()) is not None:
            out.append(frame)
    assert reader.buffered == 0
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(frames, max_size=12), st.lists(st.integers(0, 10_000), max_size=40))
def test_frame_reader_any_split_same_frames(
    wanted: list[Frame | SeqFrame], points: list[int]
) -> None:
    data = b"".join(encode(f) for f in wanted)
    assert parse_all([data]) == wanted
    assert parse_all(cut(data, points)) == wanted


# --------------------------------------------------------------------------- session splits


class AutoListener:
    """A listener whose application accepts every start and answers every MSG at once."""

    def __init__(self) -> None:
        self.session = Session(Role.LISTENER, SessionConfig(profiles=(ECHO, SINK)))
        self.events: list[ev.Event] = []
        self.output = bytearray(self.session.data_to_send())

    def receive(self, data: bytes) -> None:
        for event in self.session.receive_data(data) + self.session.pending_events():
            self.events.append(event)
            if isinstance(event, ev.ChannelStartRequested):
                self.session.accept_channel(event.channel, event.profiles[-1].uri)
            elif isinstance(event, ev.MessageReceived):
                if event.payload.endswith(b"!"):
                    self.session.send_err(event.channel, event.msgno, event.payload)
                else:
                    self.session.send_rpy(event.channel, event.msgno, event.payload[::-1])
        self.events += self.session.pending_events()
        self.output += self.session.data_to_send()


def initiator_stream(script: list[tuple[int, bytes]]) -> list[bytes]:
    """The initiator's octets for a script of (channel index, payload) MSGs.

    Returned as causal segments: each was sent only after the listener's answer to the
    previous one arrived, so a split may cut anywhere inside a segment but a segment may
    not arrive before the listener had the chance to act on the previous one.
    """
    initiator = Session(Role.INITIATOR, SessionConfig())
    listener = AutoListener()
    initiator.receive_data(bytes(listener.output))
    listener.output.clear()
    channels = [
        initiator.start_channel([ProfileOffer(uri="http://example.org/x"), ProfileOffer(uri=p)])
        for p in (ECHO, SINK)
    ]
    first = initiator.data_to_send()
    listener.receive(first)
    answered = initiator.receive_data(bytes(listener.output))
    assert [type(e) for e in answered] == [ev.ChannelStarted, ev.ChannelStarted]
    for index, payload in script:
        initiator.send_msg(channels[index], payload)
    return [first, initiator.data_to_send()]


def canonical(events: list[ev.Event]) -> tuple[list[ev.Event], list[str]]:
    """Events in order, except those the auto-responder's own calls caused (their
    position depends on when the application acted), which are compared as a set."""
    own = [e for e in events if isinstance(e, ev.ChannelStarted)]
    return [e for e in events if not isinstance(e, ev.ChannelStarted)], sorted(map(repr, own))


messages = st.lists(st.tuples(st.integers(0, 1), st.binary(max_size=40).map(body)), max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.lists(st.integers(0, 5_000), max_size=40))
def test_session_any_split_same_events_and_output(
    script: list[tuple[int, bytes]], points: list[int]
) -> None:
    segments = initiator_stream(script)
    assert len(segments[1]) < 2048 * 2  # no SEQ needed: windows never refill mid-stream
    whole = AutoListener()
    split = AutoListener()
    for segment in segments:
        whole.receive(segment)
        for chunk in cut(segment, points):
            split.receive(chunk)
    assert canonical(split.events) == canonical(whole.events)
    assert bytes(split.output) == bytes(whole.output)
    assert not any(isinstance(e, ev.SessionTerminated) for e in whole.events)
    delivered = [e for e in whole.events if isinstance(e, ev.MessageReceived)]
    assert len(delivered) == len(script)


# --------------------------------------------------------------------------- random pair ops


_msg = st.tuples(st.just("msg"), st.booleans(), st.integers(0, 20), st.integers(0, 20_000))
_reply = st.tuples(st.just("reply"), st.booleans(), st.integers(0, 20), st.integers(0, 4))
_pump = st.tuples(st.just("pump"), st.booleans(), st.integers(1, 5000), st.integers(0, 0))
ops = st.lists(
    st.one_of(
        _msg,
        _reply,
        _pump,
        _msg,
        _reply,
        _pump,
        st.tuples(st.just("start"), st.booleans(), st.integers(0, 0), st.integers(0, 0)),
        st.tuples(st.just("window"), st.booleans(), st.integers(0, 20), st.integers(0, 1 << 20)),
    ),
    max_size=60,
)


def _session(pair: Pair, initiator: bool) -> Session:
    return pair.ini if initiator else pair.lis


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, st.sampled_from([None, 1, 3, 1000]))
def test_random_operations_keep_windows_and_numbering_consistent(
    script: list[tuple[str, bool, int, int]], chunk: int | None
) -> None:
    pair = Pair(chunk=chunk)
    msgs: dict[tuple[bool, int], list[tuple[int, bytes]]] = {}  # by sender, channel
    received: dict[tuple[bool, int], list[tuple[int, bytes]]] = {}
    pending: dict[tuple[bool, int], list[int]] = {}  # msgnos the receiver must answer
    #: By asker and channel: msgnos awaiting a reply, in send order, and the reply given.
    outstanding: dict[tuple[bool, int], list[int]] = {}
    replies: dict[tuple[bool, int], dict[int, tuple[str, bytes]]] = {}
    channels: list[int] = [pair.open_channel()]
    seen = {True: len(pair.ini_events), False: len(pair.lis_events)}

    def collect() -> None:
        for is_ini, events in ((True, pair.ini_events), (False, pair.lis_events)):
            for event in events[seen[is_ini] :]:
                assert not isinstance(event, ev.SessionTerminated), event
                if isinstance(event, ev.MessageReceived):
                    key = (not is_ini, event.channel)  # keyed by the sender
                    received.setdefault(key, []).append((event.msgno, event.payload))
                    pending.setdefault((is_ini, event.channel), []).append(event.msgno)
                elif isinstance(event, ev.ReplyReceived | ev.ErrorReceived):
                    kind = "RPY" if isinstance(event, ev.ReplyReceived) else "ERR"
                    key = (is_ini, event.channel)
                    assert outstanding[key].pop(0) == event.msgno  # in order
                    assert replies[key].pop(event.msgno) == (kind, event.payload)
                elif isinstance(event, ev.AnswerReceived):
                    key = (is_ini, event.channel)
                    assert outstanding[key][0] == event.msgno
                    assert replies[key][event.msgno] == ("ANS", event.payload)
                elif isinstance(event, ev.AnswersCompleted):
                    key = (is_ini, event.channel)
                    assert outstanding[key].pop(0) == event.msgno
                    assert replies[key].pop(event.msgno)[0] == "ANS"
                elif isinstance(event, ev.ChannelStartRequested):
                    side = pair.ini if is_ini else pair.lis
                    side.accept_channel(event.channel, ECHO)
                elif isinstance(event, ev.ChannelStarted) and event.initiated_locally:
                    channels.append(event.channel)
            seen[is_ini] = len(events)

    def pump(size: int | None = None) -> None:
        pair.chunk = size if size is not None else chunk
        pair.pump()
        collect()
        pair.pump()  # accepts queued by collect()
        collect()

    for op, on_ini, a, b in script:
        session = _session(pair, on_ini)
        if op == "start":
            session.start_channel([ProfileOffer(uri=ECHO)])
        elif op == "pump":
            pump(a)
        elif not channels:
            continue
        elif op == "msg":
            ch = channels[a % len(channels)]
            payload = body(bytes([a]) * b)
            msgno = session.send_msg(ch, payload)
            msgs.setdefault((on_ini, ch), []).append((msgno, payload))
            outstanding.setdefault((on_ini, ch), []).append(msgno)
        elif op == "window":
            ch = channels[a % len(channels)]
            current = session._channels[ch].recv_window
            session.set_receive_window(ch, max(current, min(b, 1 << 20)))
        elif op == "reply":
            answerable = [k for k, v in pending.items() if k[0] == on_ini and v]
            if not answerable:
                continue
            key = answerable[a % len(answerable)]
            ch = key[1]
            msgno = pending[key].pop(a % len(pending[key]))  # any order: out of app order
            payload = body(b"r%d" % msgno)
            asker = (not on_ini, ch)
            if b == 0:
                session.send_err(ch, msgno, payload)
                replies.setdefault(asker, {})[msgno] = ("ERR", payload)
            elif b == 1:
                session.send_ans(ch, msgno, payload)
                session.send_ans(ch, msgno, payload)
                session.send_nul(ch, msgno)
                replies.setdefault(asker, {})[msgno] = ("ANS", payload)
            else:
                session.send_rpy(ch, msgno, payload)
                replies.setdefault(asker, {})[msgno] = ("RPY", payload)
    pump()
    # Answer whatever is left, so that every exchange completes. Unanswered MSGs hold
    # the window closed (RFC 3081 3.1.3), so a MSG may only arrive once earlier ones
    # are answered: answer until nothing is pending.
    while any(pending.values()):
        for (on_ini, ch), msgnos in pending.items():
            for msgno in reversed(msgnos):
                payload = body(b"late")
                _session(pair, on_ini).send_rpy(ch, msgno, payload)
                replies.setdefault((not on_ini, ch), {})[msgno] = ("RPY", payload)
            msgnos.clear()
        pump()
    assert not any(replies.values())
    assert not any(outstanding.values())
    note_event(f"msgs sent: {min(sum(map(len, msgs.values())), 5)}")
    # Every MSG arrived once, in order, intact.
    for key, sent in msgs.items():
        assert received.get(key, []) == sent
    # Nothing is left half-assembled, and the session-wide buffer account is balanced.
    assert pair.ini._buffered == pair.lis._buffered == 0
    # Both directions of every channel agree on sequence numbers and windows.
    for number in set(pair.ini.channels) & set(pair.lis.channels):
        a_ch, b_ch = pair.ini._channels[number], pair.lis._channels[number]
        for sender, receiver in ((a_ch, b_ch), (b_ch, a_ch)):
            assert sender.send_seqno == receiver.recv_seqno
            assert sender.send_credit == receiver.recv_credit
            assert 0 <= receiver.recv_credit <= receiver.recv_window <= 1 << 20
            assert not sender.queue


# --------------------------------------------------------------------------- state machine


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(State)), st.sampled_from(list(Input)))
def test_transition_table_moves_to_a_legal_state_or_raises(state: State, event: Input) -> None:
    session = Session(Role.INITIATOR)
    session.state = state
    allowed = _TRANSITIONS[state]
    if event in allowed:
        session._transition(event)
        assert session.state is allowed[event]
        assert session.state in State
    else:
        with pytest.raises(LocalProtocolError):
            session._transition(event)
        assert session.state is state  # refused: nothing moved


def test_transition_table_shape() -> None:
    assert set(_TRANSITIONS) == set(State)
    targets = {t for row in _TRANSITIONS.values() for t in row.values()}
    assert targets <= set(State)
    assert set(_TRANSITIONS[State.CLOSED].values()) == {State.CLOSED}  # absorbing
    for state in State:
        assert _TRANSITIONS[state].get(Input.TERMINATED) is State.CLOSED


def reach(state: State) -> Pair:
    """A pair whose initiator is in ``state``, reached through the public API."""
    if state is State.GREETING:
        pair = Pair()
        pair.ini = Session(Role.INITIATOR, SessionConfig(profiles=(ECHO,)))  # no greeting yet
        return pair
    pair = Pair(listener=SessionConfig(profiles=(ECHO,), tls_available=True))
    if state is State.TUNING:
        pair.ini.start_tls()
        pair.pump()
    elif state is State.CLOSING:
        pair.ini.close()
    elif state is State.CLOSED:
        pair.ini.close()
        pair.pump()
    assert pair.ini.state is state
    return pair


CALLS: list[tuple[str, Callable[[Session], Any]]] = [
    ("start_channel", lambda s: s.start_channel([ProfileOffer(uri=ECHO)])),
    ("accept_channel", lambda s: s.accept_channel(2, ECHO)),
    ("reject_channel", lambda s: s.reject_channel(2, 550)),
    ("send_msg", lambda s: s.send_msg(1, b"\r\n")),
    ("send_rpy", lambda s: s.send_rpy(1, 0, b"\r\n")),
    ("send_err", lambda s: s.send_err(1, 0, b"\r\n")),
    ("send_ans", lambda s: s.send_ans(1, 0, b"\r\n")),
    ("send_nul", lambda s: s.send_nul(1, 0)),
    ("close_channel", lambda s: s.close_channel(1)),
    ("close", lambda s: s.close()),
    ("set_receive_window", lambda s: s.set_receive_window(0, 8192)),
    ("start_tls", lambda s: s.start_tls()),
    ("tls_established", lambda s: s.tls_established()),
    ("handle_timer", lambda s: s.handle_timer(1e9)),
    ("receive_eof", lambda s: s.receive_eof()),
    ("receive_data", lambda s: s.receive_data(b"RPY 0 0 . 0 0\r\nEND\r\n")),
]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(State)), st.sampled_from(CALLS))
def test_every_call_in_every_state_works_or_raises_local_protocol_error(
    state: State, call: tuple[str, Callable[[Session], Any]]
) -> None:
    pair = reach(state)
    with contextlib.suppress(LocalProtocolError):
        call[1](pair.ini)
    assert pair.ini.state in State
    pair.ini.data_to_send()
    pair.ini.pending_events()
