"""The dataTiming option of the APEX party pack (RFC 3342 section 2), sans I/O.

Content (DTD of section 6): ``<dataTiming noLaterThan='MS' returnTrip='MS'
reportAfter='MS' reportErrors='true|false' />``, every attribute optional, MILLISECS
values 0..2147483647 (defaults 0 and false; 0 means "not asked for").

**The values are relative durations in milliseconds, not RFC 3339 date-times**: each
relay counts them from the moment it received the data and, "immediately prior to
sending the data to the next relay", lowers them by the time the data spent here
(section 2.1, step 5.2 of RFC 3340 section 4.4.4.1). Relays therefore never compare
clocks with each other; only this relay's clock matters, and it is always passed in:
every function takes ``now`` (integer milliseconds of the caller's clock, for instance
wall-clock epoch milliseconds so that a deadline stored in Redis means the same on every
pod of a domain). Nothing here reads a clock.

Rules, one per function:

* :func:`arrive` (and :func:`tick`, the same check later): the absolute deadline is
  ``received_at + noLaterThan``; reached (``now >= deadline``), or predicted unmeetable
  because ``now + min_transit_ms >= deadline`` (the relay knows the next step takes at
  least that long, section 2.1 last paragraph) -> the data is not sent on; with
  reportErrors the originator gets a *timing error report* (550, section 2.1.2).
  ``received_at + reportAfter`` reached -> one *transient timing report* (350, section
  2.2.1), fired once (the value is "set to zero"); delivery is not affected. A reportAfter
  at or beyond the deadline never fires (noLaterThan is its "operational upper-bound").
  Timers to arm are returned as data (:class:`Timer`, absolute ``at``).
* :func:`forward` (step 5.2, and also the data handed to the recipient at the final hop,
  as in the hold4Endpoint example of section 3 where 60000 arrives as 18000):
  noLaterThan and reportAfter are lowered by ``now - received_at``; returnTrip and
  reportErrors travel unchanged; a reportAfter that reaches zero is sent as 0 (after its
  350) so no later relay reports again; a noLaterThan that reaches zero (or the
  predicted minimum) stops the data (550 with reportErrors).
* :func:`delivered` (step 5.3, the recipient's ``ok`` before the deadline): with a
  non-zero returnTrip, a *final hop report* (250, section 2.1.1) whose data carries a new
  dataTiming option with ``noLaterThan`` = the original returnTrip and no other attribute.
  An ``ok`` at or after the deadline comes too late: the deadline timer has already
  decided (550), nothing more is reported.

Reports are :class:`TimingReport` values; :func:`timing_report_data` builds the report
``data`` exactly as the RFC's examples show. No timing report is ever made for data that
itself carries a ``statusResponse`` (RFC 3340 section 5.1 warns against report loops).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.data import Data, Originator, Recipient
from apexmesh.apex.elements import DataContent, Reply
from apexmesh.apex.endpoint import Endpoint, well_known
from apexmesh.apex.errors import ApexError
from apexmesh.apex.hops import RecipientPlan
from apexmesh.apex.options import Option, TargetHop
from apexmesh.apex.report import (
    CONTENT_NAME,
    SERVICE_NAME,
    Destination,
    StatusResponse,
    carries_status_response,
)

#: RFC 3342 section 5.2.
DATA_TIMING: Final = "dataTiming"
#: Upper bound of a MILLISECS value (RFC 3342 section 6).
MAX_MILLISECS: Final = 2_147_483_647

#: Reply codes of the three timing reports (sections 2.1.1, 2.1.2, 2.2.1). 350 ("transient
#: success") is not in RFC 3340's table; it is sent as a number.
FINAL_HOP_CODE: Final = 250
TIMING_ERROR_CODE: Final = ApexReplyCode.ACTION_NOT_TAKEN
TRANSIENT_CODE: Final = 350
#: Diagnostic of the 550 outcome of a recipient whose deadline was reached.
DEADLINE_TEXT: Final = "dataTiming: noLaterThan reached"
PREDICTED_TEXT: Final = "dataTiming: noLaterThan cannot be met"

_ATTRS: Final = ("noLaterThan", "returnTrip", "reportAfter", "reportErrors")


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTiming:
    """The content of a dataTiming option (RFC 3342 section 6), durations in ms."""

    #: Upper bound on delivery from now on; 0: no bound.
    no_later_than: int = 0
    #: Upper bound for the final hop report's own delivery; 0: no final hop report.
    return_trip: int = 0
    #: Delay after which a transient timing report is sent; 0: none.
    report_after: int = 0
    #: Whether a missed noLaterThan is reported (550).
    report_errors: bool = False

    def __post_init__(self) -> None:
        for name, value in (
            ("noLaterThan", self.no_later_than),
            ("returnTrip", self.return_trip),
            ("reportAfter", self.report_after),
        ):
            if not 0 <= value <= MAX_MILLISECS:
                _dtd.fail(f"dataTiming: {name} {value} out of range 0..{MAX_MILLISECS}")

    def to_xml(self) -> bytes:
        """Serialize with the attributes that differ from the DTD defaults only (as the
        RFC's examples do, and as "no other attributes present" of section 2.1.1 needs)."""
        head = ""
        if self.no_later_than:
            head += _dtd.attr("noLaterThan", str(self.no_later_than))
        if self.return_trip:
            head += _dtd.attr("returnTrip", str(self.return_trip))
        if self.report_after:
            head += _dtd.attr("reportAfter", str(self.report_after))
        if self.report_errors:
            head += _dtd.attr("reportErrors", "true")
        return f"<dataTiming{head} />".encode()


def _millisecs(value: str, name: str) -> int:
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        _dtd.fail(f"dataTiming: {name} {value!r} is not a MILLISECS value")
    number = int(text)
    if number > MAX_MILLISECS:
        _dtd.fail(f"dataTiming: {name} {number} out of range 0..{MAX_MILLISECS}")
    return number


def parse_data_timing(content: bytes | str) -> DataTiming:
    """Parse a ``dataTiming`` element (501 when it is not valid per the DTD)."""
    root = _dtd.parse_root(content)
    if _dtd.tag_of(root) != DATA_TIMING or len(root) or (root.text or "").strip():
        _dtd.fail("dataTiming: the option holds one empty dataTiming element")
    attrs = _dtd.attributes(root, allowed=_ATTRS)
    report = attrs.get("reportErrors", "false")
    if report not in ("true", "false"):
        _dtd.fail("dataTiming: reportErrors must be true or false")
    return DataTiming(
        no_later_than=_millisecs(attrs.get("noLaterThan", "0"), "noLaterThan"),
        return_trip=_millisecs(attrs.get("returnTrip", "0"), "returnTrip"),
        report_after=_millisecs(attrs.get("reportAfter", "0"), "reportAfter"),
        report_errors=report == "true",
    )


def data_timing_of(option: Option) -> DataTiming:
    """Parse the content of a dataTiming option (501 carrying the option's transID).

    An option without content takes the DTD defaults (everything 0: inactive).
    """
    if option.internal != DATA_TIMING:
        _dtd.fail(f"{option.name!r} is not the dataTiming option", trans_id=option.trans_id)
    if not option.content.strip():
        return DataTiming()
    try:
        return parse_data_timing(option.content)
    except ApexError as exc:
        exc.trans_id = option.trans_id
        raise


def data_timing_option(trans_id: int, timing: DataTiming) -> Option:
    """The option as section 2 asks an originator to set it (targetHop all,
    mustUnderstand true)."""
    return Option(
        internal=DATA_TIMING,
        trans_id=trans_id,
        target_hop=TargetHop.ALL,
        must_understand=True,
        content=timing.to_xml(),
    )


# --------------------------------------------------------------------------- state


@dataclass(frozen=True, slots=True, kw_only=True)
class Clock:
    """One dataTiming option of one recipient, anchored to this relay's receipt time."""

    #: The option as received (its transID names the reports).
    option: Option
    #: Its content as received.
    timing: DataTiming
    #: When this relay received the data (ms, the caller's clock).
    received_at: int
    #: True once the transient timing report was sent here (reportAfter "set to zero").
    report_after_fired: bool = False

    @property
    def deadline(self) -> int | None:
        """Absolute time at which noLaterThan is reached, None without a bound."""
        if not self.timing.no_later_than:
            return None
        return self.received_at + self.timing.no_later_than

    @property
    def report_at(self) -> int | None:
        """Absolute time of the transient timing report, None when none is due (none
        asked, already sent, or at/after the deadline which bounds it)."""
        if not self.timing.report_after or self.report_after_fired:
            return None
        at = self.received_at + self.timing.report_after
        deadline = self.deadline
        if deadline is not None and at >= deadline:
            return None
        return at


class TimerKind(enum.Enum):
    """What a :class:`Timer` is for."""

    #: noLaterThan is reached: 550 (reportErrors) and stop.
    DEADLINE = "deadline"
    #: reportAfter is reached: 350, once.
    REPORT_AFTER = "reportAfter"


@dataclass(frozen=True, slots=True, kw_only=True)
class Timer:
    """At ``at`` (ms, the caller's clock) call :func:`tick` with the current state."""

    at: int
    kind: TimerKind
    #: transID of the dataTiming option the timer belongs to.
    trans_id: int


class ReportKind(enum.Enum):
    """The three timing reports of section 2, valued by their reply code."""

    FINAL_HOP = FINAL_HOP_CODE
    TIMING_ERROR = int(TIMING_ERROR_CODE)
    TRANSIENT = TRANSIENT_CODE


@dataclass(frozen=True, slots=True, kw_only=True)
class TimingReport:
    """A statusResponse the report service must send (sections 2.1.1, 2.1.2, 2.2.1)."""

    kind: ReportKind
    #: transID of the dataTiming option, echoed by the statusResponse.
    trans_id: int
    #: Who receives the report: the originator of the data.
    originator: Endpoint
    #: The original recipient the report is about.
    recipient: Endpoint
    #: For a final hop report: the content of the report data's own dataTiming option
    #: (noLaterThan = the original returnTrip, nothing else); None otherwise.
    timing: DataTiming | None = None

    @property
    def code(self) -> int:
        return self.kind.value

    def status_response(self) -> StatusResponse:
        return StatusResponse(
            trans_id=self.trans_id,
            destinations=(
                Destination(identity=self.recipient, reply=Reply(code=self.code, trans_id=None)),
            ),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RecipientTiming:
    """The dataTiming state of one recipient of one data at this relay."""

    originator: Endpoint
    recipient: Endpoint
    clocks: tuple[Clock, ...] = ()
    #: The data carries a statusResponse: never report on it (no report loops).
    is_report: bool = False

    @property
    def deadline(self) -> int | None:
        """The earliest noLaterThan deadline, None when no option bounds delivery."""
        deadlines = [c.deadline for c in self.clocks if c.deadline is not None]
        return min(deadlines) if deadlines else None

    def timers(self) -> tuple[Timer, ...]:
        """Every timer still to arm, earliest first."""
        timers: list[Timer] = []
        for clock in self.clocks:
            tid = clock.option.trans_id
            if clock.deadline is not None:
                timers.append(Timer(at=clock.deadline, kind=TimerKind.DEADLINE, trans_id=tid))
            if clock.report_at is not None:
                timers.append(Timer(at=clock.report_at, kind=TimerKind.REPORT_AFTER, trans_id=tid))
        return tuple(sorted(timers, key=lambda t: (t.at, t.kind.value)))

    def remaining(self, now: int) -> int | None:
        """Milliseconds left before the earliest deadline (may be <= 0), None unbounded."""
        deadline = self.deadline
        return None if deadline is None else deadline - now


@dataclass(frozen=True, slots=True, kw_only=True)
class TimingStep:
    """What the relay does now for one recipient."""

    #: The state to keep (reportAfter marked as fired where a 350 is in ``reports``).
    state: RecipientTiming
    #: Reports to send now, in order.
    reports: tuple[TimingReport, ...] = ()
    #: True when the deadline is reached or cannot be met: do not send the data on, stop
    #: waiting for the recipient, drop held data; the recipient's outcome is 550.
    expired: bool = False
    #: True when ``expired`` is a prediction (``min_transit_ms``), not a reached deadline.
    predicted: bool = False
    #: Timers to arm now (empty once expired), earliest first.
    timers: tuple[Timer, ...] = ()

    @property
    def outcome_text(self) -> str:
        return PREDICTED_TEXT if self.predicted else DEADLINE_TEXT


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardStep:
    """What :func:`forward` decided."""

    #: The data to send (dataTiming options adjusted), None when the deadline stops it.
    data: Data | None
    #: The same decision as :func:`tick` at ``now``, with the updated state.
    step: TimingStep


# --------------------------------------------------------------------------- rules


def timing_options(plan: RecipientPlan) -> tuple[Option, ...]:
    """The applicable dataTiming options of one recipient, in processing order."""
    return tuple(p.option for p in plan.process if p.option.internal == DATA_TIMING)


def state_of(
    plan: RecipientPlan, *, originator: Endpoint, received_at: int, is_report: bool = False
) -> RecipientTiming:
    """Parse the recipient's applicable dataTiming options (501 with the option's
    transID for invalid content); options whose values are all 0 are kept (inactive)."""
    clocks = tuple(
        Clock(option=option, timing=data_timing_of(option), received_at=received_at)
        for option in timing_options(plan)
    )
    return RecipientTiming(
        originator=originator,
        recipient=plan.recipient.identity,
        clocks=clocks,
        is_report=is_report,
    )


def arrive(
    plan: RecipientPlan,
    data: Data,
    *,
    received_at: int,
    now: int,
    min_transit_ms: int = 0,
) -> TimingStep:
    """The recipient's timing state when this relay starts handling it (steps 4/5):
    :func:`state_of` then :func:`tick` at ``now`` (>= ``received_at``; the data may have
    waited in a queue). ``data`` is the data as received (for the report-loop check)."""
    state = state_of(
        plan,
        originator=data.originator.identity,
        received_at=received_at,
        is_report=carries_status_response(data),
    )
    return tick(state, now, min_transit_ms=min_transit_ms)


def tick(state: RecipientTiming, now: int, *, min_transit_ms: int = 0) -> TimingStep:
    """Apply the timing rules at ``now``: deadline reached or predicted (550 with
    reportErrors, expired), reportAfter reached (350, once). Call it when a timer fires;
    it is idempotent for a given ``now`` once its returned state is kept."""
    reports: list[TimingReport] = []
    expired = reached = False
    clocks: list[Clock] = []
    for clock in state.clocks:
        deadline = clock.deadline
        if deadline is not None and now + min_transit_ms >= deadline:
            expired = True
            reached = reached or now >= deadline
            if clock.timing.report_errors:
                reports.append(_report(state, clock, ReportKind.TIMING_ERROR))
            clocks.append(clock)
            continue
        report_at = clock.report_at
        if report_at is not None and now >= report_at:
            reports.append(_report(state, clock, ReportKind.TRANSIENT))
            clock = dataclasses.replace(clock, report_after_fired=True)
        clocks.append(clock)
    predicted = expired and not reached
    new_state = dataclasses.replace(state, clocks=tuple(clocks))
    if state.is_report:
        reports = []
    if expired:
        # Only the 550s: a transient report for data that is being dropped says nothing.
        reports = [r for r in reports if r.kind is ReportKind.TIMING_ERROR]
        return TimingStep(
            state=new_state, reports=tuple(reports), expired=True, predicted=predicted
        )
    return TimingStep(state=new_state, reports=tuple(reports), timers=new_state.timers())


def forward(
    state: RecipientTiming, data: Data, now: int, *, min_transit_ms: int = 0
) -> ForwardStep:
    """Step 5.2 (and the data delivered at the final hop): :func:`tick` at ``now``, then,
    unless expired, ``data`` (the recipient's ``plan.forward``) with each dataTiming
    option of ``state`` replaced by its adjusted copy: noLaterThan and reportAfter lowered
    by the time spent here (a fired or lapsed reportAfter becomes 0), returnTrip and
    reportErrors unchanged. Options whose values are all 0 are left as they are."""
    step = tick(state, now, min_transit_ms=min_transit_ms)
    if step.expired:
        return ForwardStep(data=None, step=step)
    replaced: dict[Option, Option] = {}
    for clock in step.state.clocks:
        timing = clock.timing
        if not timing.no_later_than and not timing.report_after:
            continue
        elapsed = max(0, now - clock.received_at)
        no_later_than = max(0, timing.no_later_than - elapsed) if timing.no_later_than else 0
        report_after = 0
        if timing.report_after and not clock.report_after_fired:
            report_after = max(0, timing.report_after - elapsed)
        adjusted = dataclasses.replace(
            timing, no_later_than=no_later_than, report_after=report_after
        )
        replaced[clock.option] = dataclasses.replace(clock.option, content=adjusted.to_xml())
    return ForwardStep(data=_swap(data, replaced), step=step)


def delivered(state: RecipientTiming, now: int) -> tuple[TimingReport, ...]:
    """Step 5.3: the recipient answered ``ok`` at ``now``. Final hop reports (250) for
    every dataTiming with a non-zero returnTrip, unless the deadline was already reached
    (then the deadline timer has decided) or the data is itself a report."""
    if state.is_report:
        return ()
    deadline = state.deadline
    if deadline is not None and now >= deadline:
        return ()
    return tuple(
        _report(
            state,
            clock,
            ReportKind.FINAL_HOP,
            timing=DataTiming(no_later_than=clock.timing.return_trip),
        )
        for clock in state.clocks
        if clock.timing.return_trip
    )


def dropped(state: RecipientTiming) -> tuple[TimingReport, ...]:
    """Timing error reports (550, reportErrors) for data this relay drops for a reason of
    its own before the deadline (an operator's maximum hold time, section 7): the data
    will not be delivered, which is what the originator asked to hear."""
    if state.is_report:
        return ()
    return tuple(
        _report(state, clock, ReportKind.TIMING_ERROR)
        for clock in state.clocks
        if clock.timing.report_errors and clock.timing.no_later_than
    )


def mark_report_after_fired(state: RecipientTiming) -> RecipientTiming:
    """The state once its transient timing report was sent elsewhere (for held data, by
    whichever pod took it from the store): reportAfter fires no more and travels as 0."""
    return dataclasses.replace(
        state,
        clocks=tuple(
            dataclasses.replace(c, report_after_fired=True) if c.timing.report_after else c
            for c in state.clocks
        ),
    )


def _report(
    state: RecipientTiming,
    clock: Clock,
    kind: ReportKind,
    *,
    timing: DataTiming | None = None,
) -> TimingReport:
    return TimingReport(
        kind=kind,
        trans_id=clock.option.trans_id,
        originator=state.originator,
        recipient=state.recipient,
        timing=timing,
    )


def _swap(data: Data, replaced: dict[Option, Option]) -> Data:
    if not replaced:
        return data

    def swap(options: Iterable[Option]) -> tuple[Option, ...]:
        return tuple(replaced.get(option, option) for option in options)

    return Data(
        content=data.content,
        originator=Originator(
            identity=data.originator.identity, options=swap(data.originator.options)
        ),
        recipients=tuple(
            Recipient(identity=r.identity, options=swap(r.options)) for r in data.recipients
        ),
        options=swap(data.options),
        data_content=data.data_content,
    )


def timing_report_data(report: TimingReport, *, relay_domain: str, trans_id: int) -> Data:
    """The report ``data`` (sections 2.1.1, 2.1.2, 2.2.1): from ``apex=report@relay_domain``
    to the originator, the statusResponse inline as ``#Content``; a final hop report also
    carries a new dataTiming option (targetHop all, mustUnderstand true, transID
    ``trans_id``, a fresh UNIQID the caller allocates) with noLaterThan = returnTrip.
    ``trans_id`` is unused for the other kinds."""
    options: tuple[Option, ...] = ()
    if report.timing is not None:
        options = (data_timing_option(trans_id, report.timing),)
    return Data(
        content="#" + CONTENT_NAME,
        originator=Originator(identity=well_known(SERVICE_NAME, relay_domain)),
        recipients=(Recipient(identity=report.originator),),
        options=options,
        data_content=DataContent(name=CONTENT_NAME, content=report.status_response().to_xml()),
    )


__all__ = [
    "DATA_TIMING",
    "DEADLINE_TEXT",
    "FINAL_HOP_CODE",
    "MAX_MILLISECS",
    "PREDICTED_TEXT",
    "TIMING_ERROR_CODE",
    "TRANSIENT_CODE",
    "Clock",
    "DataTiming",
    "ForwardStep",
    "RecipientTiming",
    "ReportKind",
    "Timer",
    "TimerKind",
    "TimingReport",
    "TimingStep",
    "arrive",
    "data_timing_of",
    "data_timing_option",
    "delivered",
    "dropped",
    "forward",
    "mark_report_after_fired",
    "parse_data_timing",
    "state_of",
    "tick",
    "timing_options",
    "timing_report_data",
]
