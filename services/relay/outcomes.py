"""What happened to one recipient: the reply code of its delivery (RFC 3340 4.4.4.1).

Every route (a local endpoint, another pod, a well-known service, a foreign domain's
relay) ends in an :class:`Outcome`: 250 when the next hop answered ``ok``, the code of its
``error`` otherwise. statusResponse reports and metrics are built from outcomes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from apexmesh.aio import Reply
from apexmesh.apex.codes import ApexReplyCode, for_code
from apexmesh.apex.elements import Error, parse_message
from apexmesh.apex.errors import ApexError
from apexmesh.beep.errors import BeepError
from apexmesh.beep.mime import split_entity


@dataclass(frozen=True, slots=True)
class Outcome:
    """The reply code (and diagnostic) of one delivery attempt."""

    code: int
    text: str = ""

    @property
    def ok(self) -> bool:
        return self.code == ApexReplyCode.SUCCESS


DELIVERED = Outcome(ApexReplyCode.SUCCESS)
#: Not delivered yet, not failed either: held for the endpoint (hold4Endpoint, RFC 3342
#: section 3) until it attaches; no report speaks of it yet.
HELD = Outcome(ApexReplyCode.SUCCESS, "held for the endpoint (hold4Endpoint)")
#: The attachment ended before (or while) the data was sent to it.
ENDPOINT_DETACHED = Outcome(ApexReplyCode.ACTION_NOT_TAKEN, "endpoint detached")
#: Text of the 550 a pod answers when asked to deliver to an endpoint it does not hold.
NOT_HERE: Final = "endpoint not attached to this relay pod"
NOT_HERE_OUTCOME: Final = Outcome(ApexReplyCode.ACTION_NOT_TAKEN, NOT_HERE)


#: ``ok`` as applications and relays commonly write it: no parse needed (the hot path of
#: every delivery); anything else goes through the parser.
_OK_BODIES: Final = frozenset({b"<ok />", b"<ok/>", b"<ok></ok>"})
_OK_ENTITY: Final = b"Content-Type: application/beep+xml\r\n\r\n"
_OK_PAYLOAD: Final = _OK_ENTITY + b"<ok />"


def outcome_from_reply(reply: Reply) -> Outcome:
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


_T = TypeVar("_T")


def resolver(future: asyncio.Future[_T]) -> Callable[[_T], None]:
    """A callback giving ``future`` its result, unless it is done already (a caller that
    stopped waiting cancelled it): how a callback-settled delivery feeds a future."""

    def resolve(value: _T) -> None:
        if not future.done():
            future.set_result(value)

    return resolve


def code_of(value: int) -> ApexReplyCode:
    """A registered reply code for ``value`` (451, local error, for anything unknown)."""
    return for_code(value) or ApexReplyCode.ACTION_ABORTED
