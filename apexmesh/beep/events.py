"""Events a BEEP session reports to its application (habit 3 of STYLE.md).

Every notification that flows up is a frozen, slotted, keyword-only dataclass with a
past-tense name. ``Session.receive_data`` and ``Session.handle_timer`` return lists of
them. Don't subclass these.
"""

from __future__ import annotations

from dataclasses import dataclass

from apexmesh.beep.management import ProfileOffer


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base class of session events."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GreetingReceived(Event):
    """The peer's greeting arrived: the session is ready for channels."""

    #: Profiles the peer supports in the server role.
    profiles: tuple[str, ...]
    #: Channel management features the peer supports.
    features: tuple[str, ...]
    #: Language tags the peer prefers for diagnostics.
    localize: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelStartRequested(Event):
    """The peer asks to start a channel; answer with ``accept_channel`` or ``reject_channel``."""

    #: The channel number the peer chose.
    channel: int
    #: Profiles offered, most preferred first, with their initialization messages.
    profiles: tuple[ProfileOffer, ...]
    #: The serverName of the request, if any.
    server_name: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelStarted(Event):
    """A channel exists now, started by either peer."""

    #: Channel number.
    channel: int
    #: The profile bound to the channel.
    profile: str
    #: The initialization message piggybacked on the positive reply, if any (only for
    #: channels this peer asked for).
    reply: ProfileOffer | None
    #: True when this peer sent the start request.
    initiated_locally: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelStartFailed(Event):
    """The peer declined a channel this peer asked for."""

    #: Channel number that was requested.
    channel: int
    #: Reply code of the peer's error element.
    code: int
    #: Diagnostic text of the error element.
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageReceived(Event):
    """A complete MSG message arrived; answer with send_rpy, send_err or send_ans/send_nul."""

    #: Channel number.
    channel: int
    #: Message number to reply to.
    msgno: int
    #: The message's MIME entity (headers, CRLF, body).
    payload: bytes


_new_event = object.__new__
_SET_MESSAGE_CHANNEL = MessageReceived.__dict__["channel"].__set__
_SET_MESSAGE_MSGNO = MessageReceived.__dict__["msgno"].__set__
_SET_MESSAGE_PAYLOAD = MessageReceived.__dict__["payload"].__set__


def message_received(channel: int, msgno: int, payload: bytes) -> MessageReceived:
    """``MessageReceived(channel=..., msgno=..., payload=...)``, made by setting its slots:
    the session makes one for every MSG an endpoint or a relay receives, and the frozen
    dataclass's keyword constructor costs twice as much (its fields need no check)."""
    event = _new_event(MessageReceived)
    _SET_MESSAGE_CHANNEL(event, channel)
    _SET_MESSAGE_MSGNO(event, msgno)
    _SET_MESSAGE_PAYLOAD(event, payload)
    return event


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyReceived(Event):
    """A complete positive reply (RPY) to one of this peer's messages arrived."""

    #: Channel number.
    channel: int
    #: Message number being replied to.
    msgno: int
    #: The reply's MIME entity.
    payload: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorReceived(Event):
    """A complete negative reply (ERR) to one of this peer's messages arrived."""

    #: Channel number.
    channel: int
    #: Message number being replied to.
    msgno: int
    #: The reply's MIME entity.
    payload: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerReceived(Event):
    """One complete ANS message of a one-to-many reply arrived."""

    #: Channel number.
    channel: int
    #: Message number being replied to.
    msgno: int
    #: Answer number.
    ansno: int
    #: The answer's MIME entity.
    payload: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswersCompleted(Event):
    """The NUL message ended a one-to-many reply."""

    #: Channel number.
    channel: int
    #: Message number whose reply is complete.
    msgno: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelClosed(Event):
    """A channel was closed, at this peer's request or the peer's."""

    #: Channel number.
    channel: int
    #: Reply code given in the close request.
    code: int
    #: True when the peer asked for the close.
    by_peer: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelCloseFailed(Event):
    """The peer declined to close a channel (or to release the session, channel 0)."""

    #: Channel number (0 for the session).
    channel: int
    #: Reply code of the peer's error element.
    code: int
    #: Diagnostic text.
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsStartRequired(Event):
    """TLS tuning was agreed: flush ``data_to_send``, run the TLS handshake, then call
    ``Session.tls_established``. No BEEP traffic may flow until then."""

    #: True when this peer is the TLS server (it answered with proceed).
    server_side: bool
    #: The serverName of the session (chooses the server certificate), if known.
    server_name: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsStartFailed(Event):
    """The peer answered this peer's TLS ready with an error."""

    #: Reply code.
    code: int
    #: Diagnostic text.
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Authenticated(Event):
    """A SASL exchange succeeded (RFC 3080 section 4): the identity holds for the session."""

    #: SASL mechanism used.
    mechanism: str
    #: Authentication identity of the client peer (None when this peer was the client).
    identity: str | None
    #: Authorization identity the client asked for, if any.
    authorization: str | None
    #: True when this peer verified the other's credentials (the SASL server side).
    server_side: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthenticationFailed(Event):
    """A SASL exchange failed."""

    #: SASL mechanism used.
    mechanism: str
    #: Reply code (535 bad credentials, 534 mechanism too weak, 538 needs TLS, ...).
    code: int
    #: True when this peer was the SASL server.
    server_side: bool
    #: The diagnostic: the server's error text on the client side, the reason the
    #: exchange failed on the server side (for its log; the client is told less).
    text: str = ""
    #: Server side: the authentication identity the client claimed, when the exchange
    #: read one (known to the server or not); None otherwise.
    identity: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionClosed(Event):
    """The session was released in an orderly way; close the transport."""

    #: Reply code of the close request.
    code: int
    #: True when the peer asked for the release.
    by_peer: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionTerminated(Event):
    """The session ended abnormally; flush ``data_to_send`` and close the transport."""

    #: Reply code describing why (500 poorly-formed frame, 554 limit, 421 refused, ...).
    code: int
    #: Diagnostic for the log, never sent to the peer.
    reason: str
