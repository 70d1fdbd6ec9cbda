"""Pod-to-pod delivery inside one administrative domain (gRPC ``DeliverStream``).

Data for an endpoint attached to another relay pod goes to that pod, which sends it on
the endpoint's APEX channel. One long-lived stream per peer pod keeps deliveries in the
order they were dispatched and costs no per-call setup; responses carry the request id.
A broken stream fails its pending deliveries with 421 (service not available) and is
reopened by the next delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator

import grpc

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from services.relay.grouping import Group
from services.relay.outcomes import Outcome

_log = logging.getLogger(__name__)

#: Deliveries sent in one stream message at most (what is queued at once, up to this).
MAX_BATCH = 256

#: Seconds a TerminateAttachment call to another pod may take.
TERMINATE_TIMEOUT_SECONDS = 5.0

UNAVAILABLE = Outcome(ApexReplyCode.SERVICE_NOT_AVAILABLE, "relay pod not available")


class _Stream:
    """One DeliverStream to one peer pod."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.channel = grpc.aio.insecure_channel(address)
        self._stub = relay_pb2_grpc.RelayServiceStub(self.channel)
        self._requests: asyncio.Queue[relay_pb2.DeliverRequest | None] = asyncio.Queue()
        self._pending: dict[int, asyncio.Future[Outcome]] = {}
        self._groups: dict[int, tuple[asyncio.Future[tuple[Outcome, ...]], int]] = {}
        self._ids = itertools.count(1)
        self._task = asyncio.get_running_loop().create_task(self._run())
        self.broken = False

    def deliver(self, recipient: str, originator: str, payload: bytes) -> asyncio.Future[Outcome]:
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        request_id = next(self._ids)
        self._pending[request_id] = future
        self._requests.put_nowait(
            relay_pb2.DeliverRequest(
                recipient=recipient, originator=originator, payload=payload, id=request_id
            )
        )
        return future

    def deliver_group(self, group: Group, originator: str) -> asyncio.Future[tuple[Outcome, ...]]:
        future: asyncio.Future[tuple[Outcome, ...]] = asyncio.get_running_loop().create_future()
        request_id = next(self._ids)
        self._groups[request_id] = (future, len(group.recipients))
        self._requests.put_nowait(
            relay_pb2.DeliverRequest(
                originator=originator,
                id=request_id,
                group=[str(endpoint) for endpoint in group.recipients],
                group_elements=group.elements,
                head=group.head,
                tail=group.tail,
            )
        )
        return future

    async def _outgoing(self) -> AsyncIterator[relay_pb2.DeliverBatch]:
        while True:
            request = await self._requests.get()
            if request is None:
                return
            batch = [request]
            while len(batch) < MAX_BATCH and not self._requests.empty():
                queued = self._requests.get_nowait()
                if queued is None:
                    yield relay_pb2.DeliverBatch(requests=batch)
                    return
                batch.append(queued)
            yield relay_pb2.DeliverBatch(requests=batch)

    async def _run(self) -> None:
        try:
            call = self._stub.DeliverStream(self._outgoing())
            async for outcomes in call:
                for response in outcomes.responses:
                    if response.statuses:
                        self._settle_group(response)
                        continue
                    future = self._pending.pop(response.id, None)
                    if future is not None and not future.done():
                        future.set_result(Outcome(response.status.code, response.status.text))
        except grpc.aio.AioRpcError as exc:
            _log.warning("delivery stream to %s broke: %s", self.address, exc.code())
        finally:
            self.broken = True
            for future in self._pending.values():
                if not future.done():
                    future.set_result(UNAVAILABLE)
            self._pending.clear()
            for group, size in self._groups.values():
                if not group.done():
                    group.set_result((UNAVAILABLE,) * size)
            self._groups.clear()

    def _settle_group(self, response: relay_pb2.DeliverResponse) -> None:
        entry = self._groups.pop(response.id, None)
        if entry is None or entry[0].done():
            return
        entry[0].set_result(
            tuple(Outcome(status.code, status.text) for status in response.statuses)
        )

    async def close(self) -> None:
        self._requests.put_nowait(None)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self.channel.close()


class PeerDelivery:
    """Delivery streams to the other relay pods of the domain, one per address."""

    def __init__(self) -> None:
        self._streams: dict[str, _Stream] = {}
        self._calls: set[asyncio.Task[None]] = set()

    def deliver(
        self, address: str, recipient: Endpoint, originator: Endpoint, payload: bytes
    ) -> asyncio.Future[Outcome]:
        return self._stream(address).deliver(str(recipient), str(originator), payload)

    def deliver_group(
        self, address: str, group: Group, originator: Endpoint
    ) -> asyncio.Future[tuple[Outcome, ...]]:
        """Deliver one data to several endpoints attached to the pod at ``address``; the
        outcomes come back one per endpoint of the group, in its order."""
        return self._stream(address).deliver_group(group, str(originator))

    def _stream(self, address: str) -> _Stream:
        stream = self._streams.get(address)
        if stream is None or stream.broken:
            if stream is not None:
                asyncio.get_running_loop().create_task(stream.close())
            stream = self._streams[address] = _Stream(address)
        return stream

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
        channel = grpc.aio.insecure_channel(address)
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
