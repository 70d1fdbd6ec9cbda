"""What happened to one recipient: the reply code of its delivery and why (RFC 3340
4.4.4.1).

Every route (a local endpoint, another pod, a well-known service, a foreign domain's
relay) ends in an :class:`Outcome`: 250 when the next hop answered ``ok``, the code of its
``error`` otherwise. statusResponse reports and metrics are built from outcomes.

Where the code alone does not say what the relay must do next (look the endpoint up
again, count a shed copy, leave a held one out of reports), the outcome carries a
:class:`Reason`. Code acts on the reason, never on the text (which is for people) and
never on object identity; the reason crosses gRPC as ``ApexStatus.reason``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Protocol

from apexmesh.apex.codes import ApexReplyCode, for_code
from apexmesh.apex.elements import Error, parse_message
from apexmesh.apex.errors import ApexError
from apexmesh.beep.errors import BeepError
from apexmesh.beep.mime import split_entity
from apexmesh.contracts.common.v1 import common_pb2


class Reason(enum.IntEnum):
    """Why a delivery ended as it did (``apexmesh.contracts.common.v1.Reason``)."""

    #: The code says it all: delivered (250), or the error the next hop returned.
    NONE = common_pb2.REASON_UNSPECIFIED
    #: The pod asked does not hold the endpoint's attachment (550): locate it again.
    NOT_HERE = common_pb2.REASON_NOT_HERE
    #: The next hop could not be reached; nothing was done there (421).
    UNAVAILABLE = common_pb2.REASON_UNAVAILABLE
    #: The attachment ended before the endpoint answered (550).
    DETACHED = common_pb2.REASON_DETACHED
    #: The endpoint's queue stayed full past the slow-consumer limit: this copy was shed
    #: (421), counted and reported; other recipients were not held back.
    SHED = common_pb2.REASON_SHED
    #: Held for the endpoint (hold4Endpoint, RFC 3342 section 3): no report yet (250).
    HELD = common_pb2.REASON_HELD
    #: The endpoint is attached nowhere in the domain (550).
    UNKNOWN_ENDPOINT = common_pb2.REASON_UNKNOWN_ENDPOINT


@dataclass(frozen=True, slots=True)
class Outcome:
    """The reply code (and diagnostic) of one delivery attempt, and why."""

    code: int
    text: str = ""
    reason: Reason = Reason.NONE

    @property
    def ok(self) -> bool:
        """The next hop took the data (250), or it is held for the endpoint."""
        return self.code == ApexReplyCode.SUCCESS

    @property
    def delivered(self) -> bool:
        """The next hop answered ``ok`` (not merely held)."""
        return self.code == ApexReplyCode.SUCCESS and self.reason is Reason.NONE

    @property
    def stale_location(self) -> bool:
        """The pod asked no longer holds the endpoint, or is gone: locate it again."""
        return self.reason is Reason.NOT_HERE or self.reason is Reason.UNAVAILABLE

    @property
    def not_attached(self) -> bool:
        """The recipient turned out not to be attached (or detached meanwhile)."""
        return self.reason in _NOT_ATTACHED

    def to_status(self) -> common_pb2.ApexStatus:
        """The outcome as it crosses gRPC."""
        return common_pb2.ApexStatus(code=self.code, text=self.text, reason=self.reason.value)


_NOT_ATTACHED: Final = frozenset({Reason.NOT_HERE, Reason.DETACHED, Reason.UNKNOWN_ENDPOINT})

DELIVERED: Final = Outcome(ApexReplyCode.SUCCESS)
#: Not delivered yet, not failed either: held for the endpoint (hold4Endpoint, RFC 3342
#: section 3) until it attaches; no report speaks of it yet.
HELD: Final = Outcome(ApexReplyCode.SUCCESS, "held for the endpoint (hold4Endpoint)", Reason.HELD)
#: The attachment ended before (or while) the data was sent to it.
ENDPOINT_DETACHED: Final = Outcome(
    ApexReplyCode.ACTION_NOT_TAKEN, "endpoint detached", Reason.DETACHED
)
#: The pod asked to deliver does not hold the endpoint.
NOT_HERE: Final = Outcome(
    ApexReplyCode.ACTION_NOT_TAKEN, "endpoint not attached to this relay pod", Reason.NOT_HERE
)
#: Attached nowhere in the domain (RFC 3340 4.4.4.1 step 5.3).
UNKNOWN_ENDPOINT: Final = Outcome(
    ApexReplyCode.ACTION_NOT_TAKEN, "unknown endpoint identity", Reason.UNKNOWN_ENDPOINT
)
#: The pod holding the endpoint (or the service) could not be reached.
POD_UNAVAILABLE: Final = Outcome(
    ApexReplyCode.SERVICE_NOT_AVAILABLE, "relay pod not available", Reason.UNAVAILABLE
)
SERVICE_UNAVAILABLE: Final = Outcome(
    ApexReplyCode.SERVICE_NOT_AVAILABLE, "service not available", Reason.UNAVAILABLE
)
#: The endpoint's queue stayed full (the slow-consumer policy, services/relay/flow.py).
SHED: Final = Outcome(
    ApexReplyCode.SERVICE_NOT_AVAILABLE, "recipient's queue is full (slow consumer)", Reason.SHED
)
#: A route failed without an outcome (a bug or an unexpected error, logged).
LOCAL_ERROR: Final = Outcome(ApexReplyCode.ACTION_ABORTED, "local error")


def outcome_of(status: common_pb2.ApexStatus) -> Outcome:
    """The outcome another pod or a service reported."""
    code = status.code
    if code == ApexReplyCode.SUCCESS and not status.text and not status.reason:
        return DELIVERED
    try:
        reason = Reason(status.reason)
    except ValueError:  # a newer peer's reason: its code still holds
        reason = Reason.NONE
    return Outcome(code, status.text, reason)


#: ``ok`` as applications and relays commonly write it: no parse needed (the hot path of
#: every delivery); anything else goes through the parser.
_OK_BODIES: Final = frozenset({b"<ok />", b"<ok/>", b"<ok></ok>"})
_OK_ENTITY: Final = b"Content-Type: application/beep+xml\r\n\r\n"
_OK_PAYLOAD: Final = _OK_ENTITY + b"<ok />"


class NextHopReply(Protocol):
    """The complete reply to a data MSG, as the BEEP adapter gives it
    (``apexmesh.aio.Reply``): its kind (``RPY``, ``ERR``, ``ANS``) and entity."""

    @property
    def kind(self) -> str: ...

    @property
    def payload(self) -> bytes: ...


def outcome_from_reply(reply: NextHopReply) -> Outcome:
    """Read the next hop's answer to a data MSG: ``ok`` or an ``error`` element."""
    payload = reply.payload
    if payload == _OK_PAYLOAD and reply.kind == "RPY":  # as the SDK writes it
        return DELIVERED
    if (
        reply.kind == "RPY"
        and payload.startswith(_OK_ENTITY)
        and payload[len(_OK_ENTITY) :].strip() in _OK_BODIES
    ):
        return DELIVERED
    try:
        element = parse_message(split_entity(reply.payload).body)
    except (ApexError, BeepError):
        return Outcome(ApexReplyCode.GENERAL_SYNTAX_ERROR, "poorly-formed answer to data")
    if reply.kind == "RPY":
        return DELIVERED
    if isinstance(element, Error):
        return Outcome(int(element.code), element.text)
    return Outcome(ApexReplyCode.ACTION_NOT_TAKEN, "negative reply without an error element")


def code_of(value: int) -> ApexReplyCode:
    """A registered reply code for ``value`` (451, local error, for anything unknown)."""
    return for_code(value) or ApexReplyCode.ACTION_ABORTED
