"""The BEEP session: a sans-I/O state machine for one connection (RFC 3080, RFC 3081).

Feed received octets to :meth:`Session.receive_data`, which returns the events they
caused; write :meth:`Session.data_to_send` to the transport. Application actions
(``start_channel``, ``send_msg``, ``send_rpy`` ...) queue output. Time is an argument:
``receive_data(data, now)``, ``get_timer()`` and ``handle_timer(now)``.

Theory of operation
-------------------
Rule 1: every session-level state transition lives in this file, in the table
``_TRANSITIONS`` and the few methods that consult it.

The session moves through these states::

    GREETING --greeting received--> OPEN --proceed sent/received--> TUNING
        |                             |                                |
        |                             +--close 0 sent--> CLOSING     +--tls_established--> GREETING
        +--error greeting / violation--------------------------------------> CLOSED

Channel zero is managed here (greeting, start, close, ok, error, section 2.3); data
channels carry application profiles and, for tuning, the TLS and SASL profiles, which
the session runs itself. A peer that breaks a framing rule gets what section 2.2.1.1
prescribes: the session is terminated without a response, and the event carries the
diagnostic code for the log. A poorly-formed channel-zero MSG gets an ``error`` element
in a negative reply (section 2.3.1.5).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from apexmesh.beep import events as ev
from apexmesh.beep.channel import Channel, Outgoing
from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.errors import (
    FramingError,
    LimitExceededError,
    LocalProtocolError,
    RemoteProtocolError,
)
from apexmesh.beep.frames import (
    ANS,
    ERR,
    MSG,
    NUL,
    RPY,
    Frame,
    FrameReader,
    SeqFrame,
    encode_frame,
    encode_seq,
)
from apexmesh.beep.limits import (
    CLOSE_GRACE_SECONDS,
    DEFAULT_WINDOW_OCTETS,
    MAX_CHANNELS,
    MAX_MANAGEMENT_MESSAGE_OCTETS,
    MAX_MESSAGE_OCTETS,
    MAX_NUMBER,
    MAX_OUTSTANDING_MSGS,
    MAX_SEND_FRAME_OCTETS,
    MAX_WINDOW_OCTETS,
    SEQNO_MODULUS,
)
from apexmesh.beep.management import (
    OK_XML,
    Close,
    ErrorElement,
    Greeting,
    ManagementElement,
    ManagementError,
    Ok,
    ProfileOffer,
    Start,
    close_xml,
    error_xml,
    greeting_xml,
    parse_management,
    profile_xml,
    start_xml,
)
from apexmesh.beep.mime import beep_xml, split_entity
from apexmesh.beep.tuning import (
    PROCEED_XML,
    READY_XML,
    TLS_PROFILE,
    SaslClient,
    SaslServerFactory,
    is_proceed,
    parse_ready,
    sasl_mechanism,
    sasl_profile,
)
from apexmesh.common.cache import BoundedCache, Eviction

#: Octets of partially reassembled messages one session may hold across all channels.
#: Windows bound each channel; this bounds their sum, so 1024 channels each holding a
#: partial 4 MiB message cannot exhaust memory.
MAX_SESSION_BUFFERED_OCTETS: Final = 32 * 1024 * 1024


#: The pending-management entry of this peer's own session release.
_RELEASE: Final = ("close", 0, None)


def _tls_refusal(content: str | None) -> ev.TlsStartFailed:
    """The failure a positive reply to a TLS start carries instead of ``proceed``:
    section 3.1.1 puts an ``error`` element there; keep its code and text."""
    try:
        element = parse_management((content or "").encode("utf-8"))
    except RemoteProtocolError:
        element = None
    if isinstance(element, ErrorElement):
        return ev.TlsStartFailed(code=element.code, text=element.text)
    return ev.TlsStartFailed(code=ReplyCode.ACTION_NOT_TAKEN, text=content or "no proceed element")


class Role(enum.Enum):
    """RFC 3080 section 2.1: the peer that awaits connections listens."""

    INITIATOR = "initiator"
    LISTENER = "listener"


class State(enum.Enum):
    """Session states (see the module docstring)."""

    GREETING = "greeting"
    OPEN = "open"
    TUNING = "tuning"
    CLOSING = "closing"
    CLOSED = "closed"


class Input(enum.Enum):
    """Inputs that move the session between states."""

    GREETING_RECEIVED = "greeting received"
    GREETING_REFUSED = "greeting refused"
    TUNING_AGREED = "tuning agreed"
    TLS_ESTABLISHED = "tls established"
    CLOSE_REQUESTED = "close requested"
    CLOSE_DECLINED = "close declined"
    RELEASED = "released"
    TERMINATED = "terminated"


_TRANSITIONS: Final[dict[State, dict[Input, State]]] = {
    State.GREETING: {
        Input.GREETING_RECEIVED: State.OPEN,
        Input.GREETING_REFUSED: State.CLOSED,
        Input.TERMINATED: State.CLOSED,
    },
    State.OPEN: {
        Input.TUNING_AGREED: State.TUNING,
        Input.CLOSE_REQUESTED: State.CLOSING,
        Input.RELEASED: State.CLOSED,
        Input.TERMINATED: State.CLOSED,
    },
    State.TUNING: {
        Input.TLS_ESTABLISHED: State.GREETING,
        Input.TERMINATED: State.CLOSED,
    },
    State.CLOSING: {
        Input.CLOSE_DECLINED: State.OPEN,
        Input.RELEASED: State.CLOSED,
        Input.TERMINATED: State.CLOSED,
    },
    State.CLOSED: {
        Input.TERMINATED: State.CLOSED,
        Input.RELEASED: State.CLOSED,
    },
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionConfig:
    """What a session offers and how it bounds the peer."""

    #: Application profiles this peer supports in the server role (advertised in the
    #: greeting; start requests for them surface as ``ChannelStartRequested``).
    profiles: tuple[str, ...] = ()
    #: True when this peer can run the TLS handshake (the adapter has a context).
    tls_available: bool = False
    #: SASL mechanisms offered as server, with the factory building their exchanges.
    sasl_mechanisms: tuple[str, ...] = ()
    #: Factory for server-side SASL exchanges; required when sasl_mechanisms is set.
    sasl_server: SaslServerFactory | None = None
    #: Channel management features advertised in the greeting.
    features: tuple[str, ...] = ()
    #: Language tags advertised in the greeting.
    localize: tuple[str, ...] = ()
    #: Largest reassembled message accepted on a data channel.
    max_message_octets: int = MAX_MESSAGE_OCTETS
    #: Receive window advertised for new channels (at least 4096, RFC 3081 3.1.1).
    receive_window_octets: int = DEFAULT_WINDOW_OCTETS
    #: A SEQ goes out once it would move the window's right edge by this fraction of the
    #: window (0 < f <= 1). Half keeps SEQ frames rare; a quarter lets a sender with many
    #: messages in flight keep sending while the SEQ of the first ones is on its way
    #: (issue #33: 1 MiB with SEQ at a quarter gave p2p +24% over 64 KiB at half).
    seq_step_fraction: float = 0.5
    #: Largest frame payload sent.
    max_frame_octets: int = MAX_SEND_FRAME_OCTETS
    #: Seconds without received octets before the session is released; None disables.
    idle_seconds: float | None = None
    #: When set, a listener refuses the session with this (code, text) instead of a
    #: greeting (section 2.4).
    unavailable: tuple[int, str] | None = None
    #: Refuse to proceed without privacy (section 9, 2.1): until TLS protects the
    #: session its greeting offers the TLS profile only (section 3's first example), and
    #: every other start is refused (538 for SASL, 550 for the rest). Needs TLS.
    require_privacy: bool = False
    #: Interop with Vortex 1.1, which by default ends one-to-many replies with a NUL
    #: frame whose payload is an empty MIME header (CRLF). Section 2.2.1.1 makes that a
    #: poorly-formed frame; with this set, exactly that payload is accepted as the NUL.
    accept_nul_mime_header: bool = False


class Session:
    """One BEEP session over one connection. See the module docstring."""

    def __init__(self, role: Role, config: SessionConfig | None = None) -> None:
        self.role = role
        self.config = config or SessionConfig()
        window = self.config.receive_window_octets
        if not DEFAULT_WINDOW_OCTETS <= window <= MAX_WINDOW_OCTETS:
            raise LocalProtocolError("receive window must be 4096 .. 1 MiB octets")
        if not 0.0 < self.config.seq_step_fraction <= 1.0:
            raise LocalProtocolError("the SEQ step must be a fraction of the window in (0, 1]")
        if self.config.require_privacy and not self.config.tls_available:
            raise LocalProtocolError("privacy is required but TLS is not available")
        self.state = State.GREETING
        #: True once TLS protects the session.
        self.tls_active = False
        #: Peer certificate details handed in by the adapter after the TLS handshake.
        self.peer_certificate: dict[str, object] | None = None
        #: Identity the peer authenticated as with SASL (this peer was the server).
        self.peer_identity: str | None = None
        #: Authorization identity the peer asked for with SASL.
        self.peer_authorization: str | None = None
        #: True once any SASL exchange succeeded, in either direction (section 4).
        self.authenticated = False
        #: The peer's greeting, once received.
        self.remote_greeting: Greeting | None = None
        #: serverName of the first successful start (section 2.3.1.2).
        self.server_name: str | None = None
        self._out: list[bytes] = []
        self._events: list[ev.Event] = []
        self._channels: dict[int, Channel] = {}
        self._active: dict[int, Channel] = {}
        self._pending_starts: dict[int, int] = {}
        #: serverName of each start in progress, by channel number; it binds the session
        #: only when that start succeeds (section 2.3.1.2: "the first successful start").
        self._start_server_names: dict[int, str] = {}
        #: Profile URIs offered in each start this peer sent, by channel number.
        self._start_offers: dict[int, tuple[str, ...]] = {}
        self._pending_mgmt: dict[int, tuple[str, int, object]] = {}
        #: Channels closed last (a SEQ the peer sent before it saw the close is ignored):
        #: the most recent ones are always remembered, however many came before.
        self._recently_closed: BoundedCache[int, bool] = BoundedCache(
            "recently closed channels", MAX_CHANNELS, policy=Eviction.FIFO
        )
        self._next_channel = 1 if role is Role.INITIATOR else 2
        self._buffered = 0
        self._send_blocked = False
        self._last_activity = 0.0
        self._close_deadline: float | None = None
        self._reader = FrameReader(MAX_WINDOW_OCTETS)
        self._trailing = b""
        self._post_tuning = bytearray()
        self._ended = False
        self._begin()

    # ------------------------------------------------------------------ public API

    @property
    def channels(self) -> dict[int, str]:
        """Open channels and their profiles (channel zero included, profile "")."""
        return {n: c.profile for n, c in self._channels.items()}

    def is_open(self, number: int) -> bool:
        """True while channel ``number`` is open (asked on every delivery: no copy)."""
        return number in self._channels

    def data_to_send(self) -> bytes:
        """Return and forget the octets queued for the transport."""
        if not self._out:
            return b""
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        return data

    @property
    def trailing_data(self) -> bytes:
        """Octets received after the frame that started TLS negotiation (h11 style)."""
        return self._trailing

    def receive_data(self, data: bytes, now: float = 0.0) -> list[ev.Event]:
        """Process received octets and return the events they caused."""
        self._last_activity = now
        if self._tuning():
            # Octets protected by the new TLS layer can arrive before the adapter calls
            # tls_established; keep them (bounded) for the restarted session.
            self._post_tuning += data
            if len(self._post_tuning) > MAX_MANAGEMENT_MESSAGE_OCTETS:
                self._terminate(ReplyCode.TRANSACTION_FAILED, "too much data during tuning")
            return self._take_events()
        if not self._receiving():
            return self._take_events()
        self._reader.feed(data)
        seq_due: dict[int, Channel] = {}
        next_frame = self._reader.next_frame
        try:
            # Every frame of the chunk in one pass (the state is read inline: a frame can
            # end the session or start tuning, and nothing is read after that).
            while self.state is not State.TUNING and self.state is not State.CLOSED:
                frame = next_frame()
                if frame is None:
                    break
                if type(frame) is SeqFrame:
                    self._on_seq(frame)
                    continue
                assert type(frame) is Frame  # noqa: S101  (narrowing for mypy)
                channel = self._on_frame(frame)
                if frame.payload:
                    seq_due[frame.channel] = channel
        except RemoteProtocolError as exc:
            self._terminate(exc.code, str(exc))
            return self._take_events()
        if self._tuning():
            self._trailing = self._reader.take_trailing_data()
        for channel in seq_due.values():
            if channel.number in self._channels:
                self._maybe_send_seq(channel)
        self._flush()
        return self._take_events()

    def receive_eof(self) -> list[ev.Event]:
        """The transport closed; report how the session ended."""
        if self.state is not State.CLOSED:
            self._terminate(ReplyCode.SERVICE_NOT_AVAILABLE, "connection closed by peer")
        return self._take_events()

    def touch(self, now: float) -> None:
        """Record activity at ``now`` without data: the adapter calls it when the
        transport opens, so the idle timer counts from the connection, not from 0."""
        self._last_activity = now

    def get_timer(self) -> float | None:
        """When :meth:`handle_timer` should next be called, or None."""
        if self.state is State.CLOSED:
            return None
        if self._close_deadline is not None:
            return self._close_deadline
        if self.config.idle_seconds is None:
            return None
        return self._last_activity + self.config.idle_seconds

    def handle_timer(self, now: float) -> list[ev.Event]:
        """Run the idle and close timers."""
        if self._close_deadline is not None and now >= self._close_deadline:
            self._terminate(ReplyCode.SERVICE_NOT_AVAILABLE, "peer did not answer the release")
        elif (
            self.config.idle_seconds is not None
            and self._close_deadline is None
            and now >= self._last_activity + self.config.idle_seconds
        ):
            if self.state is State.OPEN:
                self.close(ReplyCode.SERVICE_NOT_AVAILABLE, "idle timeout")
                self._close_deadline = now + CLOSE_GRACE_SECONDS
            else:
                self._terminate(ReplyCode.SERVICE_NOT_AVAILABLE, "idle timeout")
        return self._take_events()

    def start_channel(
        self, profiles: Iterable[ProfileOffer], server_name: str | None = None
    ) -> int:
        """Ask the peer to start a channel; returns its number.

        The answer arrives as ``ChannelStarted`` or ``ChannelStartFailed``.
        """
        return self._request_start(tuple(profiles), server_name, ("start", None))

    def accept_channel(
        self, channel: int, profile: str, content: str | None = None, *, base64: bool = False
    ) -> None:
        """Accept the peer's start request for ``channel`` with one of the offered profiles."""
        self._require_open()
        msgno = self._pending_starts.pop(channel, None)
        if msgno is None:
            raise LocalProtocolError(f"no start request pending for channel {channel}")
        self._open_channel(
            channel, profile, msgno, ProfileOffer(uri=profile, content=content, base64=base64)
        )
        self._flush()

    def reject_channel(self, channel: int, code: int, text: str = "") -> None:
        """Decline the peer's start request for ``channel`` with an error element."""
        self._require_open()
        msgno = self._pending_starts.pop(channel, None)
        if msgno is None:
            raise LocalProtocolError(f"no start request pending for channel {channel}")
        self._start_server_names.pop(channel, None)
        self._reply_mgmt(msgno, ERR, error_xml(code, text))
        self._flush()

    def send_msg(self, channel: int, payload: bytes) -> int:
        """Queue a MSG on a data channel; returns its message number."""
        ch = self._data_channel(channel)
        if ch.close_requested:
            raise LocalProtocolError("channel close requested: no new MSG until answered")
        return self._queue_msg(ch, payload)

    def send_rpy(self, channel: int, msgno: int, payload: bytes) -> None:
        """Queue the positive reply to the peer's MSG ``msgno``.

        The reply to the oldest MSG awaiting one (the usual case: replies in the order
        the MSGs came, section 2.6.1), when nothing else waits to be sent and it fits the
        peer's window in one frame, is framed at once: the octets are those the general
        path (queue, then :meth:`_flush`) writes, without its bookkeeping."""
        ch = self._channels.get(channel)
        if (
            ch is not None
            and channel
            and not ch.held
            and ch.peer_msgs
            and ch.peer_msgs[0] == msgno
            and not self._active
            and ch.gate_open
            and len(payload) <= ch.send_credit
            and len(payload) <= self.config.max_frame_octets
            and self.state is State.OPEN
            and not self._send_blocked
            and not self._ended
        ):
            ch.peer_msgs.popleft()
            ch.peer_msg_set.discard(msgno)
            answered = ch.unanswered.pop(msgno, 0)
            if answered:
                # The application took responsibility for the MSG: its octets leave
                # the window (RFC 3081 section 3.1.3), which may now slide.
                ch.unanswered_octets -= answered
                self._maybe_send_seq(ch)
            size = len(payload)
            self._out.append(encode_frame(RPY, channel, msgno, False, ch.send_seqno, payload))
            ch.send_seqno = (ch.send_seqno + size) % SEQNO_MODULUS
            ch.send_credit -= size
            return
        self._queue_reply(self._data_channel(channel), msgno, RPY, payload, final=True)

    def send_err(self, channel: int, msgno: int, payload: bytes) -> None:
        """Queue the negative reply to the peer's MSG ``msgno``."""
        self._queue_reply(self._data_channel(channel), msgno, ERR, payload, final=True)

    def send_ans(self, channel: int, msgno: int, payload: bytes) -> int:
        """Queue one answer to the peer's MSG ``msgno``; returns the answer number."""
        ch = self._data_channel(channel)
        ansno = ch.next_ansno.get(msgno, 0)
        ch.next_ansno[msgno] = ansno + 1
        self._queue_reply(ch, msgno, ANS, payload, final=False, ansno=ansno)
        return ansno

    def send_nul(self, channel: int, msgno: int) -> None:
        """End a one-to-many reply."""
        ch = self._data_channel(channel)
        ch.next_ansno.pop(msgno, None)
        self._queue_reply(ch, msgno, NUL, b"", final=True)

    def close_channel(self, channel: int, code: int = ReplyCode.SUCCESS, text: str = "") -> None:
        """Ask the peer to close a data channel (section 2.3.1.3)."""
        ch = self._data_channel(channel)
        if ch.awaiting_reply:
            raise LocalProtocolError("cannot close: MSGs on the channel await replies")
        ch.close_requested = True
        self._queue_mgmt_msg(
            close_xml(Close(number=channel, code=code, text=text)), ("close", channel, None)
        )

    def close(self, code: int = ReplyCode.SUCCESS, text: str = "") -> None:
        """Ask the peer to release the session (section 2.4)."""
        if self.state is State.CLOSED:
            return
        if self.state is not State.OPEN:
            self._terminate(code, text or "session released before it was open")
            return
        self._transition(Input.CLOSE_REQUESTED)
        self._queue_mgmt_msg(close_xml(Close(number=0, code=code, text=text)), _RELEASE)

    def set_receive_window(self, channel: int, octets: int) -> None:
        """Advertise a larger receive window for a channel (RFC 3081 section 3.1.3)."""
        self._require_open()
        ch = self._channels.get(channel)
        if ch is None:
            raise LocalProtocolError(f"channel {channel} is not open")
        if not ch.recv_window <= octets <= MAX_WINDOW_OCTETS:
            raise LocalProtocolError("a window may grow up to 1 MiB, never shrink (RFC 1122)")
        ch.recv_window = octets
        self._maybe_send_seq(ch, at_least=1)

    def start_tls(self, server_name: str | None = None) -> int:
        """Ask the peer for TLS tuning (section 3.1); returns the channel number.

        Nothing else is sent until the peer answers. On ``proceed`` the session reports
        ``TlsStartRequired``; on an error, ``TlsStartFailed``.
        """
        if self.tls_active:
            raise LocalProtocolError("TLS is already active on this session")
        if self.authenticated:
            raise LocalProtocolError("TLS may not start after SASL succeeded (section 4.1)")
        offer = ProfileOffer(uri=TLS_PROFILE, content=READY_XML)
        channel = self._request_start((offer,), server_name, ("tls", None))
        self._send_blocked = True
        return channel

    def start_sasl(
        self, mechanism: str, exchange: SaslClient, server_name: str | None = None
    ) -> int:
        """Authenticate to the peer with a SASL mechanism (section 4.1)."""
        if self.authenticated:
            raise LocalProtocolError("no further authentication after a success (section 4)")
        offer = ProfileOffer(uri=sasl_profile(mechanism), content=exchange.start_piggyback())
        return self._request_start((offer,), server_name, ("sasl", (mechanism, exchange)))

    def tls_established(self, peer_certificate: dict[str, object] | None = None) -> None:
        """The adapter finished the TLS handshake: restart with new greetings (section 3)."""
        if self.state is not State.TUNING:
            raise LocalProtocolError("no TLS negotiation in progress")
        self._transition(Input.TLS_ESTABLISHED)
        self.tls_active = True
        self.peer_certificate = peer_certificate
        self._begin()
        early, self._post_tuning = bytes(self._post_tuning), bytearray()
        if early:
            self._events.extend(self.receive_data(early, self._last_activity))

    # ------------------------------------------------------------------ internals: setup

    def _begin(self) -> None:
        """Start (or restart after tuning) with channel zero and a greeting."""
        self._channels.clear()
        self._active.clear()
        self._pending_starts.clear()
        self._start_server_names.clear()
        self._start_offers.clear()
        self._pending_mgmt.clear()
        self._buffered = 0
        self._send_blocked = False
        self._reader = FrameReader(MAX_WINDOW_OCTETS)
        zero = Channel(number=0, profile="")
        zero.next_msgno = 1  # msgno 0 is the greeting exchange (section 2.4)
        zero.awaiting_reply.append(0)
        zero.awaiting_set.add(0)
        zero.msgs_started = 1  # the peer's greeting answers no MSG on the wire
        self._channels[0] = zero
        unavailable = self.config.unavailable
        if self.role is Role.LISTENER and unavailable is not None:
            self._enqueue(zero, Outgoing(ERR, 0, beep_xml(error_xml(*unavailable))))
            self._flush()
            self._terminate(unavailable[0], "refused the session: " + unavailable[1])
            return
        profiles = list(self.config.profiles)
        if self.config.tls_available and not self.tls_active:
            profiles.append(TLS_PROFILE)
        if self.config.sasl_server is not None and not self.authenticated:
            profiles.extend(sasl_profile(m) for m in self.config.sasl_mechanisms)
        if self._privacy_missing():
            profiles = [TLS_PROFILE]
        greeting = Greeting(
            profiles=tuple(profiles), features=self.config.features, localize=self.config.localize
        )
        self._enqueue(zero, Outgoing(RPY, 0, beep_xml(greeting_xml(greeting))))
        self._flush()

    # ------------------------------------------------------------------ internals: state

    def _privacy_missing(self) -> bool:
        """True while a listener that requires privacy has no TLS yet."""
        return self.config.require_privacy and self.role is Role.LISTENER and not self.tls_active

    def _transition(self, event: Input) -> None:
        try:
            self.state = _TRANSITIONS[self.state][event]
        except KeyError:
            raise LocalProtocolError(
                f"can't handle {event.value} in state {self.state.value}"
            ) from None

    def _terminate(self, code: int, reason: str) -> None:
        if self._ended:
            return
        self._ended = True
        self.state = State.CLOSED
        self._close_deadline = None
        self._events.append(ev.SessionTerminated(code=int(code), reason=reason))

    def _receiving(self) -> bool:
        return self.state is not State.TUNING and self.state is not State.CLOSED

    def _tuning(self) -> bool:
        return self.state is State.TUNING

    def pending_events(self) -> list[ev.Event]:
        """Return and forget events not yet returned (e.g. a refusal at construction)."""
        return self._take_events()

    def _take_events(self) -> list[ev.Event]:
        events = self._events
        self._events = []
        return events

    # ------------------------------------------------------------------ internals: receiving

    def _on_seq(self, frame: SeqFrame) -> None:
        ch = self._channels.get(frame.channel)
        if ch is None:
            if frame.channel in self._recently_closed:
                return  # the peer had not yet seen our close when it sent this
            raise FramingError(f"SEQ for channel {frame.channel}, which does not exist")
        delta = (frame.ackno - ch.send_seqno) % SEQNO_MODULUS
        if delta >= SEQNO_MODULUS // 2:
            delta -= SEQNO_MODULUS
        if delta > 0:
            raise FramingError("SEQ acknowledges octets that were never sent")
        ch.send_credit = max(0, frame.window + delta)
        if ch.queue:
            self._active[ch.number] = ch

    def _on_frame(self, frame: Frame) -> Channel:
        ch = self._channels.get(frame.channel)
        if ch is None:
            raise FramingError(f"frame for channel {frame.channel}, which does not exist")
        if self.state is State.GREETING and (
            frame.channel != 0 or frame.msgno != 0 or frame.keyword not in (RPY, ERR)
        ):
            raise FramingError("the first message of a session must be the greeting")
        if frame.seqno != ch.recv_seqno:
            raise FramingError(f"sequence number {frame.seqno}, expected {ch.recv_seqno}")
        size = len(frame.payload)
        if size > ch.recv_credit:
            raise FramingError("frame exceeds the advertised window (RFC 3081 section 3.1)")
        ch.recv_credit -= size
        ch.recv_seqno = (ch.recv_seqno + size) % SEQNO_MODULUS
        keyword = frame.keyword
        last = ch.last_more
        if last is not None and (last[1] != frame.msgno or last[0] != keyword):
            raise FramingError("frame interrupts a message whose previous frame was intermediate")
        ch.last_more = (keyword, frame.msgno) if frame.more else None
        if keyword == MSG:
            self._on_msg_frame(ch, frame)
        else:
            self._on_reply_frame(ch, frame)
        return ch

    def _message_limit(self, ch: Channel) -> int:
        return MAX_MANAGEMENT_MESSAGE_OCTETS if ch.number == 0 else self.config.max_message_octets

    def _account(self, octets: int) -> None:
        self._buffered += octets
        if self._buffered > MAX_SESSION_BUFFERED_OCTETS:
            raise LimitExceededError("partially received messages exceed the session's buffer")

    def _on_msg_frame(self, ch: Channel, frame: Frame) -> None:
        msgno = frame.msgno
        if not frame.more and ch.in_msgno is None and ch.number and ch.sasl_server is None:
            # A whole MSG in one frame on a data channel (nearly every message a relay or
            # an endpoint receives): the general path below without reassembly state,
            # every check kept; anything over a limit takes the general path.
            if msgno in ch.peer_msg_set:
                raise FramingError(f"MSG {msgno} reused while its reply is pending")
            payload = frame.payload
            size = len(payload)
            if (
                size <= self.config.max_message_octets
                and len(ch.peer_msgs) < MAX_OUTSTANDING_MSGS
                and self._buffered + size <= MAX_SESSION_BUFFERED_OCTETS
            ):
                ch.peer_msgs.append(msgno)
                ch.peer_msg_set.add(msgno)
                ch.unanswered[msgno] = size
                ch.unanswered_octets += size
                self._events.append(ev.message_received(ch.number, msgno, payload))
                return
        if ch.in_msgno is None:
            if msgno in ch.peer_msg_set:
                raise FramingError(f"MSG {msgno} reused while its reply is pending")
            if ch.close_requested and ch.number != 0:
                pass  # section 2.3.1.3 NOTE WELL: keep processing MSGs until the close is ok
            ch.in_msgno = msgno
        elif ch.in_msgno != msgno:
            raise FramingError("MSG frames of two messages interleaved")
        size = len(frame.payload)
        if not ch.in_discarding:
            ch.in_size += size
            if ch.in_size > self._message_limit(ch):
                self._buffered -= ch.in_size - size
                ch.in_chunks.clear()
                ch.in_discarding = True
                self._preempt(
                    ch,
                    msgno,
                    ReplyCode.TRANSACTION_FAILED,
                    f"message exceeds {self._message_limit(ch)} octets",
                )
            else:
                self._account(size)
                ch.in_chunks.append(frame.payload)
        if frame.more:
            return
        chunks = ch.in_chunks
        discarded = ch.in_discarding
        ch.in_msgno = None
        ch.in_chunks = []
        ch.in_discarding = False
        self._buffered -= 0 if discarded else ch.in_size
        ch.in_size = 0
        if discarded:
            return
        payload = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if len(ch.peer_msgs) >= MAX_OUTSTANDING_MSGS:
            if len(ch.peer_msgs) >= 2 * MAX_OUTSTANDING_MSGS:
                # The 450 answers wait behind the unanswered MSGs (section 2.6.1): a
                # peer that keeps sending would grow them without bound.
                raise LimitExceededError("peer keeps sending MSGs nobody can answer")
            self._preempt(
                ch,
                msgno,
                ReplyCode.ACTION_NOT_TAKEN_TRANSIENT,
                "too many messages awaiting replies on this channel",
            )
            return
        ch.peer_msgs.append(msgno)
        ch.peer_msg_set.add(msgno)
        if ch.number == 0:
            self._on_management_msg(msgno, payload)
        elif ch.sasl_server is not None:
            self._on_sasl_msg(ch, msgno, payload)
        else:
            size = len(payload)
            ch.unanswered[msgno] = size
            ch.unanswered_octets += size
            self._events.append(ev.MessageReceived(channel=ch.number, msgno=msgno, payload=payload))

    def _preempt(self, ch: Channel, msgno: int, code: int, text: str) -> None:
        """Answer a MSG with ERR before (or instead of) delivering it (section 2.6.3)."""
        ch.peer_msgs.append(msgno)
        ch.peer_msg_set.add(msgno)
        self._queue_reply(ch, msgno, ERR, beep_xml(error_xml(code, text)), final=True)

    def _on_reply_frame(self, ch: Channel, frame: Frame) -> None:
        keyword = frame.keyword
        msgno = frame.msgno
        if not ch.awaiting_reply or ch.awaiting_reply[0] != msgno:
            if msgno in ch.awaiting_set:
                raise FramingError(f"reply to MSG {msgno} arrived out of order")
            raise FramingError(f"{keyword} for MSG {msgno}, which awaits no reply")
        if not ch.msgs_started:
            raise FramingError(f"{keyword} for MSG {msgno}, which was not sent yet")
        previous = ch.reply_keyword
        size = len(frame.payload)
        if keyword in (RPY, ERR):
            if previous is not None and previous != keyword:
                raise FramingError(f"{keyword} frame continues a {previous} reply")
            ch.reply_keyword = keyword
            if keyword == ERR:
                self._on_preemptive_err(ch, msgno)
            self._grow_reply(ch, size)
            ch.reply_chunks.append(frame.payload)
            if frame.more:
                return
            chunks = ch.reply_chunks
            payload = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            self._finish_reply(ch)
            self._deliver_reply(ch, keyword, msgno, payload)
        elif keyword == ANS:
            if previous not in (None, ANS):
                raise FramingError(f"ANS frame continues a {previous} reply")
            ch.reply_keyword = ANS
            self._grow_reply(ch, size)
            assert frame.ansno is not None  # noqa: S101  (the reader guarantees it for ANS)
            parts = ch.answers.setdefault(frame.ansno, [])
            parts.append(frame.payload)
            if frame.more:
                return
            del ch.answers[frame.ansno]
            payload = parts[0] if len(parts) == 1 else b"".join(parts)
            self._buffered -= len(payload)
            ch.reply_size -= len(payload)
            self._deliver_answer(ch, msgno, frame.ansno, payload)
        else:  # NUL
            if frame.more or (size and not self._vortex_nul(frame.payload)):
                raise FramingError("NUL frame must be final and empty")
            if previous not in (None, ANS):
                raise FramingError(f"NUL frame ends a {previous} reply")
            if ch.answers:
                raise FramingError("NUL frame while answers are still in progress")
            self._finish_reply(ch)
            if ch.number != 0:
                self._events.append(ev.AnswersCompleted(channel=ch.number, msgno=msgno))

    def _vortex_nul(self, payload: bytes) -> bool:
        """The interop exception of :attr:`SessionConfig.accept_nul_mime_header`."""
        return self.config.accept_nul_mime_header and payload == b"\r\n"

    def _grow_reply(self, ch: Channel, size: int) -> None:
        ch.reply_size += size
        if ch.reply_size > self._message_limit(ch):
            raise LimitExceededError(f"reply exceeds {self._message_limit(ch)} octets")
        self._account(size)

    def _finish_reply(self, ch: Channel) -> None:
        ch.awaiting_set.discard(ch.awaiting_reply.popleft())
        ch.msgs_started -= 1
        self._buffered -= ch.reply_size
        ch.reply_size = 0
        ch.reply_chunks = []
        ch.reply_keyword = None

    def _on_preemptive_err(self, ch: Channel, msgno: int) -> None:
        """Section 2.6.3: an ERR before our MSG's final frame ends that MSG early."""
        if ch.queue:
            head = ch.queue[0]
            if head.keyword == MSG and head.msgno == msgno and 0 < head.offset < len(head.payload):
                head.payload = head.payload[: head.offset]

    def _deliver_reply(self, ch: Channel, keyword: str, msgno: int, payload: bytes) -> None:
        if ch.number == 0:
            self._on_management_reply(keyword, msgno, payload)
        elif ch.sasl_client is not None:
            self._on_sasl_reply(ch, keyword == ERR, payload)
        elif keyword == RPY:
            self._events.append(ev.ReplyReceived(channel=ch.number, msgno=msgno, payload=payload))
        else:
            self._events.append(ev.ErrorReceived(channel=ch.number, msgno=msgno, payload=payload))

    def _deliver_answer(self, ch: Channel, msgno: int, ansno: int, payload: bytes) -> None:
        if ch.number == 0 or ch.sasl_client is not None:
            raise FramingError("ANS is not a valid reply on this channel")
        self._events.append(
            ev.AnswerReceived(channel=ch.number, msgno=msgno, ansno=ansno, payload=payload)
        )

    # ------------------------------------------------------------------ channel management

    def _on_management_msg(self, msgno: int, payload: bytes) -> None:
        try:
            element = parse_management(split_entity(payload).body)
        except RemoteProtocolError as exc:
            self._reply_mgmt(msgno, ERR, error_xml(exc.code, str(exc)))
            return
        if isinstance(element, Start):
            self._on_start(msgno, element)
        elif isinstance(element, Close):
            self._on_close(msgno, element)
        else:
            self._reply_mgmt(
                msgno, ERR, error_xml(ReplyCode.PARAMETER_SYNTAX_ERROR, "expected start or close")
            )

    def _on_start(self, msgno: int, start: Start) -> None:
        number = start.number
        odd_expected = self.role is Role.LISTENER
        if (number % 2 == 1) != odd_expected:
            parity = "odd" if odd_expected else "even"
            self._reply_mgmt(
                msgno,
                ERR,
                error_xml(
                    ReplyCode.PARAMETER_SYNTAX_ERROR,
                    f"number attribute in <start> element must be {parity}-valued",
                ),
            )
            return
        if number in self._channels or number in self._pending_starts:
            self._reply_mgmt(
                msgno,
                ERR,
                error_xml(ReplyCode.ACTION_NOT_TAKEN, f"channel {number} is already in use"),
            )
            return
        if len(self._channels) + len(self._pending_starts) > MAX_CHANNELS:
            self._reply_mgmt(
                msgno,
                ERR,
                error_xml(ReplyCode.ACTION_NOT_TAKEN, "too many channels on this session"),
            )
            return
        if start.server_name is not None:
            self._start_server_names[number] = start.server_name
        else:
            self._start_server_names.pop(number, None)
        if self._privacy_missing() and not any(p.uri == TLS_PROFILE for p in start.profiles):
            self._start_server_names.pop(number, None)
            sasl = any(sasl_mechanism(p.uri) is not None for p in start.profiles)
            self._reply_mgmt(
                msgno,
                ERR,
                error_xml(
                    ReplyCode.AUTH_REQUIRES_ENCRYPTION if sasl else ReplyCode.ACTION_NOT_TAKEN,
                    "privacy required: tune the session with TLS first",
                ),
            )
            return
        for offer in start.profiles:
            if offer.uri == TLS_PROFILE and self.config.tls_available:
                self._on_tls_start(msgno, number, offer)
                return
            mechanism = sasl_mechanism(offer.uri)
            if mechanism is not None and mechanism in self.config.sasl_mechanisms:
                self._on_sasl_start(msgno, number, offer, mechanism)
                return
        if not any(p.uri in self.config.profiles for p in start.profiles):
            self._start_server_names.pop(number, None)
            self._reply_mgmt(
                msgno,
                ERR,
                error_xml(ReplyCode.ACTION_NOT_TAKEN, "all requested profiles are unsupported"),
            )
            return
        self._pending_starts[number] = msgno
        self._events.append(
            ev.ChannelStartRequested(
                channel=number, profiles=start.profiles, server_name=start.server_name
            )
        )

    def _on_tls_start(self, msgno: int, number: int, offer: ProfileOffer) -> None:
        if self.tls_active or self.authenticated or len(self._channels) > 1:
            self._reply_mgmt(
                msgno,
                ERR,
                error_xml(
                    ReplyCode.ACTION_NOT_TAKEN,
                    "TLS must be negotiated once, before other channels and authentication",
                ),
            )
            return
        try:
            parse_ready(offer.content)
        except ManagementError as exc:
            reply = ProfileOffer(uri=TLS_PROFILE, content=error_xml(exc.code, str(exc)).decode())
            self._open_channel(number, TLS_PROFILE, msgno, reply, announce=False)
            return
        self._bind_server_name(number)
        server_name = self.server_name

        def proceed_sent() -> None:
            self._transition(Input.TUNING_AGREED)
            self._send_blocked = True
            self._events.append(ev.TlsStartRequired(server_side=True, server_name=server_name))

        reply = ProfileOffer(uri=TLS_PROFILE, content=PROCEED_XML)
        self._open_channel(number, TLS_PROFILE, msgno, reply, announce=False, on_sent=proceed_sent)

    def _on_sasl_start(self, msgno: int, number: int, offer: ProfileOffer, mechanism: str) -> None:
        factory = self.config.sasl_server
        exchange = None if factory is None else factory(mechanism, self.tls_active)
        if self.authenticated or exchange is None:
            self._reply_mgmt(
                msgno,
                ERR,
                error_xml(
                    ReplyCode.ACTION_NOT_TAKEN,
                    "already authenticated" if self.authenticated else "mechanism not available",
                ),
            )
            return
        content = exchange.handle_start(offer.content)
        ch = self._open_channel(
            number, offer.uri, msgno, ProfileOffer(uri=offer.uri, content=content), announce=False
        )
        ch.sasl_server = exchange
        ch.sasl_mechanism = mechanism
        self._check_sasl_server(ch)

    def _on_sasl_msg(self, ch: Channel, msgno: int, payload: bytes) -> None:
        exchange = ch.sasl_server
        assert exchange is not None  # noqa: S101  (caller checked)
        try:
            body = split_entity(payload).body
        except RemoteProtocolError as exc:
            self._queue_reply(ch, msgno, ERR, beep_xml(error_xml(exc.code, str(exc))), final=True)
            return
        if exchange.done:
            ok, reply = False, error_xml(ReplyCode.ACTION_NOT_TAKEN, "authentication is over")
        else:
            ok, reply = exchange.handle_message(body)
        self._queue_reply(ch, msgno, RPY if ok else ERR, beep_xml(reply), final=True)
        self._check_sasl_server(ch)

    def _check_sasl_server(self, ch: Channel) -> None:
        exchange = ch.sasl_server
        if exchange is None or not exchange.done or not ch.sasl_mechanism:
            return
        mechanism, ch.sasl_mechanism = ch.sasl_mechanism, ""
        if exchange.succeeded:
            self.authenticated = True
            self.peer_identity = exchange.authenticated_identity
            self.peer_authorization = exchange.authorization_identity
            self._events.append(
                ev.Authenticated(
                    mechanism=mechanism,
                    identity=exchange.authenticated_identity,
                    authorization=exchange.authorization_identity,
                    server_side=True,
                )
            )
        else:
            self._events.append(
                ev.AuthenticationFailed(
                    mechanism=mechanism,
                    code=exchange.failure_code or ReplyCode.AUTH_FAILURE,
                    server_side=True,
                    text=exchange.failure_text,
                    identity=exchange.claimed_identity,
                )
            )

    def _on_sasl_reply(self, ch: Channel, is_error: bool, payload: bytes) -> None:
        exchange = ch.sasl_client
        assert exchange is not None  # noqa: S101  (caller checked)
        try:
            body = split_entity(payload).body
        except RemoteProtocolError as exc:
            raise FramingError(f"poorly-formed SASL reply: {exc}") from None
        self._sasl_client_step(ch, exchange.handle_reply(is_error, body))

    def _sasl_client_step(self, ch: Channel, next_msg: bytes | None) -> None:
        exchange = ch.sasl_client
        assert exchange is not None  # noqa: S101  (caller checked)
        if next_msg is not None and not exchange.done:
            self._queue_msg(ch, beep_xml(next_msg))
            return
        if not exchange.done or not ch.sasl_mechanism:
            return
        mechanism, ch.sasl_mechanism = ch.sasl_mechanism, ""
        if exchange.succeeded:
            self.authenticated = True
            self._events.append(
                ev.Authenticated(
                    mechanism=mechanism, identity=None, authorization=None, server_side=False
                )
            )
        else:
            self._events.append(
                ev.AuthenticationFailed(
                    mechanism=mechanism,
                    code=exchange.failure_code or ReplyCode.AUTH_FAILURE,
                    server_side=False,
                    text=exchange.failure_text,
                )
            )

    def _on_close(self, msgno: int, close: Close) -> None:
        if close.number == 0:
            busy = any(c.busy() for n, c in self._channels.items() if n != 0)
            zero = self._channels[0]
            # Our own release request, crossing the peer's, is no reason to decline:
            # both peers want the session gone (otherwise each would answer 550).
            waiting = [m for m in zero.awaiting_reply if self._pending_mgmt.get(m) != _RELEASE]
            if busy or self._pending_starts or len(zero.peer_msgs) > 1 or waiting:
                self._reply_mgmt(msgno, ERR, error_xml(ReplyCode.ACTION_NOT_TAKEN, "still working"))
                return

            def released() -> None:
                self._transition(Input.RELEASED)
                self._close_deadline = None
                self._events.append(ev.SessionClosed(code=close.code, by_peer=True))

            self._reply_mgmt(msgno, RPY, OK_XML, on_sent=released)
            return
        ch = self._channels.get(close.number)
        if ch is None:
            self._reply_mgmt(
                msgno,
                ERR,
                error_xml(ReplyCode.PARAMETER_INVALID, f"channel {close.number} is not open"),
            )
            return
        if ch.busy():
            self._reply_mgmt(msgno, ERR, error_xml(ReplyCode.ACTION_NOT_TAKEN, "still working"))
            return
        self._remove_channel(ch.number)
        self._events.append(ev.ChannelClosed(channel=ch.number, code=close.code, by_peer=True))
        self._reply_mgmt(msgno, RPY, OK_XML)

    def _on_management_reply(self, keyword: str, msgno: int, payload: bytes) -> None:
        try:
            element = parse_management(split_entity(payload).body)
        except RemoteProtocolError as exc:
            # Section 2.2.2.1: a poorly-formed reply on channel zero terminates the session.
            raise FramingError(f"poorly-formed reply on channel zero: {exc}") from None
        if msgno == 0:
            self._on_greeting(keyword, element)
            return
        kind, number, extra = self._pending_mgmt.pop(msgno, ("", 0, None))
        if kind in ("start", "tls", "sasl"):
            self._on_start_reply(keyword, element, kind, number, extra)
        elif kind == "close":
            self._on_close_reply(keyword, element, number)
        else:
            raise FramingError(f"reply on channel zero to unknown MSG {msgno}")

    def _on_greeting(self, keyword: str, element: ManagementElement) -> None:
        if keyword == ERR:
            code = (
                element.code
                if isinstance(element, ErrorElement)
                else ReplyCode.SERVICE_NOT_AVAILABLE
            )
            text = element.text if isinstance(element, ErrorElement) else ""
            self._transition(Input.GREETING_REFUSED)
            self._events.append(
                ev.SessionTerminated(code=code, reason="peer refused the session: " + text)
            )
            return
        if not isinstance(element, Greeting):
            raise FramingError("the first reply on channel zero must be a greeting")
        self.remote_greeting = element
        self._transition(Input.GREETING_RECEIVED)
        self._events.append(
            ev.GreetingReceived(
                profiles=element.profiles, features=element.features, localize=element.localize
            )
        )

    def _on_start_reply(
        self, keyword: str, element: ManagementElement, kind: str, number: int, extra: object
    ) -> None:
        if kind == "tls":
            self._send_blocked = False
        offered = self._start_offers.pop(number, ())
        if keyword == RPY and isinstance(element, ProfileOffer) and element.uri not in offered:
            # Section 2.3.1.2: the positive reply names one of the offered profiles. The
            # peer has bound something else to the channel: nothing on it can be trusted.
            raise FramingError(f"reply to start names a profile not offered: {element.uri!r}")
        if keyword == ERR or not isinstance(element, ProfileOffer):
            code = (
                element.code
                if isinstance(element, ErrorElement)
                else ReplyCode.GENERAL_SYNTAX_ERROR
            )
            text = (
                element.text if isinstance(element, ErrorElement) else "unexpected reply to start"
            )
            if kind == "tls":
                self._events.append(ev.TlsStartFailed(code=code, text=text))
            elif kind == "sasl" and isinstance(extra, tuple):
                self._events.append(
                    ev.AuthenticationFailed(
                        mechanism=str(extra[0]), code=code, server_side=False, text=text
                    )
                )
            self._start_server_names.pop(number, None)
            self._events.append(ev.ChannelStartFailed(channel=number, code=code, text=text))
            return
        self._bind_server_name(number)
        ch = Channel(
            number=number,
            profile=element.uri,
            recv_window=self.config.receive_window_octets,
            # The peer starts with the RFC 3081 3.1.1 window: a larger one is advertised
            # by the first SEQ (sent once that moves the edge by the SEQ step).
            recv_credit=DEFAULT_WINDOW_OCTETS,
        )
        self._channels[number] = ch
        if kind == "tls":
            if is_proceed(element.content):
                self._transition(Input.TUNING_AGREED)
                self._send_blocked = True
                self._events.append(
                    ev.TlsStartRequired(server_side=False, server_name=self.server_name)
                )
            else:
                self._remove_channel(number)
                self._events.append(_tls_refusal(element.content))
            return
        if kind == "sasl" and isinstance(extra, tuple):
            mechanism, exchange = extra
            ch.sasl_client = exchange
            ch.sasl_mechanism = str(mechanism)
            self._sasl_client_step(ch, exchange.handle_start_reply(element.content or ""))
            return
        self._events.append(
            ev.ChannelStarted(
                channel=number, profile=element.uri, reply=element, initiated_locally=True
            )
        )

    def _on_close_reply(self, keyword: str, element: ManagementElement, number: int) -> None:
        if keyword == RPY and isinstance(element, Ok):
            if number == 0:
                self._transition(Input.RELEASED)
                self._close_deadline = None
                self._events.append(ev.SessionClosed(code=ReplyCode.SUCCESS, by_peer=False))
                return
            if number in self._channels:
                self._remove_channel(number)
                self._events.append(
                    ev.ChannelClosed(channel=number, code=ReplyCode.SUCCESS, by_peer=False)
                )
            return
        code = element.code if isinstance(element, ErrorElement) else ReplyCode.GENERAL_SYNTAX_ERROR
        text = element.text if isinstance(element, ErrorElement) else "unexpected reply to close"
        if number == 0:
            self._transition(Input.CLOSE_DECLINED)
            self._close_deadline = None
        elif number in self._channels:
            self._channels[number].close_requested = False
        self._events.append(ev.ChannelCloseFailed(channel=number, code=code, text=text))

    # ------------------------------------------------------------------ internals: sending

    def _require_open(self) -> None:
        if self.state not in (State.OPEN, State.CLOSING):
            raise LocalProtocolError(f"session is {self.state.value}")

    def _data_channel(self, channel: int) -> Channel:
        ch = self._channels.get(channel)
        if ch is None or channel == 0:
            raise LocalProtocolError(f"channel {channel} is not an open data channel")
        if self.state not in (State.OPEN, State.CLOSING):
            raise LocalProtocolError(f"session is {self.state.value}")
        return ch

    def _request_start(
        self, profiles: tuple[ProfileOffer, ...], server_name: str | None, kind: tuple[str, object]
    ) -> int:
        if self.state is not State.OPEN:
            raise LocalProtocolError(f"cannot start a channel: session is {self.state.value}")
        if not profiles:
            raise LocalProtocolError("offer at least one profile")
        number = self._next_channel
        while number in self._channels:
            number += 2
        if number > MAX_NUMBER:
            raise LocalProtocolError("channel numbers exhausted")
        self._next_channel = number + 2
        if server_name is not None:
            self._start_server_names[number] = server_name
        self._start_offers[number] = tuple(p.uri for p in profiles)
        body = start_xml(Start(number=number, profiles=profiles, server_name=server_name))
        self._queue_mgmt_msg(body, (kind[0], number, kind[1]))
        return number

    def _queue_mgmt_msg(self, body: bytes, pending: tuple[str, int, object]) -> None:
        zero = self._channels[0]
        msgno = self._queue_msg(zero, beep_xml(body))
        self._pending_mgmt[msgno] = pending

    def _queue_msg(self, ch: Channel, payload: bytes) -> int:
        msgno = ch.next_msgno
        while msgno in ch.awaiting_set:
            msgno = (msgno + 1) % (MAX_NUMBER + 1)
        ch.next_msgno = (msgno + 1) % (MAX_NUMBER + 1)
        ch.awaiting_reply.append(msgno)
        ch.awaiting_set.add(msgno)
        self._enqueue(ch, Outgoing(MSG, msgno, payload))
        self._flush()
        return msgno

    def _queue_reply(
        self,
        ch: Channel,
        msgno: int,
        keyword: str,
        payload: bytes,
        *,
        final: bool,
        ansno: int | None = None,
        on_sent: Callable[[], None] | None = None,
    ) -> None:
        if msgno not in ch.peer_msg_set or msgno in ch.completed:
            raise LocalProtocolError(f"no MSG {msgno} awaiting a reply on channel {ch.number}")
        item = Outgoing(keyword, msgno, payload, ansno, 0, on_sent)
        ch.held.setdefault(msgno, []).append(item)
        if final:
            ch.completed.add(msgno)
            answered = ch.unanswered.pop(msgno, 0)
            if answered:
                # The application took responsibility for the MSG: its octets leave
                # the window (RFC 3081 section 3.1.3), which may now slide.
                ch.unanswered_octets -= answered
                self._maybe_send_seq(ch)
        while ch.peer_msgs:
            head = ch.peer_msgs[0]
            items = ch.held.pop(head, None)
            if items:
                for queued in items:
                    self._enqueue(ch, queued)
            if head not in ch.completed:
                break
            ch.completed.discard(head)
            ch.peer_msgs.popleft()
            ch.peer_msg_set.discard(head)
        self._flush()

    def _reply_mgmt(
        self, msgno: int, keyword: str, body: bytes, on_sent: Callable[[], None] | None = None
    ) -> None:
        self._queue_reply(
            self._channels[0], msgno, keyword, beep_xml(body), final=True, on_sent=on_sent
        )

    def _open_channel(
        self,
        number: int,
        profile: str,
        msgno: int,
        reply: ProfileOffer,
        *,
        announce: bool = True,
        on_sent: Callable[[], None] | None = None,
    ) -> Channel:
        self._bind_server_name(number)
        ch = Channel(
            number=number,
            profile=profile,
            recv_window=self.config.receive_window_octets,
            # The peer starts with the RFC 3081 3.1.1 window: a larger one is advertised
            # by the first SEQ (sent once that moves the edge by the SEQ step).
            recv_credit=DEFAULT_WINDOW_OCTETS,
            gate_open=False,
        )
        self._channels[number] = ch

        def created() -> None:
            ch.gate_open = True
            if ch.queue:
                self._active[number] = ch
            if on_sent is not None:
                on_sent()

        self._reply_mgmt(msgno, RPY, profile_xml(reply), on_sent=created)
        if announce:
            self._events.append(
                ev.ChannelStarted(
                    channel=number, profile=profile, reply=None, initiated_locally=False
                )
            )
        return ch

    def _bind_server_name(self, number: int) -> None:
        """The start for ``number`` succeeded: its serverName, if first, holds from now."""
        server_name = self._start_server_names.pop(number, None)
        if server_name is not None and self.server_name is None:
            self.server_name = server_name

    def _remove_channel(self, number: int) -> None:
        ch = self._channels.pop(number, None)
        self._active.pop(number, None)
        if ch is not None:
            self._buffered -= ch.in_size + ch.reply_size
            self._recently_closed.put(number, True)

    def _enqueue(self, ch: Channel, item: Outgoing) -> None:
        ch.queue.append(item)
        self._active[ch.number] = ch

    def _maybe_send_seq(self, ch: Channel, *, at_least: int | None = None) -> None:
        """Advertise a new window when it moves the right edge far enough.

        The window is the buffer space still available to the channel (RFC 3081 section
        3.1.4): the advertised size less the octets of MSGs the application has not
        answered yet. A peer whose MSGs wait for the application (a relay holding
        data back under load) so finds the window closed, and it opens again as answers
        are given: flow control per channel, end to end, while replies and the other
        channels keep flowing. A SEQ goes out when it moves the right edge by
        :attr:`SessionConfig.seq_step_fraction` of the window or more (``at_least``
        octets when given), and never moves it left.
        """
        if self._ended or ch.number not in self._channels:
            return
        available = ch.recv_window - ch.unanswered_octets
        if at_least is None:
            threshold = int(ch.recv_window * self.config.seq_step_fraction) or 1
        else:
            threshold = at_least
        if available - ch.recv_credit < threshold:
            return
        ch.recv_credit = available
        self._out.append(encode_seq(ch.number, ch.recv_seqno, available))

    def _flush(self) -> None:
        """Cut frames from the channel queues, round-robin, within the peer's windows."""
        if self._send_blocked or self.state is State.TUNING or self._ended:
            return  # nothing follows a termination (section 2.2.1.1)
        active = self._active
        out = self._out
        max_frame = self.config.max_frame_octets
        while active:
            progressed = False
            for ch in list(active.values()):
                if not ch.gate_open:
                    del active[ch.number]
                    continue
                item = ch.queue[0]
                payload = item.payload
                remaining = len(payload) - item.offset
                credit = ch.send_credit
                if remaining > 0 and credit <= 0:
                    del active[ch.number]
                    continue
                size = min(remaining, credit, max_frame)
                more = size < remaining
                if item.offset == 0:
                    if item.keyword == MSG:
                        ch.msgs_started += 1
                    chunk: bytes | memoryview = memoryview(payload)[:size] if more else payload
                else:
                    chunk = memoryview(payload)[item.offset : item.offset + size]
                out.append(
                    encode_frame(
                        item.keyword, ch.number, item.msgno, more, ch.send_seqno, chunk, item.ansno
                    )
                )
                ch.send_seqno = (ch.send_seqno + size) % SEQNO_MODULUS
                ch.send_credit = credit - size
                item.offset += size
                progressed = True
                if not more:
                    ch.queue.popleft()
                    if not ch.queue:
                        del active[ch.number]
                    if item.on_sent is not None:
                        item.on_sent()
                        if self._send_blocked or self._tuning():
                            return
            if not progressed:
                break
