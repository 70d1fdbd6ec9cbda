"""An initiator and a listener session talking to each other in memory.

``Pair`` pumps the octets each session queues into the other one (like h11's
ConnectionPair or aioquic's roundtrip), optionally cut into small pieces, and collects
the events each side reports. Every exchange of RFC 3080 sections 2.3-2.6, 3 and 4 and
RFC 3081's windows is exercised end to end, with nothing but bytes between the two.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from apexmesh.beep import events as ev
from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.errors import LocalProtocolError
from apexmesh.beep.frames import Frame, FrameReader
from apexmesh.beep.management import ProfileOffer
from apexmesh.beep.mime import build_entity
from apexmesh.beep.sasl import SaslClientExchange, SaslServerExchange, StaticCredentials
from apexmesh.beep.session import Role, Session, SessionConfig, State
from apexmesh.beep.tuning import TLS_PROFILE, SaslServer, sasl_profile

pytestmark = pytest.mark.unit

ECHO = "http://example.org/beep/echo"
SINK = "http://example.org/beep/sink"


class Pair:
    """Two sessions joined by an in-memory wire."""

    def __init__(
        self,
        initiator: SessionConfig | None = None,
        listener: SessionConfig | None = None,
        *,
        chunk: int | None = None,
    ) -> None:
        self.ini = Session(Role.INITIATOR, initiator or SessionConfig(profiles=(ECHO, SINK)))
        self.lis = Session(Role.LISTENER, listener or SessionConfig(profiles=(ECHO, SINK)))
        self.chunk = chunk
        #: Every event each side reported, in order.
        self.ini_events: list[ev.Event] = list(self.ini.pending_events())
        self.lis_events: list[ev.Event] = list(self.lis.pending_events())
        #: Frames that crossed the wire, per direction (for window checks).
        self.ini_frames: list[Frame] = []
        self.lis_frames: list[Frame] = []
        self._ini_reader = FrameReader(1 << 30)
        self._lis_reader = FrameReader(1 << 30)
        self.pump()

    def _deliver(self, data: bytes, to: Session) -> list[ev.Event]:
        reader, seen = (
            (self._ini_reader, self.ini_frames)
            if to is self.lis
            else (self._lis_reader, self.lis_frames)
        )
        reader.feed(data)
        while (frame := reader.next_frame()) is not None:
            if isinstance(frame, Frame):
                seen.append(frame)
        if self.chunk is None:
            return to.receive_data(data)
        events: list[ev.Event] = []
        for i in range(0, len(data), self.chunk):
            events += to.receive_data(data[i : i + self.chunk])
        return events

    def pump(self, max_rounds: int = 100_000) -> tuple[list[ev.Event], list[ev.Event]]:
        """Move octets both ways until both sides are quiet; return the new events."""
        new_ini: list[ev.Event] = self.ini.pending_events()
        new_lis: list[ev.Event] = self.lis.pending_events()
        for _ in range(max_rounds):
            a = self.ini.data_to_send()
            b = self.lis.data_to_send()
            if not a and not b:
                break
            if a:
                new_lis += self._deliver(a, self.lis)
            if b:
                new_ini += self._deliver(b, self.ini)
            new_ini += self.ini.pending_events()
            new_lis += self.lis.pending_events()
        else:
            raise AssertionError("the sessions never went quiet")
        self.ini_events += new_ini
        self.lis_events += new_lis
        return new_ini, new_lis

    def open_channel(self, profile: str = ECHO) -> int:
        channel = self.ini.start_channel([ProfileOffer(uri=profile)])
        _, lis = self.pump()
        assert isinstance(lis[-1], ev.ChannelStartRequested)
        self.lis.accept_channel(channel, profile)
        ini, _ = self.pump()
        assert ini == [
            ev.ChannelStarted(
                channel=channel,
                profile=profile,
                reply=ProfileOffer(uri=profile),
                initiated_locally=True,
            )
        ]
        return channel


def body(text: bytes) -> bytes:
    return build_entity(text)


def only(events: list[ev.Event], kind: type) -> list:  # type: ignore[type-arg]
    return [e for e in events if isinstance(e, kind)]


def assert_clean(pair: Pair) -> None:
    """No side reported a violation."""
    assert not only(pair.ini_events, ev.SessionTerminated)
    assert not only(pair.lis_events, ev.SessionTerminated)


# --------------------------------------------------------------------------- greetings


@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_greetings_cross(chunk: int | None) -> None:
    pair = Pair(
        SessionConfig(profiles=(SINK,), localize=("en-US",)),
        SessionConfig(profiles=(ECHO,), features=("x-demo",)),
        chunk=chunk,
    )
    assert pair.ini_events == [
        ev.GreetingReceived(profiles=(ECHO,), features=("x-demo",), localize=())
    ]
    assert pair.lis_events == [
        ev.GreetingReceived(profiles=(SINK,), features=(), localize=("en-US",))
    ]
    assert pair.ini.state is State.OPEN
    assert pair.lis.state is State.OPEN


def test_listener_refuses_with_421_instead_of_a_greeting() -> None:
    pair = Pair(listener=SessionConfig(unavailable=(421, "try later")))
    assert only(pair.lis_events, ev.SessionTerminated)[0].code == 421
    terminated = only(pair.ini_events, ev.SessionTerminated)
    assert len(terminated) == 1
    assert terminated[0].code == 421
    assert "try later" in terminated[0].reason
    assert not only(pair.ini_events, ev.GreetingReceived)
    assert pair.ini.state is State.CLOSED
    assert pair.lis.state is State.CLOSED


# --------------------------------------------------------------------------- channels


def test_start_offers_several_profiles_with_piggybacked_init_both_ways() -> None:
    pair = Pair()
    offers = [
        ProfileOffer(uri="http://example.org/beep/unknown", content="<hello />"),
        ProfileOffer(uri=SINK, content="c2luaw==", base64=True),
        ProfileOffer(uri=ECHO, content="<init mode='fast' />"),
    ]
    channel = pair.ini.start_channel(offers, server_name="relay.example.net")
    assert channel == 1
    _, lis = pair.pump()
    assert lis == [
        ev.ChannelStartRequested(channel=1, profiles=tuple(offers), server_name="relay.example.net")
    ]
    # serverName binds the session only once the start succeeds (section 2.3.1.2).
    assert pair.lis.server_name is None
    assert pair.ini.server_name is None
    assert offers[1].data == b"sink"
    pair.lis.accept_channel(1, ECHO, "<ready-to-echo />")
    assert pair.lis.server_name == "relay.example.net"
    ini, _ = pair.pump()
    assert pair.ini.server_name == "relay.example.net"
    assert ini == [
        ev.ChannelStarted(
            channel=1,
            profile=ECHO,
            reply=ProfileOffer(uri=ECHO, content="<ready-to-echo />"),
            initiated_locally=True,
        )
    ]
    assert only(pair.lis_events, ev.ChannelStarted)[0].initiated_locally is False
    assert pair.ini.channels == pair.lis.channels == {0: "", 1: ECHO}


def test_server_name_of_the_first_successful_start_holds() -> None:
    pair = Pair()
    pair.ini.start_channel([ProfileOffer(uri="http://example.org/nope")], server_name="a.example")
    pair.pump()
    ch = pair.ini.start_channel([ProfileOffer(uri=ECHO)], server_name="b.example")
    pair.pump()
    pair.lis.reject_channel(ch, 550, "not as b.example")
    pair.pump()
    assert pair.ini.server_name is None
    assert pair.lis.server_name is None
    ch = pair.ini.start_channel([ProfileOffer(uri=ECHO)], server_name="c.example")
    pair.pump()
    pair.lis.accept_channel(ch, ECHO)
    pair.pump()
    assert pair.ini.server_name == pair.lis.server_name == "c.example"
    ch = pair.ini.start_channel([ProfileOffer(uri=ECHO)], server_name="d.example")
    pair.pump()
    pair.lis.accept_channel(ch, ECHO)
    pair.pump()
    assert pair.ini.server_name == pair.lis.server_name == "c.example"
    assert_clean(pair)


def test_listener_starts_even_channels_and_rejection_reaches_the_initiator() -> None:
    pair = Pair()
    channel = pair.lis.start_channel([ProfileOffer(uri=SINK)])
    assert channel == 2
    ini, _ = pair.pump()
    assert ini == [
        ev.ChannelStartRequested(channel=2, profiles=(ProfileOffer(uri=SINK),), server_name=None)
    ]
    pair.ini.reject_channel(2, 550, "not today")
    _, lis = pair.pump()
    assert lis == [ev.ChannelStartFailed(channel=2, code=550, text="not today")]
    # An unknown profile is refused by the session itself.
    pair.ini.start_channel([ProfileOffer(uri="http://example.org/nope")])
    ini, _ = pair.pump()
    failed = only(ini, ev.ChannelStartFailed)
    assert failed[0].code == 550
    assert_clean(pair)


def test_msg_rpy_and_msg_err() -> None:
    pair = Pair()
    ch = pair.open_channel()
    m0 = pair.ini.send_msg(ch, body(b"ping"))
    m1 = pair.ini.send_msg(ch, body(b"bad"))
    assert (m0, m1) == (0, 1)
    _, lis = pair.pump()
    assert lis == [
        ev.MessageReceived(channel=ch, msgno=0, payload=b"\r\nping"),
        ev.MessageReceived(channel=ch, msgno=1, payload=b"\r\nbad"),
    ]
    pair.lis.send_rpy(ch, 0, body(b"pong"))
    pair.lis.send_err(ch, 1, body(b"no"))
    ini, _ = pair.pump()
    assert ini == [
        ev.ReplyReceived(channel=ch, msgno=0, payload=b"\r\npong"),
        ev.ErrorReceived(channel=ch, msgno=1, payload=b"\r\nno"),
    ]
    # A reply can't be given twice, nor to a message never received.
    with pytest.raises(LocalProtocolError):
        pair.lis.send_rpy(ch, 0, body(b"again"))
    with pytest.raises(LocalProtocolError):
        pair.lis.send_rpy(ch, 7, body(b"never"))
    assert_clean(pair)


def test_one_to_many_answers_interleave_with_a_pipelined_message() -> None:
    pair = Pair()
    ch = pair.open_channel()
    pair.ini.send_msg(ch, body(b"list"))
    pair.ini.send_msg(ch, body(b"count"))
    pair.pump()
    # The application answers MSG 1 first and interleaves its work on both messages;
    # the wire still carries MSG 0's answers (and NUL) before MSG 1's reply.
    pair.lis.send_rpy(ch, 1, body(b"3"))
    assert pair.lis.send_ans(ch, 0, body(b"a" * 6000)) == 0
    assert pair.lis.send_ans(ch, 0, body(b"b")) == 1
    assert pair.lis.send_ans(ch, 0, body(b"c")) == 2
    pair.lis.send_nul(ch, 0)
    ini, _ = pair.pump()
    assert ini == [
        ev.AnswerReceived(channel=ch, msgno=0, ansno=0, payload=b"\r\n" + b"a" * 6000),
        ev.AnswerReceived(channel=ch, msgno=0, ansno=1, payload=b"\r\nb"),
        ev.AnswerReceived(channel=ch, msgno=0, ansno=2, payload=b"\r\nc"),
        ev.AnswersCompleted(channel=ch, msgno=0),
        ev.ReplyReceived(channel=ch, msgno=1, payload=b"\r\n3"),
    ]
    assert_clean(pair)


def test_pipelined_msgs_answered_out_of_order_are_delivered_in_order() -> None:
    pair = Pair(chunk=13)
    ch = pair.open_channel()
    for i in range(20):
        assert pair.ini.send_msg(ch, body(b"q%d" % i)) == i
    _, lis = pair.pump()
    assert [e.msgno for e in only(lis, ev.MessageReceived)] == list(range(20))
    order = [7, 3, 19, 0, 1, 2, 18, 4, 5, 6, 8, 9, 10, 17, 11, 12, 13, 14, 15, 16]
    for msgno in order:
        pair.lis.send_rpy(ch, msgno, body(b"r%d" % msgno))
    ini, _ = pair.pump()
    replies = only(ini, ev.ReplyReceived)
    assert [(r.msgno, r.payload) for r in replies] == [(i, b"\r\nr%d" % i) for i in range(20)]
    assert_clean(pair)


def test_one_megabyte_both_ways_at_once_with_4096_windows() -> None:
    pair = Pair()
    ch = pair.open_channel()
    # A second channel started by the listener carries the other direction's MSG.
    ch2 = pair.lis.start_channel([ProfileOffer(uri=SINK)])
    pair.pump()
    pair.ini.accept_channel(ch2, SINK)
    pair.pump()
    big_a = body(bytes(range(256)) * 4096)
    big_b = body(b"\xa5" * (1 << 20))
    pair.ini.send_msg(ch, big_a)
    pair.lis.send_msg(ch2, big_b)
    ini, lis = pair.pump()
    assert only(lis, ev.MessageReceived) == [ev.MessageReceived(channel=ch, msgno=0, payload=big_a)]
    assert only(ini, ev.MessageReceived) == [
        ev.MessageReceived(channel=ch2, msgno=0, payload=big_b)
    ]
    # Echo both back at once, still through 4096-octet windows.
    pair.lis.send_rpy(ch, 0, big_a)
    pair.ini.send_rpy(ch2, 0, big_b)
    ini, lis = pair.pump()
    assert only(ini, ev.ReplyReceived)[0].payload == big_a
    assert only(lis, ev.ReplyReceived)[0].payload == big_b
    assert max(len(f.payload) for f in pair.ini_frames + pair.lis_frames) <= 4096
    assert_clean(pair)


def test_set_receive_window_lets_larger_frames_through() -> None:
    pair = Pair()
    ch = pair.open_channel()
    pair.lis.set_receive_window(ch, 65536)
    pair.pump()
    start = len(pair.ini_frames)
    pair.ini.send_msg(ch, body(b"x" * 200_000))
    _, lis = pair.pump()
    assert len(only(lis, ev.MessageReceived)[0].payload) == 200_002
    sizes = [len(f.payload) for f in pair.ini_frames[start:]]
    assert max(sizes) > 4096  # frames up to the sender's frame limit now fit
    with pytest.raises(LocalProtocolError):
        pair.lis.set_receive_window(ch, 4096)  # windows never shrink
    with pytest.raises(LocalProtocolError):
        pair.lis.set_receive_window(ch, (1 << 20) + 1)
    assert_clean(pair)


def test_window_sizes_configured_per_session() -> None:
    pair = Pair(listener=SessionConfig(profiles=(ECHO,), receive_window_octets=1 << 20))
    ch = pair.open_channel()
    pair.ini.send_msg(ch, body(b"y" * 100_000))
    _, lis = pair.pump()
    assert len(only(lis, ev.MessageReceived)[0].payload) == 100_002
    # The larger window reaches the peer (by SEQ): frames above 4096 octets follow.
    assert max(len(f.payload) for f in pair.ini_frames) > 4096
    with pytest.raises(LocalProtocolError):
        Session(Role.LISTENER, SessionConfig(receive_window_octets=1000))


@pytest.mark.parametrize(("step", "window_back"), [(0.5, False), (0.25, True)])
def test_seq_step_sets_how_soon_answered_octets_reopen_the_window(
    step: float, window_back: bool
) -> None:
    """A SEQ goes out once answers moved the edge by the SEQ step (a fraction of the
    window): 20 KiB answered of a 64 KiB window reopens it with a quarter, not with half."""
    config = SessionConfig(profiles=(ECHO,), receive_window_octets=1 << 16, seq_step_fraction=step)
    pair = Pair(listener=config)
    ch = pair.open_channel()
    pair.ini.send_msg(ch, body(b"w" * 100))
    pair.pump()  # the first SEQ advertises the whole window
    pair.lis.send_rpy(ch, 0, body(b"ok"))
    pair.pump()
    full = pair.ini._channels[ch].send_credit  # less the 102 octets answered
    assert full == (1 << 16) - 102
    for _ in range(20):
        pair.ini.send_msg(ch, body(b"z" * 1022))  # 1,024 octets each
    pair.pump()
    for i in range(1, 21):
        pair.lis.send_rpy(ch, i, body(b"ok"))
    pair.pump()
    credit = pair.ini._channels[ch].send_credit
    if window_back:  # a SEQ went out after 16 answers; the last 4 KiB wait for the next
        assert credit == (1 << 16) - 4 * 1024
    else:  # 20 KiB is less than half the window: no SEQ yet
        assert credit == full - 20 * 1024
    with pytest.raises(LocalProtocolError):
        Session(Role.LISTENER, SessionConfig(seq_step_fraction=0.0))
    assert_clean(pair)


def test_channel_close_ok_and_declined() -> None:
    pair = Pair()
    ch = pair.open_channel()
    # The listener has a MSG of its own outstanding on the channel: it declines.
    pair.lis.send_msg(ch, body(b"working"))
    pair.pump()
    pair.ini.close_channel(ch)
    ini, _ = pair.pump()
    assert ini == [ev.ChannelCloseFailed(channel=ch, code=550, text="still working")]
    # The channel still works in both directions.
    pair.ini.send_rpy(ch, 0, body(b"done"))
    pair.ini.send_msg(ch, body(b"more"))
    ini, lis = pair.pump()
    assert only(lis, ev.ReplyReceived)[0].payload == b"\r\ndone"
    pair.lis.send_rpy(ch, 0, body(b"ok"))
    ini, _ = pair.pump()
    assert only(ini, ev.ReplyReceived)[0].payload == b"\r\nok"
    # Now the close goes through.
    pair.ini.close_channel(ch, 200)
    ini, lis = pair.pump()
    assert ini == [ev.ChannelClosed(channel=ch, code=200, by_peer=False)]
    assert lis == [ev.ChannelClosed(channel=ch, code=200, by_peer=True)]
    assert ch not in pair.ini.channels
    assert ch not in pair.lis.channels
    assert not pair.ini.is_open(ch)
    assert not pair.lis.is_open(ch)
    assert pair.ini.is_open(0)
    with pytest.raises(LocalProtocolError):
        pair.ini.send_msg(ch, body(b"late"))
    assert_clean(pair)


def test_close_with_own_msgs_outstanding_is_refused_locally() -> None:
    pair = Pair()
    ch = pair.open_channel()
    pair.ini.send_msg(ch, body(b"q"))
    with pytest.raises(LocalProtocolError):
        pair.ini.close_channel(ch)


def test_session_release_declined_then_ok() -> None:
    pair = Pair()
    ch = pair.open_channel()
    pair.lis.send_msg(ch, body(b"busy"))
    pair.pump()
    pair.ini.close()
    assert pair.ini.state is State.CLOSING
    ini, _ = pair.pump()
    assert ini == [ev.ChannelCloseFailed(channel=0, code=550, text="still working")]
    assert pair.ini.state is State.OPEN
    pair.ini.send_rpy(ch, 0, body(b"fine"))
    pair.pump()
    pair.ini.close()
    ini, lis = pair.pump()
    assert ini == [ev.SessionClosed(code=200, by_peer=False)]
    assert lis == [ev.SessionClosed(code=200, by_peer=True)]
    assert pair.ini.state is State.CLOSED
    assert pair.lis.state is State.CLOSED
    assert pair.ini.get_timer() is None
    assert_clean(pair)


def test_listener_may_release_too() -> None:
    pair = Pair()
    pair.lis.close(ReplyCode.SERVICE_NOT_AVAILABLE, "maintenance")
    ini, lis = pair.pump()
    assert ini == [ev.SessionClosed(code=421, by_peer=True)]
    assert lis == [ev.SessionClosed(code=200, by_peer=False)]


def test_idle_timer_releases_the_session() -> None:
    pair = Pair(listener=SessionConfig(profiles=(ECHO,), idle_seconds=30.0))
    assert pair.lis.get_timer() == 30.0
    assert pair.lis.handle_timer(10.0) == []
    assert pair.lis.handle_timer(31.0) == []
    assert pair.lis.state is State.CLOSING
    ini, lis = pair.pump()
    assert ini == [ev.SessionClosed(code=421, by_peer=True)]
    assert only(lis, ev.SessionClosed)


def test_close_grace_timer_terminates_a_silent_peer() -> None:
    session = Session(Role.LISTENER, SessionConfig(idle_seconds=5.0))
    peer = Session(Role.INITIATOR)
    session.receive_data(peer.data_to_send(), now=0.0)
    session.handle_timer(6.0)  # sends the close; the peer never answers
    assert session.state is State.CLOSING
    deadline = session.get_timer()
    assert deadline is not None
    events = session.handle_timer(deadline)
    assert [type(e) for e in events] == [ev.SessionTerminated]
    assert session.get_timer() is None


def test_eof_terminates() -> None:
    pair = Pair()
    events = pair.ini.receive_eof()
    assert [(type(e), e.code) for e in events] == [(ev.SessionTerminated, 421)]  # type: ignore[attr-defined]
    assert pair.ini.receive_eof() == []


# --------------------------------------------------------------------------- TLS tuning


def test_tls_tuning_restarts_greetings_on_both_sides() -> None:
    pair = Pair(
        SessionConfig(profiles=(SINK,)),
        SessionConfig(profiles=(ECHO,), tls_available=True),
    )
    assert pair.ini_events[0].profiles == (ECHO, TLS_PROFILE)  # type: ignore[attr-defined]
    channel = pair.ini.start_tls(server_name="relay.example.net")
    # Nothing else may be sent until the answer arrives.
    ini, lis = pair.pump()
    assert ini == [ev.TlsStartRequired(server_side=False, server_name="relay.example.net")]
    assert lis == [ev.TlsStartRequired(server_side=True, server_name="relay.example.net")]
    assert channel == 1
    assert pair.ini.state is State.TUNING
    assert pair.lis.state is State.TUNING
    with pytest.raises(LocalProtocolError):
        pair.ini.start_channel([ProfileOffer(uri=ECHO)])
    # Octets after proceed belong to the TLS layer: nothing more is pending.
    assert pair.ini.data_to_send() == b""
    assert pair.lis.data_to_send() == b""
    pair.lis.tls_established({"subject": "initiator"})
    pair.ini.tls_established()
    ini, lis = pair.pump()
    assert ini == [ev.GreetingReceived(profiles=(ECHO,), features=(), localize=())]
    assert lis == [ev.GreetingReceived(profiles=(SINK,), features=(), localize=())]
    assert pair.ini.tls_active
    assert pair.lis.peer_certificate == {"subject": "initiator"}
    assert pair.ini.channels == {0: ""}
    with pytest.raises(LocalProtocolError):
        pair.ini.start_tls()
    # The restarted session works.
    ch = pair.open_channel()
    pair.ini.send_msg(ch, body(b"secure"))
    _, lis = pair.pump()
    assert only(lis, ev.MessageReceived)[0].payload == b"\r\nsecure"
    assert_clean(pair)


def test_tls_refused_when_not_available() -> None:
    pair = Pair()
    pair.ini.start_tls()
    ini, _ = pair.pump()
    failed = only(ini, ev.ChannelStartFailed)
    assert failed[0].code == 550
    assert only(ini, ev.TlsStartFailed)[0].code == 550
    # Sending resumes after the refusal.
    ch = pair.open_channel()
    assert ch == 3
    assert_clean(pair)


def test_tls_established_without_negotiation_is_a_local_error() -> None:
    pair = Pair()
    with pytest.raises(LocalProtocolError):
        pair.ini.tls_established()


# --------------------------------------------------------------------------- SASL

CREDENTIALS = StaticCredentials({"alice": "wonderland"})
HOST = "relay.example.net"


def sasl_factory() -> Callable[[str, bool], SaslServer | None]:
    def factory(mechanism: str, tls_active: bool) -> SaslServer | None:
        return SaslServerExchange(
            mechanism, CREDENTIALS, tls_active=tls_active, realm="example.net", host=HOST
        )

    return factory


def sasl_pair() -> Pair:
    return Pair(
        SessionConfig(profiles=(ECHO,)),
        SessionConfig(
            profiles=(ECHO,),
            sasl_mechanisms=("SCRAM-SHA-256", "DIGEST-MD5"),
            sasl_server=sasl_factory(),
        ),
    )


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "DIGEST-MD5"])
def test_sasl_success_through_the_session(mechanism: str) -> None:
    pair = sasl_pair()
    assert sasl_profile(mechanism) in pair.ini_events[0].profiles  # type: ignore[attr-defined]
    client = SaslClientExchange(mechanism, authcid="alice", password="wonderland", host=HOST)
    pair.ini.start_sasl(mechanism, client)
    ini, lis = pair.pump()
    assert ini == [
        ev.Authenticated(mechanism=mechanism, identity=None, authorization=None, server_side=False)
    ]
    assert lis == [
        ev.Authenticated(
            mechanism=mechanism, identity="alice", authorization=None, server_side=True
        )
    ]
    assert pair.lis.peer_identity == "alice"
    assert pair.ini.authenticated
    assert pair.lis.authenticated
    # One success per session (section 4).
    with pytest.raises(LocalProtocolError):
        pair.ini.start_sasl(mechanism, client)
    ch = pair.open_channel()
    pair.ini.send_msg(ch, body(b"after auth"))
    _, lis = pair.pump()
    assert only(lis, ev.MessageReceived)
    assert_clean(pair)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "DIGEST-MD5"])
def test_sasl_bad_password_fails_with_535(mechanism: str) -> None:
    pair = sasl_pair()
    client = SaslClientExchange(mechanism, authcid="alice", password="looking-glass", host=HOST)
    pair.ini.start_sasl(mechanism, client)
    ini, lis = pair.pump()
    # The client gets the server's code and diagnostic; the server's event carries the
    # real reason (for its log), which the client is not told.
    assert ini == [
        ev.AuthenticationFailed(
            mechanism=mechanism, code=535, server_side=False, text="authentication failure"
        )
    ]
    [failed] = lis
    assert isinstance(failed, ev.AuthenticationFailed)
    assert (failed.mechanism, failed.code, failed.server_side) == (mechanism, 535, True)
    assert failed.text
    assert not pair.ini.authenticated
    assert not pair.lis.authenticated
    assert pair.lis.peer_identity is None
    # The session goes on, and a second attempt may succeed.
    good = SaslClientExchange(mechanism, authcid="alice", password="wonderland", host=HOST)
    pair.ini.start_sasl(mechanism, good)
    ini, _ = pair.pump()
    assert only(ini, ev.Authenticated)
    assert_clean(pair)


def test_sasl_mechanism_not_offered_is_refused() -> None:
    pair = sasl_pair()
    client = SaslClientExchange("PLAIN", authcid="alice", password="wonderland", host=HOST)
    pair.ini.start_sasl("PLAIN", client)
    ini, _ = pair.pump()
    assert only(ini, ev.AuthenticationFailed)[0].code == 550
    assert only(ini, ev.ChannelStartFailed)[0].code == 550
    assert_clean(pair)


def test_crossing_session_releases_both_succeed() -> None:
    pair = Pair()
    pair.ini.close()
    pair.lis.close()
    ini, lis = pair.pump()
    assert ini == [ev.SessionClosed(code=200, by_peer=True)]
    assert lis == [ev.SessionClosed(code=200, by_peer=True)]
    assert pair.ini.state is pair.lis.state is State.CLOSED
    assert pair.ini.get_timer() is None


def test_crossing_releases_with_work_outstanding_are_both_declined() -> None:
    pair = Pair()
    ch = pair.open_channel()
    pair.lis.send_msg(ch, body(b"pending"))
    pair.pump()
    pair.ini.close()
    pair.lis.close()
    ini, lis = pair.pump()
    assert ini == [ev.ChannelCloseFailed(channel=0, code=550, text="still working")]
    assert lis == [ev.ChannelCloseFailed(channel=0, code=550, text="still working")]
    assert pair.ini.state is pair.lis.state is State.OPEN


def test_crossing_channel_closes_both_succeed() -> None:
    pair = Pair()
    ch = pair.open_channel()
    pair.ini.close_channel(ch)
    pair.lis.close_channel(ch)
    ini, lis = pair.pump()
    assert ini == [ev.ChannelClosed(channel=ch, code=200, by_peer=True)]
    assert lis == [ev.ChannelClosed(channel=ch, code=200, by_peer=True)]
    assert_clean(pair)


def test_tls_refused_inside_the_positive_reply_keeps_the_error_code() -> None:
    """Section 3.1.1: the channel is created but the reply carries an error element."""
    from apexmesh.beep.frames import encode_frame
    from apexmesh.beep.mime import beep_xml

    session = Session(Role.INITIATOR)
    session.data_to_send()
    greeting = beep_xml(f"<greeting><profile uri='{TLS_PROFILE}' /></greeting>".encode())
    session.receive_data(encode_frame("RPY", 0, 0, False, 0, greeting))
    assert session.start_tls() == 1
    session.data_to_send()
    reply = beep_xml(
        f"<profile uri='{TLS_PROFILE}'><![CDATA[<error code='501'>version attribute "
        "poorly formed in &lt;ready&gt; element</error>]]></profile>".encode()
    )
    events = session.receive_data(encode_frame("RPY", 0, 1, False, len(greeting), reply))
    assert events == [
        ev.TlsStartFailed(code=501, text="version attribute poorly formed in <ready> element")
    ]
    assert session.state is State.OPEN
    # Sending resumes.
    session.start_channel([ProfileOffer(uri=ECHO)])
    assert b"<start number='3'>" in session.data_to_send()


def test_preemptive_error_ends_the_message_with_an_empty_final_frame() -> None:
    """Section 2.6.3, both roles: the server ignores the rest, the client ends the MSG."""
    pair = Pair(listener=SessionConfig(profiles=(ECHO,), max_message_octets=10_000))
    ch = pair.open_channel()
    pair.ini.send_msg(ch, body(b"L" * 100_000))
    pair.ini.send_msg(ch, body(b"next"))
    ini, lis = pair.pump()
    errors = only(ini, ev.ErrorReceived)
    assert [e.msgno for e in errors] == [0]
    assert b"code='554'" in errors[0].payload
    assert only(lis, ev.MessageReceived) == [
        ev.MessageReceived(channel=ch, msgno=1, payload=b"\r\nnext")
    ]
    msg0 = [f for f in pair.ini_frames if f.keyword == "MSG" and f.channel == ch and f.msgno == 0]
    assert msg0[-1].more is False
    assert msg0[-1].payload == b""
    assert sum(len(f.payload) for f in msg0) < 100_002  # the rest was never sent
    pair.lis.send_rpy(ch, 1, body(b"ok"))
    ini, _ = pair.pump()
    assert only(ini, ev.ReplyReceived)[0].msgno == 1
    assert_clean(pair)


def test_sequence_numbers_wrap_modulo_2_32() -> None:
    """RFC 3081 section 3.1: seqno arithmetic is modulo 2**32 (SEQ acks across the wrap)."""
    pair = Pair()
    ch = pair.open_channel()
    start = (1 << 32) - 3000
    for sender, receiver in ((pair.ini, pair.lis), (pair.lis, pair.ini)):
        sender._channels[ch].send_seqno = start  # as if 4 GiB had already crossed
        receiver._channels[ch].recv_seqno = start
    pair.ini.send_msg(ch, body(b"w" * 20_000))
    _, lis = pair.pump()
    assert len(only(lis, ev.MessageReceived)[0].payload) == 20_002
    pair.lis.send_rpy(ch, 0, body(b"v" * 20_000))
    ini, _ = pair.pump()
    assert len(only(ini, ev.ReplyReceived)[0].payload) == 20_002
    seqnos = [f.seqno for f in pair.ini_frames if f.channel == ch]
    assert min(seqnos) < 20_000 < start <= max(seqnos)  # it wrapped
    assert pair.ini._channels[ch].send_seqno == (start + 20_002) % (1 << 32)
    assert_clean(pair)


def test_message_numbers_wrap_and_skip_those_still_awaiting_replies() -> None:
    """RFC 3080 section 2.2.1.1: a msgno is not reused while its reply is pending; after
    2**31 - 1 the numbers start again at 0 and step over the ones still outstanding."""
    pair = Pair()
    ch = pair.open_channel()
    pair.ini.send_msg(ch, body(b"zero"))  # msgno 0 stays unanswered
    pair.ini.send_msg(ch, body(b"one"))  # msgno 1 too
    pair.pump()
    pair.ini._channels[ch].next_msgno = (1 << 31) - 1  # as if 2**31 MSGs had gone
    numbers = [pair.ini.send_msg(ch, body(b"%d" % n)) for n in range(3)]
    assert numbers == [(1 << 31) - 1, 2, 3]


def test_a_late_seq_after_a_thousand_channel_cycles_is_still_ignored() -> None:
    """The record of recently closed channels is a bounded FIFO, never wiped: after more
    open/close cycles than MAX_CHANNELS, a SEQ the peer sent for the channel closed last
    (before it saw the close) is still recognised and ignored, not a framing error that
    ends the whole session (it once did, after about 1,030 cycles)."""
    from apexmesh.beep.frames import encode_seq
    from apexmesh.beep.limits import MAX_CHANNELS

    pair = Pair()
    closed = []
    for _ in range(MAX_CHANNELS + 2):
        closed.append(pair.open_channel())
        pair.ini.close_channel(closed[-1])
        pair.pump()
    # The channel closed before the last one: a record wiped when full forgot it.
    events = pair.lis.receive_data(encode_seq(closed[-2], 0, 8192))
    assert not only(events, ev.SessionTerminated)
    assert pair.lis.state is State.OPEN
    assert_clean(pair)


def test_unanswered_msgs_hold_the_window_closed_until_answered() -> None:
    """RFC 3081 3.1.3: the window advances as the application accepts responsibility for
    what it received. MSGs the application has not answered stay in the window, so a
    peer whose MSGs wait (a relay holding data back under load) stops the sender on that
    channel; answers open the window again, and nothing is lost or reordered."""
    window = 8192
    pair = Pair(listener=SessionConfig(profiles=(ECHO,), receive_window_octets=window))
    ch = pair.open_channel()
    payloads = [body(bytes([65 + i % 26]) * 1000) for i in range(20)]
    for payload in payloads:
        pair.ini.send_msg(ch, payload)
    _, lis = pair.pump()
    first = only(lis, ev.MessageReceived)
    assert 0 < len(first) < len(payloads)
    assert sum(len(m.payload) for m in first) <= window
    received = list(first)
    while len(received) < len(payloads):
        for message in first:
            pair.lis.send_rpy(ch, message.msgno, body(b"ok"))
        _, lis = pair.pump()
        first = only(lis, ev.MessageReceived)
        assert first, "answers must open the window again"
        received += first
    assert [m.payload for m in received] == payloads
    for message in first:
        pair.lis.send_rpy(ch, message.msgno, body(b"ok"))
    pair.pump()
    assert_clean(pair)


def test_a_message_larger_than_the_window_still_arrives() -> None:
    """Only complete MSGs hold window space: the frames of one message larger than the
    window keep flowing until it is whole."""
    pair = Pair(listener=SessionConfig(profiles=(ECHO,), receive_window_octets=4096))
    ch = pair.open_channel()
    payload = body(b"x" * 50_000)
    pair.ini.send_msg(ch, payload)
    _, lis = pair.pump()
    assert [m.payload for m in only(lis, ev.MessageReceived)] == [payload]
    assert_clean(pair)


def test_the_window_never_moves_its_right_edge_left() -> None:
    """RFC 3081 3.1.4: the right edge of the advertised window only moves right, even
    while unanswered MSGs shrink the space available."""
    pair = Pair(listener=SessionConfig(profiles=(ECHO,), receive_window_octets=16384))
    ch = pair.open_channel()
    for _ in range(40):
        pair.ini.send_msg(ch, body(b"y" * 700))
    pair.pump()
    sender = pair.ini._channels[ch]
    edges = [sender.send_seqno + sender.send_credit]
    answered = 0
    while answered < 40:
        waiting = only(pair.lis_events, ev.MessageReceived)[answered:]
        assert waiting, "unanswered MSGs must not keep the window closed once answered"
        for message in waiting:
            pair.lis.send_rpy(ch, message.msgno, body(b"ok"))
            answered += 1
            pair.pump()
            edges.append(sender.send_seqno + sender.send_credit)
    assert edges == sorted(edges)
    assert pair.lis._channels[ch].unanswered_octets == 0
    assert_clean(pair)
