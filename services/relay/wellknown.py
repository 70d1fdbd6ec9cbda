"""Well-known endpoints of the relay's domains (RFC 3340 section 6), reached over gRPC.

Data addressed to ``apex=NAME@DOMAIN`` is handed to the service NAME: the access service
through its ``HandleOperation`` contract (its replies and notifications are then
originated by this relay as ``apex=access@DOMAIN``), every other configured service
through the generic ``WellKnownEndpoint.Deliver``. The report service is also asked here
to send statusResponse data (section 5.1).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Final

import grpc

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import MimePart, Payload, resolve_content
from apexmesh.apex.data import Data, DataContent, Originator, Recipient
from apexmesh.apex.endpoint import Endpoint, well_known
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import Option
from apexmesh.apex.report import StatusResponse
from apexmesh.beep.mime import beep_xml
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.endpoint.v1 import endpoint_pb2, endpoint_pb2_grpc
from apexmesh.contracts.report.v1 import report_pb2, report_pb2_grpc
from apexmesh.relay.outcomes import DELIVERED, SERVICE_UNAVAILABLE, Outcome, outcome_of
from apexmesh.rpc.access import AccessClient
from apexmesh.rpc.batched import BatchedCaller
from apexmesh.rpc.retry import DELIVER, SERVICE_RESTART, Failure, failure_of, may_repeat

#: How the relay originates data itself (services/relay/router.py ``Router.originate``):
#: the access service's replies go out as apex=access@DOMAIN.
Originate = Callable[[Data, Payload, bytes], "asyncio.Future[None]"]

_log = logging.getLogger(__name__)

#: Seconds a call to a service may take before the delivery counts as failed (421), by
#: default (``APEXMESH_RELAY_SERVICE_TIMEOUT_MS``): a publication to 1,000 subscribers
#: under load takes seconds, and a pubsub pod finishes a fan-out it has started anyway.
SERVICE_TIMEOUT_SECONDS = 30.0

#: Calls to one pod of a service in flight at once; more wait (flow control: the data
#: they carry stay unanswered, and their senders' windows close).
MAX_CALLS_PER_POD: Final = 256

#: How long a delivery waits, in all, while every pod of its service refuses calls
#: (UNAVAILABLE): a pod restarting, or the first second after it is back, while the
#: channel's reconnect backoff (apexmesh/rpc/channels.py: at most a second) runs out.
#: Without it a publication in that window was 421 at once, after the relay's ``ok``.
#: The pauses between rounds are :data:`~apexmesh.rpc.retry.SERVICE_RESTART`'s.
SERVICE_RESTART_SECONDS: Final = 5.0


ACCESS = "access"
REPORT = "report"
CONTENT_NAME = "Content"


class WellKnownServices:
    """gRPC clients of the services behind this domain's well-known endpoints."""

    def __init__(
        self,
        access: AccessClient,
        channels: Mapping[str, Sequence[grpc.aio.Channel]],
        report: grpc.aio.Channel | None,
        *,
        timeout: float = SERVICE_TIMEOUT_SECONDS,
        retried: frozenset[str] = frozenset({"pubsub"}),
        delivery_prefix: str = "relay",
        max_calls_per_pod: int = MAX_CALLS_PER_POD,
        patience: float = SERVICE_RESTART_SECONDS,
    ) -> None:
        self._access = access
        self._timeout = timeout
        #: How long a delivery waits while every pod refuses (within the call timeout).
        self._restart = replace(SERVICE_RESTART, bound_seconds=min(patience, timeout))
        #: Services that honour ``delivery_id`` (their work happens once per id): a call
        #: cut off mid-flight is retried (on the next pod) with the same id.
        self._retried = retried
        #: The pods of each service (calls batched over one stream per pod,
        #: apexmesh/rpc/batched.py), and where the next round-robin turn starts.
        self._endpoints = {
            name: [_caller(name, index, channel) for index, channel in enumerate(pods)]
            for name, pods in channels.items()
        }
        self._calls = {
            name: [asyncio.Semaphore(max_calls_per_pod) for _ in pods]
            for name, pods in channels.items()
        }
        self._turns = dict.fromkeys(self._endpoints, 0)
        self._report = None if report is None else report_pb2_grpc.ReportServiceStub(report)
        #: Unique to this process: the counter after it restarts with the process, and a
        #: delivery id must never name two deliveries (a service does each id once).
        self._prefix = f"{delivery_prefix}-{secrets.token_hex(6)}"
        self._ids = itertools.count(1)
        #: How this relay originates data (set by the router that owns these services).
        self.originate: Originate | None = None

    def deliver(
        self,
        recipient: Endpoint,
        data: Data,
        payload: bytes,
        parts: tuple[MimePart, ...],
    ) -> asyncio.Future[Outcome]:
        """Hand ``payload`` (data for ``recipient`` only) to its service; the outcome is
        the service's answer (the copy's custody, services/relay/jobs.py)."""
        return asyncio.ensure_future(self._deliver(recipient, data, payload, parts))

    async def _deliver(
        self,
        recipient: Endpoint,
        data: Data,
        payload: bytes,
        parts: tuple[MimePart, ...],
    ) -> Outcome:
        name = recipient.address.removeprefix("apex=")
        try:
            if name == ACCESS:
                return await self._access_operation(recipient, data, parts)
            pods = self._endpoints.get(name)
            if not pods:
                return Outcome(ApexReplyCode.ACTION_NOT_TAKEN, "unknown endpoint identity")
            request = endpoint_pb2.EndpointDeliverRequest(
                recipient=str(recipient),
                originator=str(data.originator.identity),
                payload=payload,
                delivery_id=f"{self._prefix}-{next(self._ids)}",
            )
            return await self._call(name, pods, request)
        except ApexError as exc:
            return Outcome(int(exc.code), str(exc))

    async def _call(
        self,
        name: str,
        pods: list[_EndpointCaller],
        request: endpoint_pb2.EndpointDeliverRequest,
    ) -> Outcome:
        """Deliver through the service's pods, round-robin. An UNAVAILABLE pod (the call
        reached nobody, so nothing can be done twice) moves on to the next one at once;
        when every pod refused, the call waits for one to come back (a pod restarting,
        or a channel in its reconnect backoff just after the pod came back), backing off
        up to a second, for :data:`SERVICE_RESTART_SECONDS` in all. The data stays
        unanswered meanwhile, so its sender is slowed, not dropped. A call cut off
        mid-flight (its outcome unknown) is retried, with the same ``delivery_id``, only
        for a service that honours it; :data:`~apexmesh.rpc.retry.DELIVER`'s attempts at
        most, then 421 (counted and reported like any failed delivery)."""
        first = self._turns[name]
        self._turns[name] = (first + 1) % len(pods)
        calls = self._calls[name]
        retries = name in self._retried
        attempts = 0  # calls cut off mid-flight
        position = 0
        refused = 0  # pods in a row whose call reached nobody
        rounds, waited = 0, 0.0  # rounds of pods that all refused, and the pauses after
        while True:
            index = (first + position) % len(pods)
            try:
                async with calls[index]:
                    response = await pods[index].call(request, timeout=self._timeout)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                _log.warning("service %s pod %d: %s (%s)", name, index, code, exc.details())
                position += 1
                failure = failure_of(code)
                if failure is Failure.UNREACHED:
                    refused += 1
                    if refused < len(pods):
                        continue  # reached nobody: the next pod at once
                    # Every pod refused: nothing was done anywhere, so waiting for one
                    # to come back is safe for any service.
                    rounds += 1
                    pause = self._restart.next_delay(rounds, elapsed=waited)
                    if pause is None:
                        return SERVICE_UNAVAILABLE
                    await asyncio.sleep(pause)
                    waited += pause
                    refused = 0
                    continue
                refused = 0
                attempts += 1
                delay = (
                    DELIVER.next_delay(attempts)
                    if may_repeat(failure, repeatable=retries)
                    else None
                )
                if delay is None:
                    return SERVICE_UNAVAILABLE
                await asyncio.sleep(delay)
                continue
            return outcome_of(response.status)

    async def _access_operation(
        self, recipient: Endpoint, data: Data, parts: tuple[MimePart, ...]
    ) -> Outcome:
        content = resolve_content(data, {p.content_id: p for p in parts if p.content_id})
        body = content.content if isinstance(content, DataContent) else content.body
        result = await self._access.handle_operation(str(data.originator.identity), body)
        service = well_known(ACCESS, recipient.domain)
        for outbound in (result.reply, *result.notifications):
            try:
                target = Endpoint.parse(outbound.recipient)
            except ValueError:
                continue
            answer = inline_data(service, target, outbound.content)
            originate = self.originate
            if originate is None:
                _log.warning("no relay to send the access reply to %s", target)
                continue
            try:
                sent = originate(answer, Payload(control=b""), beep_xml(answer.to_xml()))
            except ApexError as exc:
                _log.warning("could not send access reply to %s: %s", target, exc)
                continue
            sent.add_done_callback(functools.partial(_reply_sent, target))
        return DELIVERED

    async def aclose(self) -> None:
        """End the delivery streams to the services' pods (their channels are the
        caller's to close)."""
        for pods in self._endpoints.values():
            for caller in pods:
                await caller.aclose()

    async def report(
        self,
        domain: str,
        recipient: Endpoint,
        response: StatusResponse,
        *,
        options: tuple[Option, ...] = (),
    ) -> None:
        """Ask the report service to send ``response`` to ``recipient`` (RFC 3340 section
        5.1; RFC 3342 section 2 for timing reports, whose final hop report carries
        ``options``)."""
        if self._report is None:
            _log.warning("report to %s: no report service configured", recipient)
            return
        request = report_pb2.ReportRequest(
            domain=domain,
            recipient=str(recipient),
            trans_id=response.trans_id,
            destinations=[
                report_pb2.Destination(
                    identity=str(d.identity), reply=_status(int(d.reply.code), d.reply.text)
                )
                for d in response.destinations
            ],
            options=[option.to_xml() for option in options],
        )
        try:
            answer = await self._report.Report(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            _log.warning("report service unreachable: %s", exc.code())
            return
        if answer.status.code != ApexReplyCode.SUCCESS:
            _log.warning(
                "report to %s refused: %s %s", recipient, answer.status.code, answer.status.text
            )


_EndpointCaller = BatchedCaller[
    endpoint_pb2.EndpointDeliverRequest, endpoint_pb2.EndpointDeliverResponse
]


def _caller(name: str, index: int, channel: grpc.aio.Channel) -> _EndpointCaller:
    stub = endpoint_pb2_grpc.WellKnownEndpointStub(channel)
    return BatchedCaller(
        stub.DeliverStream,
        stub.Deliver,
        endpoint_pb2.EndpointDeliverResponse.FromString,
        name=f"service {name} pod {index}",
    )


def _reply_sent(target: Endpoint, sent: asyncio.Future[None]) -> None:
    """An access reply the relay originated was taken, or refused (logged)."""
    if not sent.cancelled() and (error := sent.exception()) is not None:
        _log.warning("could not send access reply to %s: %s", target, error)


def _status(code: int, text: str) -> common_pb2.ApexStatus:
    return common_pb2.ApexStatus(code=code, text=text)


def inline_data(originator: Endpoint, recipient: Endpoint, content: bytes) -> Data:
    """Data carrying XML ``content`` inline as ``#Content`` (RFC 3340 section 4.1)."""
    return Data(
        content="#" + CONTENT_NAME,
        originator=Originator(identity=originator),
        recipients=(Recipient(identity=recipient),),
        data_content=DataContent(name=CONTENT_NAME, content=content),
    )
