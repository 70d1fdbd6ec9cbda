"""Per-channel state of a BEEP session: numbering, windows, reassembly, reply order.

One :class:`Channel` holds everything RFC 3080 and RFC 3081 track for a channel in both
directions. The session drives it; nothing here emits events or bytes by itself.

Sending: every outgoing message (MSG or reply) is queued as an :class:`Outgoing` in FIFO
order, because frames of one message may not be interleaved with frames of another
message on the same channel (section 2.2.1.1). The session's scheduler cuts frames from
the head of each channel's queue within the peer's window (RFC 3081 section 3.1.2).

Receiving: the expected sequence number, the window this peer advertised, the message
being reassembled, and the order in which the peer's messages must be answered
(section 2.6.1: replies in the order the MSGs were received).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from apexmesh.beep.limits import DEFAULT_WINDOW_OCTETS

if TYPE_CHECKING:
    from apexmesh.beep.tuning import SaslClient, SaslServer


@dataclass(slots=True)
class Outgoing:
    """A message queued for sending on one channel."""

    #: "MSG", "RPY", "ERR", "ANS" or "NUL".
    keyword: str
    #: Message number.
    msgno: int
    #: The whole MIME entity (frames are cut from it without copying).
    payload: bytes | memoryview
    #: Answer number for ANS.
    ansno: int | None = None
    #: Octets already sent.
    offset: int = 0
    #: Called when the final frame has been written to the output.
    on_sent: Callable[[], None] | None = None


@dataclass(slots=True)
class Channel:
    """State of one channel, both directions."""

    #: Channel number.
    number: int
    #: Profile URI bound to the channel ("" for channel zero).
    profile: str
    #: Octets of receive window this peer advertises for the channel.
    recv_window: int = DEFAULT_WINDOW_OCTETS

    # --- sending -------------------------------------------------------------------
    #: Sequence number of the next octet this peer sends.
    send_seqno: int = 0
    #: Octets this peer may still send before the peer's window is exhausted.
    send_credit: int = DEFAULT_WINDOW_OCTETS
    #: Messages waiting to be framed, head first.
    queue: deque[Outgoing] = field(default_factory=deque)
    #: False until the positive reply creating the channel has been written (so that
    #: nothing reaches the peer on a channel it does not yet know).
    gate_open: bool = True
    #: Next message number for this peer's MSGs.
    next_msgno: int = 0
    #: Message numbers of this peer's MSGs whose reply is not yet complete, in order.
    awaiting_reply: deque[int] = field(default_factory=deque)
    #: The same numbers as a set: asked for each MSG sent, while hundreds may await.
    awaiting_set: set[int] = field(default_factory=set)
    #: How many of ``awaiting_reply`` have had their first frame sent (always a prefix,
    #: as MSGs leave in queue order): a reply to any other is a peer's violation.
    msgs_started: int = 0
    #: True after this peer asked to close the channel, until the answer arrives.
    close_requested: bool = False

    # --- receiving -----------------------------------------------------------------
    #: Sequence number expected for the next received octet.
    recv_seqno: int = 0
    #: Octets the peer may still send before the window this peer advertised is full.
    recv_credit: int = DEFAULT_WINDOW_OCTETS
    #: (keyword, msgno) of the previous received frame when it was intermediate ("*").
    last_more: tuple[str, int] | None = None
    #: Message number of the MSG being reassembled, or None.
    in_msgno: int | None = None
    #: Fragments of the MSG being reassembled.
    in_chunks: list[bytes] = field(default_factory=list)
    #: Octets of the MSG being reassembled.
    in_size: int = 0
    #: True while the rest of an over-limit MSG is being skipped (section 2.6.3).
    in_discarding: bool = False
    #: Keyword of the frames received so far for the reply at the head of awaiting_reply.
    reply_keyword: str | None = None
    #: Fragments of the RPY or ERR being reassembled.
    reply_chunks: list[bytes] = field(default_factory=list)
    #: Octets of the reply (or answers) being reassembled.
    reply_size: int = 0
    #: Fragments of the ANS messages in progress, by answer number.
    answers: dict[int, list[bytes]] = field(default_factory=dict)
    #: Octets of the peer's complete MSGs handed to the application and not answered
    #: yet, by message number: the application has not accepted responsibility for them
    #: (RFC 3081 section 3.1.3), so they still occupy the receive window.
    unanswered: dict[int, int] = field(default_factory=dict)
    #: Their sum.
    unanswered_octets: int = 0

    # --- the peer's MSGs, answered in order ------------------------------------------
    #: Message numbers of the peer's complete MSGs whose reply is not yet queued, in order.
    peer_msgs: deque[int] = field(default_factory=deque)
    #: The same numbers as a set, for the poorly-formed-frame check.
    peer_msg_set: set[int] = field(default_factory=set)
    #: Replies the application gave for MSGs not yet at the head of ``peer_msgs``.
    held: dict[int, list[Outgoing]] = field(default_factory=dict)
    #: MSGs whose reply the application has completed (RPY, ERR or NUL given).
    completed: set[int] = field(default_factory=set)
    #: Next answer number, per message being answered with ANS.
    next_ansno: dict[int, int] = field(default_factory=dict)

    # --- tuning profiles bound to this channel ----------------------------------------
    #: SASL server exchange when the peer authenticates on this channel.
    sasl_server: SaslServer | None = None
    #: SASL client exchange when this peer authenticates on this channel.
    sasl_client: SaslClient | None = None
    #: SASL mechanism of either exchange.
    sasl_mechanism: str = ""

    def busy(self) -> bool:
        """True while any exchange on the channel is unfinished (section 2.3.1.3)."""
        return bool(
            self.queue
            or self.awaiting_reply
            or self.peer_msgs
            or self.in_msgno is not None
            or self.held
        )
