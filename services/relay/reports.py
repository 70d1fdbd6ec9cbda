"""Outcomes of an accepted data, once known: counted, logged, and reported when asked.

statusRequest (RFC 3340 section 5.1): once every recipient the option applies to has an
outcome, the relay asks the report service of its domain to send the statusResponse
(250 delivered, or the error: 550, 537, 421 ...). When forwarding to another domain fails
here, the relay reports that failure too, even though the option targeted the final hop,
so the originator always learns the fate of each recipient. Held recipients
(hold4Endpoint) are left out: their fate is not known yet; the drain reports on them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.options import STATUS_REQUEST
from apexmesh.apex.report import PendingReport, pending_reports, status_response
from apexmesh.relay.outcomes import DELIVERED, LOCAL_ERROR, Outcome, Reason, code_of
from services.relay.jobs import Job

if TYPE_CHECKING:
    from apexmesh.relay.routing import RouteKind
    from services.relay.metrics import RelayMetrics
    from services.relay.tracing import HopTracer
    from services.relay.wellknown import WellKnownServices

_log = logging.getLogger(__name__)

#: The recipients of a group and the future of their outcomes, in the same order.
GroupDelivery = tuple[tuple[Endpoint, ...], asyncio.Future[tuple[Outcome, ...]]]


class Reporter:
    """Counts every recipient's outcome and sends the statusResponses owed."""

    def __init__(
        self,
        *,
        domains: frozenset[str],
        primary_domain: str,
        services: WellKnownServices,
        metrics: RelayMetrics,
    ) -> None:
        self._domains = domains
        self._primary = primary_domain
        self._services = services
        self._metrics = metrics
        self._delivered = metrics.outcomes.labels("delivered")
        #: Records where data with a statusRequest went (services/relay/tracing.py).
        self.tracer: HopTracer | None = None

    def count(self, originator: Endpoint, endpoint: Endpoint, outcome: Outcome) -> None:
        """Count (and log, when it failed) one recipient's outcome."""
        if outcome.delivered:
            self._delivered.inc()
            return
        reason = outcome.reason
        if reason is Reason.HELD:
            self._metrics.count(self._metrics.outcomes, "held")
            return
        if reason is Reason.SHED:
            self._metrics.count(self._metrics.outcomes, "shed")
        else:
            label = "delivered" if outcome.ok else str(outcome.code)
            self._metrics.count(self._metrics.outcomes, label)
        if not outcome.ok:
            _log.info(
                "data from %s to %s not delivered: %s %s",
                originator,
                endpoint,
                outcome.code,
                outcome.text,
            )

    def record(
        self, originator: Endpoint, endpoint: Endpoint, future: asyncio.Future[Outcome]
    ) -> None:
        """Count one recipient's outcome once its delivery has settled (a callback)."""
        self.count(originator, endpoint, _result(future, endpoint))

    def record_group(
        self,
        originator: Endpoint,
        endpoints: tuple[Endpoint, ...],
        future: asyncio.Future[tuple[Outcome, ...]],
    ) -> None:
        """Count the outcomes of a group once its deliveries have settled (a callback)."""
        delivered = 0
        for endpoint, outcome in zip(endpoints, _group_result(future, endpoints), strict=True):
            if outcome.delivered:
                delivered += 1
            else:
                self.count(originator, endpoint, outcome)
        if delivered:
            self._delivered.inc(delivered)

    async def conclude(
        self,
        job: Job,
        outcomes: dict[Endpoint, asyncio.Future[Outcome]],
        hopped: tuple[PendingReport, ...],
        groups: list[GroupDelivery],
        where: Mapping[Endpoint, tuple[RouteKind, str]] | None = None,
    ) -> None:
        """Wait for every outcome of ``job``, count them and send the reports owed."""
        originator = job.data.originator.identity
        await asyncio.gather(
            *outcomes.values(), *(grouped for _, grouped in groups), return_exceptions=True
        )
        results = {endpoint: _result(future, endpoint) for endpoint, future in outcomes.items()}
        for endpoints, grouped in groups:
            results.update(zip(endpoints, _group_result(grouped, endpoints), strict=True))
        for endpoint, outcome in results.items():
            self.count(originator, endpoint, outcome)
        held = frozenset(e for e, outcome in results.items() if outcome.reason is Reason.HELD)
        reports = (*owed_reports(job), *hopped)
        reports += forwarding_failures(job, results, reports)
        reported: dict[str, None] = {}
        for report in without(reports, held | job.held):
            reported[self.report_domain(report)] = None
            response = status_response(
                report,
                (
                    (
                        endpoint,
                        Reply(
                            code=code_of(results[endpoint].code),
                            trans_id=None,
                            text=results[endpoint].text if not results[endpoint].ok else "",
                        ),
                    )
                    for endpoint in report.recipients
                ),
            )
            await self._services.report(self.report_domain(report), report.originator, response)
        if self.tracer is not None:
            self.tracer.concluded(job.data, job.received_at, results, tuple(reported), where)

    def report_domain(self, report: PendingReport) -> str:
        """The domain whose apex=report speaks for this relay (RFC 3340 section 5.1): the
        reported recipients' domain when this relay serves it, else its primary domain."""
        if not report.recipients:
            return self._primary
        return self.voice_for(report.recipients[0])

    def voice_for(self, recipient: Endpoint) -> str:
        """The domain whose apex=report reports on ``recipient``."""
        return recipient.domain if recipient.domain in self._domains else self._primary


def owed_reports(job: Job) -> tuple[PendingReport, ...]:
    """The statusResponses ``job`` owes as planned (statusRequest options that apply)."""
    return pending_reports(job.data, job.plan)


def may_owe_reports(job: Job) -> bool:
    """True when a statusRequest anywhere in ``job`` could owe a report (planned, or for a
    failed forwarding, see :func:`forwarding_failures`)."""
    if any(option.internal == STATUS_REQUEST for option in job.data.options):
        return True
    return any(
        option.internal == STATUS_REQUEST
        for plan in job.plan.recipients
        for option in plan.recipient.options
    )


def forwarding_failures(
    job: Job, results: dict[Endpoint, Outcome], reports: tuple[PendingReport, ...]
) -> tuple[PendingReport, ...]:
    """statusRequests that did not apply here but whose forwarding failed here: the
    originator would otherwise never learn the fate of those recipients."""
    covered = {(r.trans_id, e) for r in reports for e in r.recipients}
    owed: dict[int, list[Endpoint]] = {}
    for plan in job.plan.recipients:
        endpoint = plan.recipient.identity
        if plan.final or results.get(endpoint, DELIVERED).ok:
            continue
        for option in (*job.data.options, *plan.recipient.options):
            if option.internal == STATUS_REQUEST and (option.trans_id, endpoint) not in covered:
                owed.setdefault(option.trans_id, []).append(endpoint)
    return tuple(
        PendingReport(
            trans_id=trans_id,
            originator=job.data.originator.identity,
            recipients=tuple(endpoints),
        )
        for trans_id, endpoints in owed.items()
    )


def without(
    reports: Iterable[PendingReport], held: frozenset[Endpoint]
) -> tuple[PendingReport, ...]:
    """statusRequest reports minus held recipients: their fate is not known yet."""
    kept = []
    for report in reports:
        recipients = tuple(e for e in report.recipients if e not in held)
        if recipients:
            kept.append(dataclasses.replace(report, recipients=recipients))
    return tuple(kept)


def _result(future: asyncio.Future[Outcome], endpoint: Endpoint) -> Outcome:
    if future.cancelled():
        return LOCAL_ERROR
    error = future.exception()
    if error is not None:
        _log.warning("delivery to %s failed: %s", endpoint, error)
        return LOCAL_ERROR
    return future.result()


def _group_result(
    future: asyncio.Future[tuple[Outcome, ...]], endpoints: tuple[Endpoint, ...]
) -> tuple[Outcome, ...]:
    if future.cancelled():
        return (LOCAL_ERROR,) * len(endpoints)
    error = future.exception()
    if error is not None:
        _log.warning("delivery to a group of %d failed: %s", len(endpoints), error)
        return (LOCAL_ERROR,) * len(endpoints)
    return future.result()


__all__ = [
    "GroupDelivery",
    "Reporter",
    "forwarding_failures",
    "may_owe_reports",
    "owed_reports",
    "without",
]
