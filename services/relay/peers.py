"""Pod-to-pod delivery inside one administrative domain (gRPC ``DeliverStream``).

Data for an endpoint attached to another relay pod goes to that pod, which sends it on
the endpoint's APEX channel. One long-lived stream per peer pod keeps deliveries in the
order they were dispatched and costs no per-call setup; responses carry the request id,
and plain successes (nearly all of them) come back as packed ids (:data:`PACKED_OUTCOMES`).
A broken stream fails its pending deliveries with 421 (service not available) and is
reopened by the next delivery.

A gRPC stream message costs far more than the deliveries in it (a message alone costs
the sender and the receiver about a hundred microseconds of CPU each, the request in it
about one): every delivery queued while the stream's writer waits for its turn goes out
in the same :class:`DeliverBatch`, built in place as deliveries arrive, and cut at
:data:`BATCH_OCTETS` so that no message nears the gRPC limit.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Final

import grpc

from apexmesh.aio.tasks import stop_task
from apexmesh.apex.endpoint import Endpoint
from apexmesh.beep.limits import MAX_MESSAGE_OCTETS
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from apexmesh.ops.logs import correlation_id
from apexmesh.relay.outcomes import DELIVERED, POD_UNAVAILABLE, Outcome, outcome_of
from apexmesh.rpc.channels import internal_channel
from services.relay.futures import resolver
from services.relay.grouping import Group

_log = logging.getLogger(__name__)

#: Payload octets after which a batch is sent and the next deliveries start another: a
#: stream message stays far below the gRPC message limit whatever is queued.
BATCH_OCTETS = 1 << 20

#: Deliveries in flight on one stream (sent, not answered) before senders wait for room:
#: the stream, the peer pod and this pod hold no more than that for each other.
MAX_IN_FLIGHT_PER_STREAM = 8192

#: Seconds a TerminateAttachment call to another pod may take.
TERMINATE_TIMEOUT_SECONDS = 5.0

UNAVAILABLE = POD_UNAVAILABLE

#: Call metadata of a DeliverStream whose caller reads ``DeliverOutcomes.delivered``
#: (plain successes as packed ids): a pod answers that way only when asked, so pods of
#: two versions keep working together during a rolling upgrade.
PACKED_OUTCOMES: Final = ("apexmesh-outcomes", "packed")

#: Call metadata of a DeliverStream whose caller reads ``DeliverOutcomes.taken``: the
#: answering pod says when a delivery is queued on the endpoint's channel (custody,
#: services/relay/jobs.py), before the endpoint answers. Asked for, like
#: :data:`PACKED_OUTCOMES`, so that pods of two versions keep working together.
CUSTODY_TAKEN: Final = ("apexmesh-custody", "taken")

#: Called with the outcome of one delivery.
Settle = Callable[[Outcome], None]
#: Called once the peer pod has queued a delivery on the endpoint's channel.
Taken = Callable[[], None]
#: Called with the outcomes of a group, one per recipient in the group's order.
SettleGroup = Callable[[tuple[Outcome, ...]], None]


class _Stream:
    """One DeliverStream to one peer pod."""

    def __init__(self, address: str, options: list[tuple[str, int]], max_in_flight: int) -> None:
        self.address = address
        self.max_in_flight = max_in_flight
        #: Senders waiting for room (see :meth:`room`).
        self._senders: deque[asyncio.Future[None]] = deque()
        self.channel = internal_channel(address, options=options)
        self._stub = relay_pb2_grpc.RelayServiceStub(self.channel)
        #: Batches cut and not yet handed to gRPC, then the batch being filled.
        self._ready: deque[relay_pb2.DeliverBatch] = deque()
        self._batch = relay_pb2.DeliverBatch()
        self._batch_octets = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._pending: dict[int, Settle] = {}
        #: Deliveries whose custody a caller awaits (see :data:`CUSTODY_TAKEN`).
        self._custody: dict[int, Taken] = {}
        self._groups: dict[int, tuple[SettleGroup, int]] = {}
        self._ids = itertools.count(1)
        self.loop = asyncio.get_running_loop()
        self._task = self.loop.create_task(self._run())
        self.broken = False

    @property
    def in_flight(self) -> int:
        return len(self._pending) + len(self._groups)

    def has_room(self) -> bool:
        return self.in_flight < self.max_in_flight and not self._senders

    def room(self) -> asyncio.Future[None] | None:
        """None when a delivery may be sent now, else a future done once it may."""
        if self.has_room() or self.broken:
            return None
        waiter: asyncio.Future[None] = self.loop.create_future()
        self._senders.append(waiter)
        return waiter

    def _wake_senders(self) -> None:
        room = self.max_in_flight - self.in_flight
        waiting = self._senders
        while waiting and (room > 0 or self.broken):
            waiter = waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                room -= 1

    def send(
        self,
        recipient: str,
        originator: str,
        payload: bytes,
        settle: Settle,
        taken: Taken | None = None,
    ) -> None:
        """Queue one delivery; ``settle`` gets its outcome and ``taken`` is called once the
        peer pod queued it for the endpoint (from the loop, later)."""
        request_id = next(self._ids)
        self._pending[request_id] = settle
        if taken is not None:
            self._custody[request_id] = taken
        self._room(len(payload))
        self._batch.requests.add(
            recipient=recipient,
            originator=originator,
            payload=payload,
            id=request_id,
            correlation_id=correlation_id.get(),
        )
        self._wake.set()

    def send_group(
        self, group: Group, originator: str, settle: SettleGroup, taken: Taken | None = None
    ) -> None:
        """Queue one data for several recipients attached to the peer pod."""
        request_id = next(self._ids)
        self._groups[request_id] = (settle, len(group.recipients))
        if taken is not None:
            self._custody[request_id] = taken
        self._room(len(group.head) + len(group.tail) + sum(map(len, group.elements)))
        self._batch.requests.add(
            originator=originator,
            id=request_id,
            group=[str(endpoint) for endpoint in group.recipients],
            group_elements=group.elements,
            head=group.head,
            tail=group.tail,
            correlation_id=correlation_id.get(),
        )
        self._wake.set()

    def _room(self, octets: int) -> None:
        """Cut the batch being filled when ``octets`` more would take it past the limit."""
        if self._batch_octets + octets > BATCH_OCTETS and self._batch.requests:
            self._cut()
        self._batch_octets += octets

    def _cut(self) -> None:
        """Queue the batch being filled for sending and start another."""
        self._ready.append(self._batch)
        self._batch = relay_pb2.DeliverBatch()
        self._batch_octets = 0

    async def _outgoing(self) -> AsyncIterator[relay_pb2.DeliverBatch]:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._batch.requests:
                self._cut()
            while self._ready:
                yield self._ready.popleft()
            if self._closing:
                return

    async def _run(self) -> None:
        try:
            call = self._stub.DeliverStream(
                self._outgoing(), metadata=(PACKED_OUTCOMES, CUSTODY_TAKEN)
            )
            async for outcomes in call:
                custody = self._custody
                if custody:
                    for request_id in outcomes.taken:
                        taken = custody.pop(request_id, None)
                        if taken is not None:
                            taken()
                pending = self._pending
                for request_id in outcomes.delivered:
                    settle = pending.pop(request_id, None)
                    if settle is not None:
                        custody.pop(request_id, None)
                        settle(DELIVERED)
                for response in outcomes.responses:
                    custody.pop(response.id, None)
                    settle = pending.pop(response.id, None)
                    if settle is not None:
                        settle(outcome_of(response.status))
                    else:
                        self._settle_group(response)
                if self._senders:
                    self._wake_senders()
        except grpc.aio.AioRpcError as exc:
            _log.warning("delivery stream to %s broke: %s", self.address, exc.code())
        finally:
            self.broken = True
            self._custody = {}
            pending, self._pending = self._pending, {}
            for settle in pending.values():
                settle(UNAVAILABLE)
            groups, self._groups = self._groups, {}
            for settle_group, size in groups.values():
                settle_group((UNAVAILABLE,) * size)
            self._wake_senders()  # they send on a new stream

    def _settle_group(self, response: relay_pb2.DeliverResponse) -> None:
        entry = self._groups.pop(response.id, None)
        if entry is not None:
            entry[0](tuple(outcome_of(status) for status in response.statuses))

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        await stop_task(self._task)
        await self.channel.close()


class PeerDelivery:
    """Delivery streams to the other relay pods of the domain, one per address.

    ``max_message`` is the largest payload one delivery may carry (the relay's BEEP
    message limit): the channels admit a stream message that size and some.
    """

    def __init__(
        self,
        max_message: int = MAX_MESSAGE_OCTETS,
        *,
        max_in_flight: int = MAX_IN_FLIGHT_PER_STREAM,
    ) -> None:
        self.max_in_flight = max_in_flight
        #: The largest stream message, either way: one delivery of the largest payload
        #: (batches are cut before they pass :data:`BATCH_OCTETS`), with room to spare.
        self.max_message_bytes = max_message + BATCH_OCTETS
        self._options = [
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
        ]
        self._streams: dict[str, _Stream] = {}
        self._calls: set[asyncio.Task[None]] = set()

    def send(
        self,
        address: str,
        recipient: Endpoint,
        originator: Endpoint,
        payload: bytes,
        settle: Settle,
        taken: Taken | None = None,
    ) -> None:
        """Deliver to the pod at ``address``; ``settle`` gets the outcome (no future: the
        per-data path of the relay), ``taken`` is told when that pod has queued it."""
        self._stream(address).send(str(recipient), str(originator), payload, settle, taken)

    def deliver(
        self,
        address: str,
        recipient: Endpoint,
        originator: Endpoint,
        payload: bytes,
        taken: Taken | None = None,
    ) -> asyncio.Future[Outcome]:
        """:meth:`send` with the outcome as a future."""
        stream = self._stream(address)
        future: asyncio.Future[Outcome] = stream.loop.create_future()
        stream.send(str(recipient), str(originator), payload, resolver(future), taken)
        return future

    def deliver_group(
        self, address: str, group: Group, originator: Endpoint, taken: Taken | None = None
    ) -> asyncio.Future[tuple[Outcome, ...]]:
        """Deliver one data to several endpoints attached to the pod at ``address``; the
        outcomes come back one per endpoint of the group, in its order."""
        stream = self._stream(address)
        future: asyncio.Future[tuple[Outcome, ...]] = stream.loop.create_future()
        stream.send_group(group, str(originator), resolver(future), taken)
        return future

    def _stream(self, address: str) -> _Stream:
        stream = self._streams.get(address)
        if stream is None or stream.broken:
            if stream is not None:
                asyncio.get_running_loop().create_task(stream.close())
            stream = self._streams[address] = _Stream(address, self._options, self.max_in_flight)
        return stream

    def has_room(self, address: str) -> bool:
        """True when a delivery to the pod at ``address`` may be sent now."""
        stream = self._streams.get(address)
        return stream is None or stream.broken or stream.has_room()

    def room(self, address: str) -> asyncio.Future[None] | None:
        """None when a delivery to the pod at ``address`` may be sent now, else a future
        done once it may (the stream's bound on deliveries in flight)."""
        stream = self._streams.get(address)
        return None if stream is None else stream.room()

    def drain(self, address: str, endpoint: Endpoint) -> None:
        """Ask the pod at ``address`` to deliver what is held for ``endpoint`` (gRPC
        ``DrainHeld``), in the background: a lost request only delays the data until that
        pod's next drain, it never loses it."""
        stub = relay_pb2_grpc.RelayServiceStub(self._stream(address).channel)

        async def call() -> None:
            try:
                await stub.DrainHeld(
                    relay_pb2.DrainHeldRequest(endpoint=str(endpoint)),
                    timeout=TERMINATE_TIMEOUT_SECONDS,
                )
            except grpc.aio.AioRpcError as exc:
                _log.warning("drain request for %s to %s failed: %s", endpoint, address, exc.code())

        task = asyncio.get_running_loop().create_task(call())
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def terminate(self, address: str, endpoint: Endpoint, code: int, text: str) -> bool:
        """Ask the pod at ``address`` to terminate its attachment of ``endpoint``
        (gRPC ``TerminateAttachment``); False when it does not hold it or cannot be asked."""
        channel = internal_channel(address)
        try:
            stub = relay_pb2_grpc.RelayServiceStub(channel)
            response = await stub.TerminateAttachment(
                relay_pb2.TerminateAttachmentRequest(endpoint=str(endpoint), code=code, text=text),
                timeout=TERMINATE_TIMEOUT_SECONDS,
            )
        except grpc.aio.AioRpcError as exc:
            _log.warning("terminate of %s at %s failed: %s", endpoint, address, exc.code())
            return False
        finally:
            await channel.close()
        return bool(response.terminated)

    async def close(self) -> None:
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            await stream.close()
