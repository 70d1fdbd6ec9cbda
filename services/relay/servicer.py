"""The relay's gRPC servicer: deliveries from other pods, data from services, terminate.

``Deliver``/``DeliverStream`` send a ready-made payload to an endpoint attached to this
pod (the caller built it; nothing is re-parsed here), or a group of recipients to the
channels they are attached over (services/relay/grouping.py). ``Submit`` is how the domain's
APEX services originate data (RFC 3340 section 6). ``TerminateAttachment`` ends an
attachment this pod holds with a relay-initiated terminate (section 4.4.3).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc

from apexmesh.apex.associations import Attachment
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import parse_payload
from apexmesh.apex.data import Data
from apexmesh.apex.elements import parse_message
from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.apex.errors import ApexError
from apexmesh.apex.party import OVERRIDE_CODE
from apexmesh.common.cache import BoundedCache
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from apexmesh.ops.logs import correlation_id
from apexmesh.relay.outcomes import NOT_HERE, Outcome
from apexmesh.rpc.batched import serve_batched
from services.relay.flow import Taken
from services.relay.grouping import Group, deliver_here
from services.relay.peers import CUSTODY_TAKEN, PACKED_OUTCOMES
from services.relay.router import Router

if TYPE_CHECKING:
    from services.relay.edge import ApexChannel


#: Submissions whose answer a retry with the same ``submission_id`` gets instead of a
#: second relaying: a pubsub pod retries a fan-out cut off mid-flight within seconds, and
#: a busy pod takes tens of thousands of submissions a minute.
SUBMISSIONS_REMEMBERED = 65_536
#: Seconds a submission id is remembered: retries come within seconds; an id seen again
#: much later is a new submission that happens to reuse it, and is relayed.
SUBMISSION_MEMORY_SECONDS = 300.0
#: Longest submission id accepted (a retry key, not content).
MAX_SUBMISSION_ID = 256


def _status(outcome: Outcome) -> common_pb2.ApexStatus:
    return outcome.to_status()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Retrieve how a stream's reader ended (a broken stream is the caller's to see)."""
    if not task.cancelled():
        task.exception()


class _Answers:
    """The responses of one DeliverStream, gathered into one DeliverOutcomes per turn of
    its writer: a stream message costs far more than a response in it, and answers of a
    burst of deliveries arrive together (peers.py says the same of requests)."""

    def __init__(self, *, packed: bool, custody: bool = False) -> None:
        #: Plain successes go to ``delivered`` rather than a response each (the caller
        #: asked for it, see services/relay/peers.py PACKED_OUTCOMES).
        self.packed = packed
        #: The caller wants to know when a delivery is queued here (CUSTODY_TAKEN).
        self.custody = custody
        self.batch = relay_pb2.DeliverOutcomes()
        self.wake = asyncio.Event()
        #: Deliveries sent on and not answered yet.
        self.waiting = 0
        #: True once the requests ended: the stream ends when nothing is waiting.
        self.finished = False

    def single(self, request_id: int, outcome: Outcome) -> None:
        if self.packed and outcome.delivered and not outcome.text:
            self.batch.delivered.append(request_id)
        else:
            self.batch.responses.add(id=request_id, status=_status(outcome))
        self.wake.set()

    def taken(self, request_id: int) -> None:
        """The delivery is queued on the endpoint's channel here (custody)."""
        if self.custody:
            self.batch.taken.append(request_id)
            self.wake.set()

    def taken_when(self, request_id: int) -> Callable[[asyncio.Future[Taken]], None]:
        """A callback telling :meth:`taken` once a waiting delivery found room."""

        def decided(future: asyncio.Future[Taken]) -> None:
            if not future.cancelled() and future.result() is None:
                self.taken(request_id)

        return decided

    def group(self, request_id: int, outcomes: tuple[Outcome, ...]) -> None:
        self.batch.responses.add(id=request_id, statuses=map(_status, outcomes))
        self.wake.set()

    def single_later(self, request_id: int) -> Callable[[Outcome], None]:
        """The settle callback of a delivery sent on (see ``waiting``)."""
        self.waiting += 1

        def settle(outcome: Outcome) -> None:
            self.waiting -= 1
            self.single(request_id, outcome)

        return settle

    def group_later(self, request_id: int) -> Callable[[asyncio.Future[tuple[Outcome, ...]]], None]:
        self.waiting += 1

        def settle(future: asyncio.Future[tuple[Outcome, ...]]) -> None:
            self.waiting -= 1
            self.group(request_id, future.result())

        return settle

    def finish(self) -> None:
        self.finished = True
        self.wake.set()

    @property
    def empty(self) -> bool:
        """True when nothing was gathered since the last take."""
        batch = self.batch
        return not batch.responses and not batch.delivered and not batch.taken

    def take(self) -> relay_pb2.DeliverOutcomes | None:
        """The responses gathered since the last take, None when there are none."""
        if self.empty:
            return None
        batch, self.batch = self.batch, relay_pb2.DeliverOutcomes()
        return batch

    @property
    def done(self) -> bool:
        return self.finished and not self.waiting and self.empty


class RelayServicer(relay_pb2_grpc.RelayServiceServicer):
    """gRPC face of one relay pod."""

    def __init__(self, router: Router) -> None:
        self._router = router
        metrics = router.metrics
        self._from_pod = metrics.deliveries.labels("from-pod")
        self._metrics = metrics
        #: Answers of recent submissions by id (see :data:`SUBMISSIONS_REMEMBERED`).
        self._submissions: BoundedCache[str, asyncio.Future[relay_pb2.SubmitResponse]] = (
            BoundedCache("submissions", SUBMISSIONS_REMEMBERED)
        )

    def _deliver_group(
        self, request: relay_pb2.DeliverRequest, taken: Callable[[], None]
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
        self._from_pod.inc(len(recipients))
        return deliver_here(group, self._router.table, on_taken=taken)

    def _answer(self, request: relay_pb2.DeliverRequest, answers: _Answers) -> None:
        """Deliver one request; its response goes to ``answers`` now or once the
        endpoint has answered."""
        request_id = request.id
        if request.group:
            grouped = self._deliver_group(request, functools.partial(answers.taken, request_id))
            if isinstance(grouped, tuple):
                answers.group(request_id, grouped)
            else:
                grouped.add_done_callback(answers.group_later(request_id))
            return
        try:
            endpoint = Endpoint.parse(request.recipient)
        except EndpointError as exc:
            answers.single(request_id, Outcome(ApexReplyCode.PARAMETER_INVALID, str(exc)))
            return
        channel = self._router.table.channel_of(endpoint)
        if channel is None:
            answers.single(request_id, NOT_HERE)
            return
        self._from_pod.inc()
        queued = channel.queue_data(request.payload, answers.single_later(request_id))
        if queued is None:
            answers.taken(request_id)
        elif isinstance(queued, asyncio.Future):
            queued.add_done_callback(answers.taken_when(request_id))

    async def Deliver(  # noqa: N802  (gRPC method name)
        self, request: relay_pb2.DeliverRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.DeliverResponse:
        answers = _Answers(packed=False)
        self._answer(request, answers)
        while not answers.batch.responses:
            await answers.wake.wait()
            answers.wake.clear()
        return answers.batch.responses[0]

    async def DeliverStream(  # noqa: N802
        self,
        request_iterator: AsyncIterator[relay_pb2.DeliverBatch],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[relay_pb2.DeliverOutcomes]:
        metadata = tuple(context.invocation_metadata() or ())
        answers = _Answers(packed=PACKED_OUTCOMES in metadata, custody=CUSTODY_TAKEN in metadata)

        async def read() -> None:
            try:
                async for batch in request_iterator:
                    for request in batch.requests:
                        # Its log lines here carry the sender's id (apexmesh/ops/logs.py).
                        correlation_id.set(request.correlation_id)
                        self._answer(request, answers)
            finally:
                answers.finish()

        reader = asyncio.ensure_future(read())
        reader.add_done_callback(_retrieve)
        try:
            while not answers.done:
                await answers.wake.wait()
                answers.wake.clear()
                batch = answers.take()
                if batch is not None:
                    yield batch
        finally:
            reader.cancel()

    async def SubmitStream(  # noqa: N802
        self,
        request_iterator: AsyncIterator[common_pb2.CallBatch],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[common_pb2.CallBatch]:
        """Submit, many calls to one stream message (apexmesh/rpc/batched.py)."""
        async for batch in serve_batched(
            request_iterator, context, self.Submit, relay_pb2.SubmitRequest.FromString
        ):
            yield batch

    async def Submit(  # noqa: N802
        self, request: relay_pb2.SubmitRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.SubmitResponse:
        """Relay data a service originates; a retry (same ``submission_id``) is answered
        as the first attempt was, or will be, and relays nothing a second time."""
        submission = request.submission_id
        if not submission:
            return await self._submit(request)
        if len(submission) > MAX_SUBMISSION_ID:
            return relay_pb2.SubmitResponse(
                status=_status(Outcome(ApexReplyCode.PARAMETER_INVALID, "submission id too long"))
            )
        now = asyncio.get_running_loop().time()
        answer = self._submissions.get(submission, now)
        if answer is None:
            # A task of its own: a caller that gives up (its deadline) stops waiting,
            # not the relaying, whose answer its retry then gets.
            answer = asyncio.ensure_future(self._submit(request))
            answer.add_done_callback(_retrieve)
            self._submissions.put(submission, answer, expires=now + SUBMISSION_MEMORY_SECONDS)
        else:
            self._metrics.count(self._metrics.data, "resubmitted")
        return await asyncio.shield(answer)

    async def _submit(self, request: relay_pb2.SubmitRequest) -> relay_pb2.SubmitResponse:
        try:
            payload = parse_payload(request.payload)
            element = parse_message(payload.control, self._router.memo)
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
        try:
            # Answered once in custody (services/relay/jobs.py), or refused.
            await self._router.originate(element, payload, request.payload)
        except ApexError as exc:
            return relay_pb2.SubmitResponse(status=_status(Outcome(int(exc.code), str(exc))))
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
            return self._router.table.get(Endpoint.parse(text))
        except EndpointError:
            return None
