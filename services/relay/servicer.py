"""The relay's gRPC servicer: deliveries from other pods, data from services, terminate.

``Deliver``/``DeliverStream`` send a ready-made payload to an endpoint attached to this
pod (the caller built it; nothing is re-parsed here), or a group of recipients to the
channels they are attached over (services/relay/grouping.py). ``Submit`` is how the domain's
APEX services originate data (RFC 3340 section 6). ``TerminateAttachment`` ends an
attachment this pod holds with a relay-initiated terminate (section 4.4.3).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, TypeVar

import grpc

from apexmesh.apex.associations import Attachment
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import parse_payload
from apexmesh.apex.data import Data
from apexmesh.apex.elements import parse_message
from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.apex.errors import ApexError
from apexmesh.apex.party import OVERRIDE_CODE
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from services.relay.grouping import Group, deliver_here
from services.relay.outcomes import NOT_HERE_OUTCOME, Outcome
from services.relay.router import Router

if TYPE_CHECKING:
    from services.relay.edge import ApexChannel


_T = TypeVar("_T")
_R = TypeVar("_R")


def _status(outcome: Outcome) -> common_pb2.ApexStatus:
    return common_pb2.ApexStatus(code=outcome.code, text=outcome.text)


def _then(source: asyncio.Future[_T], make: Callable[[_T], _R]) -> asyncio.Future[_R]:
    """A future of ``make(result)`` once ``source`` has its result (a callback, no task)."""
    target: asyncio.Future[_R] = asyncio.get_running_loop().create_future()
    source.add_done_callback(lambda done: target.set_result(make(done.result())))
    return target


class RelayServicer(relay_pb2_grpc.RelayServiceServicer):
    """gRPC face of one relay pod."""

    def __init__(self, router: Router) -> None:
        self._router = router

    def _deliver(self, request: relay_pb2.DeliverRequest) -> asyncio.Future[Outcome] | Outcome:
        try:
            endpoint = Endpoint.parse(request.recipient)
        except EndpointError as exc:
            return Outcome(ApexReplyCode.PARAMETER_INVALID, str(exc))
        held = self._router.local.get(endpoint)
        if held is None:
            return NOT_HERE_OUTCOME
        self._router.metrics.count(self._router.metrics.deliveries, "from-pod")
        return held[0].deliver(request.payload)

    def _deliver_group(
        self, request: relay_pb2.DeliverRequest
    ) -> asyncio.Future[tuple[Outcome, ...]] | tuple[Outcome, ...]:
        """A group of recipients (see services/relay/grouping.py), split by channel."""
        try:
            recipients = tuple(Endpoint.parse(name) for name in request.group)
        except EndpointError as exc:
            return (Outcome(ApexReplyCode.PARAMETER_INVALID, str(exc)),) * len(request.group)
        if len(request.group_elements) != len(recipients):
            invalid = Outcome(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "one element per recipient")
            return (invalid,) * len(recipients)
        group = Group(recipients, tuple(request.group_elements), request.head, request.tail)
        self._router.metrics.count(self._router.metrics.deliveries, "from-pod", len(recipients))
        return deliver_here(group, self._router.local)

    def _answer(
        self, request: relay_pb2.DeliverRequest
    ) -> asyncio.Future[relay_pb2.DeliverResponse] | relay_pb2.DeliverResponse:
        """The response to one request, now or once its delivery has been answered."""
        request_id = request.id
        if request.group:
            grouped = self._deliver_group(request)
            if isinstance(grouped, tuple):
                return relay_pb2.DeliverResponse(statuses=map(_status, grouped), id=request_id)
            return _then(
                grouped,
                lambda outcomes: relay_pb2.DeliverResponse(
                    statuses=map(_status, outcomes), id=request_id
                ),
            )
        single = self._deliver(request)
        if isinstance(single, Outcome):
            return relay_pb2.DeliverResponse(status=_status(single), id=request_id)
        return _then(
            single,
            lambda outcome: relay_pb2.DeliverResponse(status=_status(outcome), id=request_id),
        )

    async def Deliver(  # noqa: N802  (gRPC method name)
        self, request: relay_pb2.DeliverRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.DeliverResponse:
        answer = self._answer(request)
        return answer if isinstance(answer, relay_pb2.DeliverResponse) else await answer

    async def DeliverStream(  # noqa: N802
        self,
        request_iterator: AsyncIterator[relay_pb2.DeliverBatch],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[relay_pb2.DeliverOutcomes]:
        answers: asyncio.Queue[relay_pb2.DeliverResponse | None] = asyncio.Queue()
        pending: set[asyncio.Future[relay_pb2.DeliverResponse]] = set()

        def answered(future: asyncio.Future[relay_pb2.DeliverResponse]) -> None:
            pending.discard(future)
            answers.put_nowait(future.result())

        async def read() -> None:
            async for batch in request_iterator:
                for request in batch.requests:
                    answer = self._answer(request)
                    if isinstance(answer, relay_pb2.DeliverResponse):
                        answers.put_nowait(answer)
                        continue
                    pending.add(answer)
                    answer.add_done_callback(answered)
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            answers.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while True:
                first = await answers.get()
                if first is None:
                    return
                batch = [first]
                finished = False
                while not answers.empty():
                    item = answers.get_nowait()
                    if item is None:
                        finished = True
                        break
                    batch.append(item)
                yield relay_pb2.DeliverOutcomes(responses=batch)
                if finished:
                    return
        finally:
            reader.cancel()

    async def Submit(  # noqa: N802
        self, request: relay_pb2.SubmitRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.SubmitResponse:
        try:
            payload = parse_payload(request.payload)
            element = parse_message(payload.control)
        except ApexError as exc:
            return relay_pb2.SubmitResponse(status=_status(Outcome(int(exc.code), str(exc))))
        if not isinstance(element, Data):
            return relay_pb2.SubmitResponse(
                status=_status(
                    Outcome(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "Submit carries one data element")
                )
            )
        if str(element.originator.identity) != request.originator:
            return relay_pb2.SubmitResponse(
                status=_status(
                    Outcome(ApexReplyCode.NOT_AUTHORIZED, "originator differs from the submitter")
                )
            )
        error = self._router.originate(element, payload, request.payload)
        if error is not None:
            return relay_pb2.SubmitResponse(status=_status(Outcome(int(error.code), error.text)))
        return relay_pb2.SubmitResponse(status=_status(Outcome(ApexReplyCode.SUCCESS)))

    async def TerminateAttachment(  # noqa: N802
        self, request: relay_pb2.TerminateAttachmentRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.TerminateAttachmentResponse:
        held = self._held_here(request.endpoint)
        if held is None:
            return relay_pb2.TerminateAttachmentResponse(terminated=False)
        channel, attachment = held
        # attachOverride (RFC 3342 section 1): the overridden application's answer is not
        # awaited, the overriding attach proceeds concurrently once the endpoint is free.
        await channel.terminate(
            attachment,
            request.code or ApexReplyCode.SUCCESS,
            request.text,
            wait=request.code != OVERRIDE_CODE,
        )
        return relay_pb2.TerminateAttachmentResponse(terminated=True)

    async def DrainHeld(  # noqa: N802
        self, request: relay_pb2.DrainHeldRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.DrainHeldResponse:
        held = self._held_here(request.endpoint)
        if held is None or self._router.holder is None:
            return relay_pb2.DrainHeldResponse(draining=False)
        self._router.attached_ready(held[1].endpoint)
        return relay_pb2.DrainHeldResponse(draining=True)

    def _held_here(self, text: str) -> tuple[ApexChannel, Attachment] | None:
        """The attachment of endpoint ``text`` on this pod, None when it is not here (or
        ``text`` is no endpoint)."""
        try:
            return self._router.local.get(Endpoint.parse(text))
        except EndpointError:
            return None
