"""The presence service's I/O around :class:`~apexmesh.apex.presence_core.PresenceCore`.

:class:`PresenceService` runs one operation at a time against the core (one lock): parse
(500/501/553), steps 1-2 in the core (553, 550), the ``presence:*`` token through the
access service (537; an access service that cannot be reached is 451), the operation,
then the state is saved to Redis and only then are the answers submitted through the
relays, in the order the core produced them (RFC 3343 section 2.3: the reply, then the
notifies). :meth:`PresenceService.tick` is called by the app's timer loop with the
current time: it ends durations (section 4.2 step 6.3) and turns lapsed attachment
leases into detaches.

:class:`PresenceEndpointServicer` is ``WellKnownEndpoint.Deliver`` (data addressed to
``apex=presence@DOMAIN``); :class:`PresenceServicer` is ``apexmesh.contracts.presence.v1``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import grpc
from prometheus_client import CollectorRegistry, Counter

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import parse_payload, resolve_content
from apexmesh.apex.data import Data, DataContent, Originator, Recipient
from apexmesh.apex.elements import Reply, Terminate, parse_message
from apexmesh.apex.endpoint import Endpoint, EndpointError, well_known
from apexmesh.apex.errors import ApexError
from apexmesh.apex.presence import (
    CONTENT_NAME,
    PUBLISH_TOKEN,
    SERVICE_NAME,
    SUBSCRIBE_TOKEN,
    WATCH_TOKEN,
    Capability,
    PresenceTuple,
    Publish,
    Subscribe,
    Watch,
    parse_operation,
)
from apexmesh.apex.presence_core import FOREVER, Outbound, PresenceCore, refusal
from apexmesh.beep.mime import beep_xml
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.endpoint.v1 import endpoint_pb2
from apexmesh.contracts.presence.v1 import presence_pb2, presence_pb2_grpc
from apexmesh.rpc.access import AccessClient
from apexmesh.rpc.endpoint import WellKnownEndpointServicer
from apexmesh.rpc.relay import RelaySubmitter
from apexmesh.store.presence import PresenceStore

_log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

_TOKENS = {Subscribe: SUBSCRIBE_TOKEN, Watch: WATCH_TOKEN, Publish: PUBLISH_TOKEN}


@dataclass(frozen=True, slots=True)
class PresenceMetrics:
    operations: Counter
    sent: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> PresenceMetrics:
        return cls(
            operations=Counter(
                "apexmesh_presence_operations",
                "Operations handled, by operation and reply code.",
                ["operation", "code"],
                registry=registry,
            ),
            sent=Counter(
                "apexmesh_presence_sent",
                "Data originated by apex=presence, by relay answer code.",
                ["code"],
                registry=registry,
            ),
        )


def outbound_payload(domain: str, item: Outbound) -> tuple[str, bytes]:
    """(originator, BEEP payload) of one element sent as ``apex=presence@domain``."""
    originator = well_known(SERVICE_NAME, domain)
    data = Data(
        content="#" + CONTENT_NAME,
        originator=Originator(identity=originator),
        recipients=(Recipient(identity=item.recipient),),
        data_content=DataContent(name=CONTENT_NAME, content=item.content),
    )
    return str(originator), beep_xml(data.to_xml())


class PresenceService:
    """The operations of RFC 3343 section 4 over one core, store, access and relays."""

    def __init__(
        self,
        core: PresenceCore,
        store: PresenceStore,
        access: AccessClient,
        relays: RelaySubmitter,
        metrics: PresenceMetrics,
        clock: Clock,
    ) -> None:
        self.core = core
        self._store = store
        self._access = access
        self._relays = relays
        self._metrics = metrics
        self._clock = clock
        self._lock = asyncio.Lock()

    async def send(self, items: Sequence[Outbound]) -> None:
        for item in items:
            domain = item.recipient.domain if item.recipient.domain in self.core.domains else None
            origin_domain = domain or min(self.core.domains)
            originator, payload = outbound_payload(origin_domain, item)
            outcome = await self._relays.submit(originator, payload, key=str(item.recipient))
            self._metrics.sent.labels(str(outcome.code)).inc()
            if outcome.code != ApexReplyCode.SUCCESS:
                _log.info("to %s: relay answered %d %s", item.recipient, outcome.code, outcome.text)

    async def _commit_and_send(self, items: Sequence[Outbound]) -> None:
        await self._store.save(self.core, self.core.take_changes())
        await self.send(items)

    async def _authorize(
        self, subject: Endpoint, originator: Endpoint, token: str, trans_id: int
    ) -> None:
        """Step 3 (4 for publish): the subject's access entry must hold ``token``."""
        try:
            decision, _ = await self._access.check(str(subject), str(originator), token)
        except grpc.aio.AioRpcError as exc:
            _log.warning("access check failed: %s %s", exc.code(), exc.details())
            raise ApexError(
                ApexReplyCode.ACTION_ABORTED, "access service unavailable", trans_id=trans_id
            ) from None
        if not decision.allowed:
            raise ApexError(decision.code, decision.text or "access denied", trans_id=trans_id)

    async def handle(self, originator: Endpoint, content: bytes) -> int:
        """Handle one operation from ``originator``; returns the reply code sent."""
        name = "unknown"
        try:
            op = parse_operation(content)
            name = type(op).__name__.lower()
            if isinstance(op, Publish):
                mismatch = self.core.check_publisher(op)
                if mismatch is not None:
                    await self.send([Outbound(originator, mismatch.to_xml())])
                    self._metrics.operations.labels(name, str(mismatch.code)).inc()
                    return mismatch.code
            if not isinstance(op, Terminate):
                self.core.check_subject(op.publisher, op.trans_id)
                await self._authorize(op.publisher, originator, _TOKENS[type(op)], op.trans_id)
            async with self._lock:
                now = self._clock()
                try:
                    if isinstance(op, Subscribe):
                        out = self.core.subscribe(originator, op, now)
                    elif isinstance(op, Watch):
                        out = self.core.watch(originator, op, now)
                    elif isinstance(op, Publish):
                        out = self.core.publish(originator, op, now)
                    else:
                        out = self.core.terminate(originator, op)
                except ApexError:
                    # Step 4 (the previous subscribe or watch silently terminated) comes
                    # before step 5's 555: what changed is saved even on refusal.
                    await self._store.save(self.core, self.core.take_changes())
                    raise
                await self._commit_and_send(out)
        except ApexError as exc:
            await self.send([Outbound(originator, refusal(exc))])
            self._metrics.operations.labels(name, str(int(exc.code))).inc()
            return int(exc.code)
        self._metrics.operations.labels(name, "250").inc()
        return 250

    async def tick(self) -> None:
        """End the durations that are over (terminate + watchers' notify)."""
        async with self._lock:
            now = self._clock()
            timer = self.core.get_timer()
            if timer is None or timer > now:
                return
            await self._commit_and_send(self.core.handle_timer(now))

    async def check_leases(self) -> None:
        """Attachments whose lease lapsed (the relay pod died) are detaches."""
        gone = await self._store.lapsed(sorted(self.core.attached, key=str))
        if not gone:
            return
        async with self._lock:
            now = self._clock()
            out: list[Outbound] = []
            for endpoint in gone:
                out += self.core.endpoint_detached(endpoint, now)
            await self._commit_and_send(out)

    async def mesh_change(self, change: Callable[[datetime], list[Outbound]]) -> None:
        async with self._lock:
            try:
                out = change(self._clock())
            except ApexError:
                await self._store.save(self.core, self.core.take_changes())
                raise
            await self._commit_and_send(out)


# --------------------------------------------------------------------------- servicers


def _status(code: int, text: str = "") -> common_pb2.ApexStatus:
    return common_pb2.ApexStatus(code=int(code), text=text)


def _data(message: object) -> Data:
    if not isinstance(message, Data):
        raise ApexError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "payload is not data")
    return message


class PresenceEndpointServicer(WellKnownEndpointServicer):
    """``WellKnownEndpoint.Deliver`` for data addressed to ``apex=presence@DOMAIN``.

    The delivery itself is answered 250 once the operation is handled (its outcome goes
    to the originator as a ``reply``); data that is not APEX data at all, or whose
    content cannot be found, is answered with its code (500/501/550/553).
    """

    def __init__(self, service: PresenceService) -> None:
        self._service = service

    async def Deliver(  # noqa: N802 - generated servicer method name
        self, request: endpoint_pb2.EndpointDeliverRequest, _context: grpc.aio.ServicerContext
    ) -> endpoint_pb2.EndpointDeliverResponse:
        try:
            originator = Endpoint.parse(request.originator)
        except EndpointError as exc:
            return endpoint_pb2.EndpointDeliverResponse(status=_status(exc.code, str(exc)))
        try:
            payload = parse_payload(bytes(request.payload))
            content = resolve_content(_data(parse_message(payload.control)), payload.parts)
            body = content.content if isinstance(content, DataContent) else content.body
        except ApexError as exc:
            # The operation cannot even be found: tell the originator, who sent it.
            await self._service.send(
                [
                    Outbound(
                        originator,
                        Reply(code=int(exc.code), trans_id=None, text=str(exc)[:200]).to_xml(),
                    )
                ]
            )
            return endpoint_pb2.EndpointDeliverResponse(status=_status(250))
        await self._service.handle(originator, body)
        return endpoint_pb2.EndpointDeliverResponse(status=_status(250))


def _tuple(message: presence_pb2.Tuple) -> PresenceTuple:
    return PresenceTuple(
        destination=message.destination,
        available_until=message.available_until or FOREVER,
        tuple_info=message.tuple_info,
        capabilities=tuple(
            Capability(baseline=c.baseline, text=c.text) for c in message.capabilities
        ),
    )


class PresenceServicer(presence_pb2_grpc.PresenceServiceServicer):
    """``apexmesh.contracts.presence.v1``: tuples from other services, attachments from
    the relays. Refusals are answered with their code (553 outside the domains, 501 for
    a malformed tuple), never raised."""

    def __init__(self, service: PresenceService) -> None:
        self._service = service

    async def _run(
        self, change: Callable[[datetime], list[Outbound]]
    ) -> presence_pb2.PresenceResponse:
        try:
            await self._service.mesh_change(change)
        except ApexError as exc:
            return presence_pb2.PresenceResponse(status=_status(exc.code, str(exc)[:200]))
        return presence_pb2.PresenceResponse(status=_status(250))

    @staticmethod
    def _endpoint(text: str) -> Endpoint:
        try:
            return Endpoint.parse(text)
        except EndpointError as exc:
            raise ApexError(exc.code, str(exc)) from None

    async def SetTuples(  # noqa: N802
        self, request: presence_pb2.SetTuplesRequest, _context: grpc.aio.ServicerContext
    ) -> presence_pb2.PresenceResponse:
        try:
            publisher = self._endpoint(request.publisher)
            tuples = [_tuple(t) for t in request.tuples]
        except ApexError as exc:
            return presence_pb2.PresenceResponse(status=_status(exc.code, str(exc)[:200]))
        core = self._service.core
        return await self._run(lambda now: core.set_tuples(publisher, tuples, now))

    async def RemoveTuples(  # noqa: N802
        self, request: presence_pb2.RemoveTuplesRequest, _context: grpc.aio.ServicerContext
    ) -> presence_pb2.PresenceResponse:
        try:
            publisher = self._endpoint(request.publisher)
        except ApexError as exc:
            return presence_pb2.PresenceResponse(status=_status(exc.code, str(exc)[:200]))
        core = self._service.core
        destinations = list(request.destinations)
        return await self._run(lambda now: core.remove_tuples(publisher, destinations, now))

    async def EndpointAttached(  # noqa: N802
        self, request: presence_pb2.EndpointEvent, _context: grpc.aio.ServicerContext
    ) -> presence_pb2.PresenceResponse:
        try:
            endpoint = self._endpoint(request.endpoint)
        except ApexError as exc:
            return presence_pb2.PresenceResponse(status=_status(exc.code, str(exc)[:200]))
        core = self._service.core
        return await self._run(lambda now: core.endpoint_attached(endpoint, now))

    async def EndpointDetached(  # noqa: N802
        self, request: presence_pb2.EndpointEvent, _context: grpc.aio.ServicerContext
    ) -> presence_pb2.PresenceResponse:
        try:
            endpoint = self._endpoint(request.endpoint)
        except ApexError as exc:
            return presence_pb2.PresenceResponse(status=_status(exc.code, str(exc)[:200]))
        core = self._service.core
        return await self._run(lambda now: core.endpoint_detached(endpoint, now))

    async def GetPresence(  # noqa: N802
        self, request: presence_pb2.GetPresenceRequest, _context: grpc.aio.ServicerContext
    ) -> presence_pb2.GetPresenceResponse:
        try:
            publisher = self._endpoint(request.publisher)
        except ApexError as exc:
            return presence_pb2.GetPresenceResponse(status=_status(exc.code, str(exc)[:200]))
        entry = self._service.core.entries.get(publisher)
        return presence_pb2.GetPresenceResponse(
            status=_status(250), presence=b"" if entry is None else entry.to_xml()
        )


__all__ = [
    "PresenceEndpointServicer",
    "PresenceMetrics",
    "PresenceService",
    "PresenceServicer",
    "outbound_payload",
]
