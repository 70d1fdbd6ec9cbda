"""Well-known endpoints of the relay's domains (RFC 3340 section 6), reached over gRPC.

Data addressed to ``apex=NAME@DOMAIN`` is handed to the service NAME: the access service
through its ``HandleOperation`` contract (its replies and notifications are then
originated by this relay as ``apex=access@DOMAIN``), every other configured service
through the generic ``WellKnownEndpoint.Deliver``. The report service is also asked here
to send statusResponse data (section 5.1).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

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
from apexmesh.rpc.access import AccessClient
from services.relay.outcomes import DELIVERED, Outcome

if TYPE_CHECKING:
    from services.relay.router import Router

_log = logging.getLogger(__name__)

#: Seconds a call to a service may take before the delivery counts as failed (421), by
#: default (``APEXMESH_RELAY_SERVICE_TIMEOUT_MS``): a publication to 1,000 subscribers
#: under load takes seconds, and a pubsub pod finishes a fan-out it has started anyway.
SERVICE_TIMEOUT_SECONDS = 30.0

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
    ) -> None:
        self._access = access
        self._timeout = timeout
        #: The pods of each service, and where the next round-robin turn starts.
        self._endpoints = {
            name: [endpoint_pb2_grpc.WellKnownEndpointStub(channel) for channel in pods]
            for name, pods in channels.items()
        }
        self._turns = dict.fromkeys(self._endpoints, 0)
        self._report = None if report is None else report_pb2_grpc.ReportServiceStub(report)

    def deliver(
        self,
        recipient: Endpoint,
        data: Data,
        payload: bytes,
        parts: tuple[MimePart, ...],
        router: Router,
    ) -> asyncio.Future[Outcome]:
        """Hand ``payload`` (data for ``recipient`` only) to its service."""
        return asyncio.ensure_future(self._deliver(recipient, data, payload, parts, router))

    async def _deliver(
        self,
        recipient: Endpoint,
        data: Data,
        payload: bytes,
        parts: tuple[MimePart, ...],
        router: Router,
    ) -> Outcome:
        name = recipient.address.removeprefix("apex=")
        try:
            if name == ACCESS:
                return await self._access_operation(recipient, data, parts, router)
            pods = self._endpoints.get(name)
            if not pods:
                return Outcome(ApexReplyCode.ACTION_NOT_TAKEN, "unknown endpoint identity")
            request = endpoint_pb2.EndpointDeliverRequest(
                recipient=str(recipient),
                originator=str(data.originator.identity),
                payload=payload,
            )
            return await self._call(name, pods, request)
        except ApexError as exc:
            return Outcome(int(exc.code), str(exc))

    async def _call(
        self,
        name: str,
        pods: list[endpoint_pb2_grpc.WellKnownEndpointStub],
        request: endpoint_pb2.EndpointDeliverRequest,
    ) -> Outcome:
        """Deliver through the service's pods, round-robin; only an UNAVAILABLE pod (the
        call reached nobody, so nothing can be done twice) moves on to the next one."""
        first = self._turns[name]
        self._turns[name] = (first + 1) % len(pods)
        for turn in range(len(pods)):
            stub = pods[(first + turn) % len(pods)]
            try:
                response = await stub.Deliver(request, timeout=self._timeout)
            except grpc.aio.AioRpcError as exc:
                _log.warning("service %s pod %d unreachable: %s", name, turn, exc.code())
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    continue
                return Outcome(ApexReplyCode.SERVICE_NOT_AVAILABLE, "service not available")
            return Outcome(response.status.code, response.status.text)
        return Outcome(ApexReplyCode.SERVICE_NOT_AVAILABLE, "service not available")

    async def _access_operation(
        self, recipient: Endpoint, data: Data, parts: tuple[MimePart, ...], router: Router
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
            error = router.originate(answer, Payload(control=b""), beep_xml(answer.to_xml()))
            if error is not None:
                _log.warning("could not send access reply to %s: %s", target, error.text)
        return DELIVERED

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
