"""The APEX report service elements (RFC 3340 sections 5.1, 6.2 and 9.2), sans I/O.

The report service lives at the well-known endpoint ``apex=report`` of each
administrative domain. It never receives requests: a relay that processes a
``statusRequest`` option sends the option's originator a ``data`` whose originator is
``apex=report@<relay's domain>`` and whose inline ``data-content`` is a
``statusResponse`` naming the option's transID and, per ``destination``, the ``reply``
that describes the delivery status of one recipient.

The ``reply`` elements of the RFC's own examples (section 5.1) carry no ``transID``
although the core DTD marks it ``#REQUIRED``; inside a ``destination`` it is therefore
optional (the enclosing ``statusResponse`` names the transaction).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import (
    MAX_RECIPIENTS_PER_DATA,
    Data,
    DataContent,
    Originator,
    Recipient,
    Reply,
    reply_from,
)
from apexmesh.apex.endpoint import Endpoint, well_known
from apexmesh.apex.errors import ApexError
from apexmesh.apex.hops import DataPlan
from apexmesh.apex.options import STATUS_REQUEST
from apexmesh.beep.xml import Element

#: The well-known endpoint name of the service (RFC 3340 section 8.5).
SERVICE_NAME: Final = "report"

#: ``Name`` of the data-content that carries a report, as in the RFC's examples.
CONTENT_NAME: Final = "Content"


@dataclass(frozen=True, slots=True, kw_only=True)
class Destination:
    """``destination`` (RFC 3340 section 6.2): the delivery status of one recipient."""

    #: The recipient endpoint being reported on.
    identity: Endpoint
    #: Its delivery status (250 delivered, 550 unknown endpoint, ...).
    reply: Reply

    def to_xml(self) -> bytes:
        head = f"<destination{_dtd.attr('identity', str(self.identity))}>".encode()
        return head + self.reply.to_xml() + b"</destination>"


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusResponse:
    """``statusResponse`` (RFC 3340 section 6.2): the answer to a statusRequest option."""

    #: The transID of the statusRequest option being answered.
    trans_id: int
    #: One or more destinations, at most :data:`MAX_RECIPIENTS_PER_DATA` (one per
    #: recipient of the data that carried the option).
    destinations: tuple[Destination, ...]

    def __post_init__(self) -> None:
        if not 1 <= self.trans_id <= _dtd.MAX_TRANS_ID:
            _dtd.fail(f"statusResponse: transID {self.trans_id} out of range")
        if not self.destinations:
            _dtd.fail("statusResponse: at least one destination is required")
        _check_count(len(self.destinations))

    def to_xml(self) -> bytes:
        head = f"<statusResponse{_dtd.attr('transID', str(self.trans_id))}>".encode()
        body = b"".join(destination.to_xml() for destination in self.destinations)
        return head + body + b"</statusResponse>"


def _check_count(count: int) -> None:
    if count > MAX_RECIPIENTS_PER_DATA:
        _dtd.fail(
            f"statusResponse: more than {MAX_RECIPIENTS_PER_DATA} destinations",
            ApexReplyCode.TRANSACTION_FAILED,
        )


def destination_from(element: Element) -> Destination:
    attrs = _dtd.attributes(element, allowed=("identity",), required=("identity",))
    children = _dtd.element_children(element)
    if len(children) != 1 or _dtd.tag_of(children[0]) != "reply":
        _dtd.fail("destination: must contain exactly one reply")
    return Destination(
        identity=_dtd.endpoint(attrs["identity"], "destination"),
        reply=reply_from(children[0], require_trans_id=False),
    )


def status_response_from(element: Element) -> StatusResponse:
    attrs = _dtd.attributes(element, allowed=("transID",), required=("transID",))
    trans_id = _dtd.trans_id(attrs["transID"], "statusResponse")
    try:
        children = _dtd.element_children(element)
        if not children:
            _dtd.fail("statusResponse: at least one destination is required")
        _check_count(len(children))
        for child in children:
            if _dtd.tag_of(child) != "destination":
                _dtd.fail(f"statusResponse: unexpected element {_dtd.tag_of(child)!r}")
        destinations = tuple(destination_from(child) for child in children)
    except ApexError as exc:
        exc.trans_id = trans_id
        raise
    return StatusResponse(trans_id=trans_id, destinations=destinations)


def _expect(body: bytes | str, tag: str) -> Element:
    root = _dtd.parse_root(body)
    if _dtd.tag_of(root) != tag:
        _dtd.fail(f"expected {tag}, got {_dtd.tag_of(root)!r}")
    return root


def parse_status_response(body: bytes | str) -> StatusResponse:
    """Parse a ``statusResponse`` (for instance a report's ``DataContent.content``)."""
    return status_response_from(_expect(body, "statusResponse"))


def parse_destination(body: bytes | str) -> Destination:
    return destination_from(_expect(body, "destination"))


def report_data(*, relay_domain: str, originator: Endpoint, response: StatusResponse) -> Data:
    """The ``data`` a relay sends to report on a statusRequest (RFC 3340 section 5.1):
    from ``apex=report@relay_domain`` to the statusRequest's originator, carrying the
    statusResponse inline as ``#Content``."""
    return Data(
        content="#" + CONTENT_NAME,
        originator=Originator(identity=well_known(SERVICE_NAME, relay_domain)),
        recipients=(Recipient(identity=originator),),
        data_content=DataContent(name=CONTENT_NAME, content=response.to_xml()),
    )


def carries_status_response(data: Data) -> bool:
    """True when ``data``'s inline content is a ``statusResponse`` element."""
    content = data.data_content
    if content is None or data.content != "#" + content.name:
        return False
    try:
        parse_status_response(content.content)
    except ApexError:
        return False
    return True


def check_report_loop(data: Data) -> None:
    """Enforce RFC 3340 section 5.1: "A statusRequest option MUST NOT be present in any
    data operation containing a statusResponse element". The RFC names no code; 554
    ("transaction failed (e.g., policy violation)") is raised, as the rule exists to stop
    report loops rather than to describe syntax."""
    options = [
        *data.options,
        *data.originator.options,
        *(option for recipient in data.recipients for option in recipient.options),
    ]
    if any(option.internal == STATUS_REQUEST for option in options) and (
        carries_status_response(data)
    ):
        _dtd.fail(
            "a statusRequest option in data carrying a statusResponse",
            ApexReplyCode.TRANSACTION_FAILED,
        )


# --------------------------------------------------------------------------- bookkeeping


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingReport:
    """A statusResponse this relay owes after processing a statusRequest option."""

    #: The transID of the statusRequest option (echoed by the statusResponse).
    trans_id: int
    #: Who receives the report: the originator of the data (section 5.1).
    originator: Endpoint
    #: The recipients to report on, in document order, each once.
    recipients: tuple[Endpoint, ...]


def pending_reports(data: Data, plan: DataPlan) -> tuple[PendingReport, ...]:
    """The statusResponses owed for ``data`` given this relay's ``plan``
    (:func:`apexmesh.apex.hops.plan_data`): one per statusRequest transID that applies
    here, covering the recipients it applies to (per-data options cover every recipient
    for which they apply; a per-recipient one covers its own recipient).

    Nothing is owed for data that itself carries a statusResponse: section 5.1 forbids a
    statusRequest there and warns against report loops.
    """
    if carries_status_response(data):
        return ()
    owed: dict[int, dict[Endpoint, None]] = {}
    for recipient_plan in plan.recipients:
        for placed in recipient_plan.process:
            if placed.option.internal == STATUS_REQUEST:
                targets = owed.setdefault(placed.option.trans_id, {})
                targets[recipient_plan.recipient.identity] = None
    return tuple(
        PendingReport(
            trans_id=trans_id, originator=data.originator.identity, recipients=tuple(targets)
        )
        for trans_id, targets in owed.items()
    )


def status_response(
    pending: PendingReport, outcomes: Iterable[tuple[Endpoint, Reply]]
) -> StatusResponse:
    """The statusResponse for ``pending`` once the delivery ``outcomes`` (recipient and
    the reply describing its delivery status) are known. Outcomes for recipients the
    report does not cover are left out; 450 when a covered recipient has none."""
    by_recipient = dict(outcomes)
    missing = [str(endpoint) for endpoint in pending.recipients if endpoint not in by_recipient]
    if missing:
        raise ApexError(
            ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, f"no delivery outcome yet for {missing}"
        )
    return StatusResponse(
        trans_id=pending.trans_id,
        destinations=tuple(
            Destination(identity=endpoint, reply=by_recipient[endpoint])
            for endpoint in pending.recipients
        ),
    )


__all__ = [
    "CONTENT_NAME",
    "SERVICE_NAME",
    "Destination",
    "PendingReport",
    "StatusResponse",
    "carries_status_response",
    "check_report_loop",
    "destination_from",
    "parse_destination",
    "parse_status_response",
    "pending_reports",
    "report_data",
    "status_response",
    "status_response_from",
]
