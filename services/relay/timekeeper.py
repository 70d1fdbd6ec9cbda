"""dataTiming at this relay (RFC 3342 section 2): timers for deliveries in flight and the
timing reports, around the sans-I/O rules of :mod:`apexmesh.apex.timing`.

The core decides, this module only keeps time: it reads the wall clock (epoch
milliseconds, so that a deadline written to Redis with held data means the same on every
pod), arms one event-loop timer per delivery at the earliest :class:`Timer` the core asks
for, and hands the :class:`TimingReport` values to the report service (``apex=report``
originates them through a relay, RFC 3340 section 6.2). A final hop report carries its own
dataTiming option (noLaterThan = the original returnTrip) with a fresh transID.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.options import Option
from apexmesh.apex.timing import (
    RecipientTiming,
    ReportKind,
    Timer,
    TimingReport,
    TimingStep,
    data_timing_option,
    delivered,
    tick,
)
from apexmesh.relay.outcomes import Outcome

if TYPE_CHECKING:
    from services.relay.metrics import RelayMetrics
    from services.relay.wellknown import WellKnownServices

_log = logging.getLogger(__name__)

#: Largest transID (UNIQID of RFC 3340 section 9.1).
_MAX_TRANS_ID: Final = 2_147_483_647


def wall_ms() -> int:
    """Epoch milliseconds: the clock every pod of a domain shares (through NTP)."""
    return time.time_ns() // 1_000_000


class Timekeeper:
    """Timers and reports of the dataTiming option for one relay pod."""

    def __init__(
        self,
        *,
        services: WellKnownServices,
        metrics: RelayMetrics,
        report_domain: Callable[[Endpoint], str],
        clock: Callable[[], int] = wall_ms,
        min_transit_ms: int = 0,
    ) -> None:
        self._services = services
        self._metrics = metrics
        self._report_domain = report_domain
        self.now = clock
        #: A next hop is known to take at least this long: the predictive early error of
        #: section 2.1 (0: never predict).
        self.min_transit_ms = min_transit_ms
        self._sending: set[asyncio.Task[None]] = set()

    # ----------------------------------------------------------------- reports

    def report(self, reports: Iterable[TimingReport]) -> None:
        """Have the report service send each report (in the background, in order)."""
        for report in reports:
            self._metrics.count(self._metrics.timing_reports, report.kind.name.lower())
            task = asyncio.get_running_loop().create_task(self._send(report))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, report: TimingReport) -> None:
        options: tuple[Option, ...] = ()
        if report.kind is ReportKind.FINAL_HOP and report.timing is not None:
            options = (data_timing_option(1 + secrets.randbelow(_MAX_TRANS_ID), report.timing),)
        try:
            await self._services.report(
                self._report_domain(report.recipient),
                report.originator,
                report.status_response(),
                options=options,
            )
        except Exception:  # noqa: BLE001  (a report must never take the relay down)
            _log.exception("timing report %s to %s failed", report.kind.name, report.originator)

    def missed(self, step: TimingStep) -> Outcome:
        """A recipient whose deadline is reached (or cannot be met): count it, report it
        (550 with reportErrors) and return its outcome."""
        self._metrics.count(
            self._metrics.deadline_misses, "predicted" if step.predicted else "reached"
        )
        self.report(step.reports)
        return Outcome(ApexReplyCode.ACTION_NOT_TAKEN, step.outcome_text)

    # ----------------------------------------------------------------- deliveries

    def track(
        self,
        state: RecipientTiming,
        timers: tuple[Timer, ...],
        delivery: asyncio.Future[Outcome],
    ) -> asyncio.Future[Outcome]:
        """Watch one delivery to a recipient (step 5.3).

        No ``ok`` by the deadline: the outcome is 550 at the deadline (with the timing
        error report); reportAfter reached first: one transient report, delivery goes on;
        ``ok`` in time: the final hop report when returnTrip asks for one. The returned
        future settles with the outcome that counts.
        """
        loop = asyncio.get_running_loop()
        result: asyncio.Future[Outcome] = loop.create_future()
        current = state
        handle: asyncio.TimerHandle | None = None

        def arm(pending: tuple[Timer, ...]) -> None:
            nonlocal handle
            if pending:
                handle = loop.call_later(max(0, pending[0].at - self.now()) / 1000, fire)

        def fire() -> None:
            nonlocal current
            if result.done():
                return
            step = tick(current, self.now())
            current = step.state
            if step.expired:
                result.set_result(self.missed(step))
                return
            self.report(step.reports)
            arm(step.timers)

        def settled(done: asyncio.Future[Outcome]) -> None:
            if handle is not None:
                handle.cancel()
            if result.done():
                return  # the deadline decided first; a late ok changes nothing
            if done.cancelled() or done.exception() is not None:
                result.set_result(Outcome(ApexReplyCode.ACTION_ABORTED, "local error"))
                return
            outcome = done.result()
            if outcome.delivered:  # held: the drain reports on it later
                self.report(delivered(current, self.now()))
            result.set_result(outcome)

        delivery.add_done_callback(settled)
        arm(timers)
        return result

    async def close(self) -> None:
        """Let reports being sent finish (bounded by the caller's shutdown grace)."""
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)


__all__ = ["Timekeeper", "wall_ms"]
