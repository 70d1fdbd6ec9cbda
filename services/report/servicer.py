"""The report service's operation (RFC 3340 sections 5.1 and 6.2) and its gRPC servicers.

:func:`build_report` turns a relay's ``ReportRequest`` into the ``data`` element of RFC
3340 section 5.1's examples (via :func:`apexmesh.apex.report.report_data`), or raises the
:class:`~apexmesh.apex.errors.ApexError` naming the reply code: 553 for an endpoint or a
domain that is not valid or not served here, 501 for a transID, reply code or missing
destination, 500/501 for options that are not option elements, 554 for a statusRequest
option (section 5.1: it "MUST NOT be present in any data operation containing a
statusResponse element").

:class:`RelayPool` submits the payload through the configured relays, round-robin,
failing over to the next address only on gRPC UNAVAILABLE (the call reached no relay, so
trying another cannot duplicate the report); any other gRPC failure may have left the
report accepted, so it is answered 451 and not retried here. 421 when no relay could be
reached. Upstream gRPC error text is logged, never echoed (STYLE.md 3.3, habit 5).

A report is owed: its originator got ``ok`` and asked for it. With a
:class:`~apexmesh.rpc.retry.RetryPolicy` (:data:`OWED_REPORT`, bounded by the service's
``APEXMESH_REPORT_RETRY_SECONDS``) the servicer does not give it up at the first
transient failure. Each submission carries an id
(``SubmitRequest.submission_id``), so a call cut off mid-flight is sent again under the
same id and a relay that took it relays nothing twice; a transient refusal (4xx: the
relay could not check the originator's access entries while the access service was
down, 421; no relay reachable) means nothing was taken, so the report is submitted
again, under a new id, after a backoff, until it is delivered or the policy's bound (or
the caller's deadline) runs out. Then it is **reported undeliverable**: answered 421 or
451 with "statusResponse undeliverable after N attempts", counted as
``result="undeliverable"`` and logged with its originator and transID. A permanent
refusal (5xx, e.g. 537 when the originator's entries refuse apex=report) is answered at
once: repeating it cannot help.

:class:`ReportServicer` serves ``apexmesh.contracts.report.v1``;
:class:`ReportEndpointServicer` serves ``WellKnownEndpoint.Deliver`` for data addressed to
``apex=report`` and refuses it (RFC 3340 section 6.2).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram

from apexmesh.apex.codes import ApexReplyCode, for_code
from apexmesh.apex.data import Data
from apexmesh.apex.elements import Error, Reply
from apexmesh.apex.endpoint import Endpoint, EndpointError, normalize_domain
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import parse_option
from apexmesh.apex.report import (
    SERVICE_NAME,
    Destination,
    StatusResponse,
    check_report_loop,
    report_data,
)
from apexmesh.beep.mime import beep_xml
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.endpoint.v1 import endpoint_pb2
from apexmesh.contracts.report.v1 import report_pb2, report_pb2_grpc
from apexmesh.rpc.endpoint import WellKnownEndpointServicer
from apexmesh.rpc.observe import observed_channel
from apexmesh.rpc.relay import ChannelFactory, RelaySubmitter, SubmitSource
from apexmesh.rpc.retry import RetryPolicy

_log = logging.getLogger(__name__)

#: Largest transID: the UNIQID type of RFC 3340 section 9.1 is 1..2147483647.
MAX_TRANS_ID: Final = 2_147_483_647

#: Text of the answer to data addressed to apex=report (see ReportEndpointServicer).
INBOUND_REFUSAL: Final = "apex=report initiates communications and accepts no data (RFC 3340 6.2)"


@dataclass(frozen=True, slots=True)
class ReportMetrics:
    """Prometheus series of the report service, registered on the app's registry."""

    responses: Counter
    relay_calls: Counter
    inbound_refused: Counter
    report_seconds: Histogram
    retries: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> ReportMetrics:
        return cls(
            responses=Counter(
                "apexmesh_report_responses",
                "Report calls answered, by result: submitted (relay said 250), "
                "relay_refused (relay answered another code), invalid (request refused), "
                "unavailable (no relay reachable, 421), aborted (relay call failed, 451), "
                "undeliverable (transient failures until the retry bound ran out).",
                ["result"],
                registry=registry,
            ),
            relay_calls=Counter(
                "apexmesh_report_relay_calls",
                "Submit calls to relays, by configured address and outcome "
                "(answered, unavailable, failed).",
                ["relay", "outcome"],
                registry=registry,
            ),
            inbound_refused=Counter(
                "apexmesh_report_inbound_refused",
                "Data delivered to apex=report and refused (RFC 3340 section 6.2).",
                registry=registry,
            ),
            retries=Counter(
                "apexmesh_report_retries",
                "Owed statusResponses submitted again after a transient failure (a relay's "
                "4xx, no relay reachable, a call cut off).",
                registry=registry,
            ),
            report_seconds=Histogram(
                "apexmesh_report_duration_seconds",
                "Time to serve one Report call, relay round trip included.",
                buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5),
                registry=registry,
            ),
        )


# --------------------------------------------------------------------------- building


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """A statusResponse ready to be submitted: who originates it and the BEEP payload."""

    #: ``apex=report@DOMAIN``, the SubmitRequest's originator.
    originator: Endpoint
    #: The data element (for logs and tests).
    data: Data
    #: The application/beep+xml BEEP message entity holding ``data``.
    payload: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class DestinationInput:
    """One destination as a relay sent it, before validation."""

    identity: str
    code: int
    text: str = ""


#: Characters XML 1.0 cannot carry (section 2.2 ``Char``): C0 controls other than tab,
#: newline and carriage return, surrogates, U+FFFE and U+FFFF.
_NOT_XML_CHAR: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _reply_text(text: str, identity: str) -> str:
    if _NOT_XML_CHAR.search(text):
        raise ApexError(
            ApexReplyCode.PARAMETER_SYNTAX_ERROR,
            f"destination {identity[:64]!r}: reply text has characters XML cannot carry",
        )
    return text


def _endpoint(text: str, what: str) -> Endpoint:
    try:
        return Endpoint.parse(text)
    except EndpointError as exc:
        raise ApexError(exc.code, f"{what}: {exc}") from None


def build_report(
    *,
    served: Iterable[str],
    domain: str,
    recipient: str,
    trans_id: int,
    destinations: Sequence[DestinationInput],
    options: Sequence[bytes] = (),
) -> Submission:
    """Build the statusResponse data for one Report call (RFC 3340 section 5.1).

    ``served`` holds the normalized domains of this service. Returns the
    :class:`Submission`; raises :class:`ApexError` with the code the caller answers.
    """
    try:
        relay_domain = normalize_domain(domain)
    except EndpointError as exc:
        raise ApexError(exc.code, f"domain: {exc}") from None
    if relay_domain not in served:
        raise ApexError(
            ApexReplyCode.PARAMETER_INVALID, f"domain {relay_domain!r} is not served here"
        )
    originator = _endpoint(recipient, "recipient")
    if not 1 <= trans_id <= MAX_TRANS_ID:
        raise ApexError(
            ApexReplyCode.PARAMETER_SYNTAX_ERROR, f"transID {trans_id} is outside 1..2**31-1"
        )
    if not destinations:
        raise ApexError(
            ApexReplyCode.PARAMETER_SYNTAX_ERROR, "a statusResponse needs at least one destination"
        )
    built = tuple(
        Destination(
            identity=_endpoint(item.identity, "destination"),
            reply=Reply(code=item.code, trans_id=None, text=_reply_text(item.text, item.identity)),
        )
        for item in destinations
    )
    response = StatusResponse(trans_id=trans_id, destinations=built)
    data = report_data(relay_domain=relay_domain, originator=originator, response=response)
    if options:
        data = dataclasses.replace(data, options=tuple(parse_option(raw) for raw in options))
    check_report_loop(data)
    return Submission(
        originator=data.originator.identity, data=data, payload=beep_xml(data.to_xml())
    )


# --------------------------------------------------------------------------- relays


@dataclass(frozen=True, slots=True)
class SubmitOutcome:
    """What the Report caller is told, and the metric result it counts as."""

    code: int
    text: str
    result: str
    #: Who decided it (a relay's answer, no relay reachable, a call cut off).
    source: SubmitSource = SubmitSource.RELAY


class RelayPool:
    """Submit through the configured relays (the shared :class:`RelaySubmitter`: round-robin
    start, failover on UNAVAILABLE), counting each relay call in the report metrics and
    naming each outcome for ``apexmesh_report_responses_total``."""

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        timeout: float,
        metrics: ReportMetrics | None = None,
        channel_factory: ChannelFactory = observed_channel,
    ) -> None:
        self._metrics = metrics
        self._submitter = RelaySubmitter(
            addresses, timeout=timeout, channel_factory=channel_factory, observe=self._count
        )

    @property
    def addresses(self) -> tuple[str, ...]:
        return self._submitter.addresses

    def _count(self, address: str, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.relay_calls.labels(address, outcome).inc()

    async def submit(
        self, originator: str, payload: bytes, *, submission_id: str = ""
    ) -> SubmitOutcome:
        """Submit ``payload`` as ``originator``; never raises for relay trouble. With
        ``submission_id`` a call cut off mid-flight is retried under it."""
        outcome = await self._submitter.submit(originator, payload, submission_id=submission_id)
        if outcome.source is not SubmitSource.RELAY:
            result = str(outcome.source)
        elif outcome.code == ApexReplyCode.SUCCESS:
            result = "submitted"
        else:
            result = "relay_refused"
        return SubmitOutcome(outcome.code, outcome.text, result, outcome.source)

    async def aclose(self) -> None:
        await self._submitter.aclose()


# --------------------------------------------------------------------------- retries


#: How long an owed report is tried again after transient failures (module docstring):
#: 100 ms doubling to 2 s, for up to 20 s after the first attempt (the service's
#: ``APEXMESH_REPORT_RETRY_SECONDS`` sets the bound, its relay timeout ``attempt_seconds``).
OWED_REPORT: Final = RetryPolicy(
    attempts=None,
    first_backoff_seconds=0.1,
    max_backoff_seconds=2.0,
    bound_seconds=20.0,
    attempt_seconds=2.0,
)


def next_report_delay(
    policy: RetryPolicy,
    outcome: SubmitOutcome,
    attempt: int,
    *,
    elapsed: float,
    remaining: float | None,
) -> float | None:
    """Seconds to wait before attempt ``attempt + 1`` after ``outcome``; None: stop
    (delivered, refused for good, or out of time). Sans-I/O: the caller passes the time
    already spent and what is left of its deadline."""
    if not _transient(outcome):
        return None
    return policy.next_delay(attempt, elapsed=elapsed, remaining=remaining)


def _transient(outcome: SubmitOutcome) -> bool:
    """No relay took the report and trying again may deliver it: no relay reachable,
    a cut-off call (retried under the same id), or a relay's 4xx refusal."""
    if outcome.source is not SubmitSource.RELAY:
        return True
    code = for_code(outcome.code)
    return code is not None and code.transient


# --------------------------------------------------------------------------- servicers


def _status(code: int, text: str) -> common_pb2.ApexStatus:
    return common_pb2.ApexStatus(code=int(code), text=text)


class ReportServicer(report_pb2_grpc.ReportServiceServicer):
    """gRPC face of the report service (``apexmesh.contracts.report.v1``)."""

    def __init__(
        self,
        domains: Iterable[str],
        relays: RelayPool,
        metrics: ReportMetrics,
        *,
        retry: RetryPolicy | None = None,
    ) -> None:
        """``retry`` None: one attempt, as a plain relay client (no submission id)."""
        self._domains = frozenset(domains)
        self._relays = relays
        self._metrics = metrics
        self._retry = retry

    async def report(
        self, request: report_pb2.ReportRequest, *, time_left: float | None = None
    ) -> SubmitOutcome:
        """Validate, build and submit one statusResponse; always returns an outcome.
        ``time_left``: seconds until the caller stops waiting (its gRPC deadline)."""
        try:
            submission = build_report(
                served=self._domains,
                domain=request.domain,
                recipient=request.recipient,
                trans_id=request.trans_id,
                destinations=[
                    DestinationInput(
                        identity=item.identity, code=item.reply.code, text=item.reply.text
                    )
                    for item in request.destinations
                ],
                options=[bytes(raw) for raw in request.options],
            )
        except ApexError as exc:
            return SubmitOutcome(exc.code, Error.from_exception(exc).text, "invalid")
        originator = str(submission.originator)
        if self._retry is None:
            return await self._relays.submit(originator, submission.payload)
        return await self._owed(request, originator, submission.payload, time_left)

    async def _owed(
        self,
        request: report_pb2.ReportRequest,
        originator: str,
        payload: bytes,
        time_left: float | None,
    ) -> SubmitOutcome:
        """Submit until delivered, refused for good, or out of time (module docstring)."""
        assert self._retry is not None  # noqa: S101  (the caller checked)
        loop = asyncio.get_running_loop()
        started = loop.time()
        submission_id = _submission_id(request)
        attempt = 0
        while True:
            attempt += 1
            outcome = await self._relays.submit(originator, payload, submission_id=submission_id)
            elapsed = loop.time() - started
            remaining = None if time_left is None else time_left - elapsed
            delay = next_report_delay(
                self._retry, outcome, attempt, elapsed=elapsed, remaining=remaining
            )
            if delay is None:
                break
            if outcome.source is not SubmitSource.ABORTED:
                # Nothing was taken under the old id, and a relay that remembers it
                # would answer the same refusal again: a new one. (A cut-off call keeps
                # its id: the relay may have taken it and answers a retry as it did.)
                submission_id = _submission_id(request)
            self._metrics.retries.inc()
            _log.info(
                "statusResponse transID %d to %s: %d %s; attempt %d in %.1f s",
                request.trans_id,
                request.recipient[:256],
                outcome.code,
                outcome.text,
                attempt + 1,
                delay,
            )
            await asyncio.sleep(delay)
        if _transient(outcome):  # out of time, not refused for good
            _log.warning(
                "statusResponse transID %d to %s undeliverable after %d attempts in %.1f s: %d %s",
                request.trans_id,
                request.recipient[:256],
                attempt,
                elapsed,
                outcome.code,
                outcome.text,
            )
            return SubmitOutcome(
                outcome.code,
                f"statusResponse undeliverable after {attempt} attempts: {outcome.text}",
                "undeliverable",
                outcome.source,
            )
        return outcome

    async def Report(  # noqa: N802 - generated servicer method name
        self, request: report_pb2.ReportRequest, _context: grpc.aio.ServicerContext
    ) -> report_pb2.ReportResponse:
        started = time.perf_counter()
        try:
            outcome = await self.report(request, time_left=_context.time_remaining())
        finally:
            self._metrics.report_seconds.observe(time.perf_counter() - started)
        self._metrics.responses.labels(outcome.result).inc()
        _log.debug(
            "statusResponse transID %d to %s: %s %d",
            request.trans_id,
            request.recipient[:256],
            outcome.result,
            outcome.code,
        )
        return report_pb2.ReportResponse(status=_status(outcome.code, outcome.text))


def _submission_id(request: report_pb2.ReportRequest) -> str:
    """A fresh submission id: the report's name, for the relay's log, and a nonce."""
    return f"report:{request.trans_id}:{request.recipient[:128]}:{uuid.uuid4().hex}"


class ReportEndpointServicer(WellKnownEndpointServicer):
    """``WellKnownEndpoint.Deliver`` for data addressed to ``apex=report@DOMAIN``.

    RFC 3340 section 6.2: "A consumer of the service does not initiate communications
    with the service"; the report service only originates data. Data delivered to it is
    therefore refused, without parsing the payload, with 550 "requested action not taken"
    (section 10): the endpoint exists (so not 553 "parameter invalid"), the data is not
    malformed (so not 500/501), nothing in the data is unimplemented (so not 504), and the
    refusal is permanent (so not a 4xx, which would invite a retry that can never
    succeed). Each refusal is counted in ``apexmesh_report_inbound_refused_total``.
    """

    def __init__(self, metrics: ReportMetrics) -> None:
        self._metrics = metrics

    async def Deliver(  # noqa: N802 - generated servicer method name
        self, request: endpoint_pb2.EndpointDeliverRequest, _context: grpc.aio.ServicerContext
    ) -> endpoint_pb2.EndpointDeliverResponse:
        self._metrics.inbound_refused.inc()
        _log.debug("refused data for %r from %r", request.recipient[:256], request.originator[:256])
        return endpoint_pb2.EndpointDeliverResponse(
            status=_status(ApexReplyCode.ACTION_NOT_TAKEN, INBOUND_REFUSAL)
        )


__all__ = [
    "INBOUND_REFUSAL",
    "MAX_TRANS_ID",
    "SERVICE_NAME",
    "DestinationInput",
    "RelayPool",
    "OWED_REPORT",
    "ReportEndpointServicer",
    "ReportMetrics",
    "ReportServicer",
    "SubmitOutcome",
    "Submission",
    "build_report",
    "next_report_delay",
]
