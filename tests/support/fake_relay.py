"""A relay pod's ``RelayService.Submit`` as a real gRPC server, scripted: it fails the
first calls with given codes, can hold calls open, remembers submission ids as a relay
pod does (a seen id is answered without relaying again), and records what it relayed.
It serves ``SubmitStream`` (batched Submits) as relay pods do, or, with ``streams=False``,
only ``Submit``, as a pod of an earlier version does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import grpc

from apexmesh.apex.content import parse_payload
from apexmesh.apex.data import Data
from apexmesh.apex.elements import parse_message
from apexmesh.apex.errors import ApexError
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from apexmesh.ops.logs import correlation_id
from apexmesh.rpc.batched import serve_batched
from apexmesh.rpc.server import create_server


class ScriptedRelay(relay_pb2_grpc.RelayServiceServicer):
    def __init__(
        self,
        *failures: grpc.StatusCode,
        hold: asyncio.Event | None = None,
        code: int = 250,
        streams: bool = True,
        latency: float = 0.0,
    ) -> None:
        self.failures = list(failures)
        #: Seconds each call takes before it is answered (a busy pod).
        self.latency = latency
        self.streams = streams
        #: The correlation id each call's handler ran with.
        self.correlation_ids: list[str] = []
        #: Stream messages received by SubmitStream, and the streams that carried them.
        self.batches = 0
        self.streams_opened = 0
        self.hold = hold
        self.code = code
        #: The submission id of every call, in order.
        self.calls: list[str] = []
        #: Each submission relayed once: (id, recipients of its data).
        self.relayed: dict[str, tuple[str, ...]] = {}
        self.inflight = 0
        self.peak = 0

    async def Submit(  # noqa: N802
        self, request: relay_pb2.SubmitRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.SubmitResponse:
        self.calls.append(request.submission_id)
        self.correlation_ids.append(correlation_id.get())
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        try:
            if self.hold is not None:
                await self.hold.wait()
            if self.latency:
                await asyncio.sleep(self.latency)
            key = request.submission_id or f"anonymous-{len(self.calls)}"
            if key not in self.relayed:
                self.relayed[key] = recipients_of(request.payload)
            if self.failures:
                await context.abort(self.failures.pop(0), "scripted")
            return relay_pb2.SubmitResponse(status=common_pb2.ApexStatus(code=self.code))
        finally:
            self.inflight -= 1

    async def SubmitStream(  # noqa: N802
        self,
        request_iterator: AsyncIterator[common_pb2.CallBatch],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[common_pb2.CallBatch]:
        async for batch in serve_batched(
            self._counted(request_iterator),
            context,
            self.Submit,
            relay_pb2.SubmitRequest.FromString,
        ):
            yield batch

    async def _counted(
        self, batches: AsyncIterator[common_pb2.CallBatch]
    ) -> AsyncIterator[common_pb2.CallBatch]:
        self.streams_opened += 1
        async for batch in batches:
            self.batches += 1
            yield batch

    def delivered(self) -> list[str]:
        """Every recipient named in what this relay relayed (once per submission)."""
        return [name for names in self.relayed.values() for name in names]


def recipients_of(payload: bytes) -> tuple[str, ...]:
    """The recipients named by the data of ``payload`` (none when it is no data)."""
    try:
        element = parse_message(parse_payload(payload).control)
    except ApexError:
        return ()
    return tuple(str(r.identity) for r in element.recipients) if isinstance(element, Data) else ()


@asynccontextmanager
async def scripted_relays(*servicers: ScriptedRelay) -> AsyncIterator[list[str]]:
    """Serve each servicer on its own loopback port; yield their addresses."""
    servers: list[grpc.aio.Server] = []
    addresses: list[str] = []
    try:
        for servicer in servicers:
            server, port = await create_server([_registration(servicer)])
            servers.append(server)
            addresses.append(f"127.0.0.1:{port}")
        yield addresses
    finally:
        for server in servers:
            await server.stop(0)


def _registration(servicer: ScriptedRelay) -> Callable[[grpc.aio.Server], None]:
    if servicer.streams:
        return lambda server: relay_pb2_grpc.add_RelayServiceServicer_to_server(servicer, server)
    # A pod of an earlier version: Submit only (a call of SubmitStream is UNIMPLEMENTED).
    handler = grpc.method_handlers_generic_handler(
        "apexmesh.contracts.relay.v1.RelayService",
        {
            "Submit": grpc.unary_unary_rpc_method_handler(
                servicer.Submit,
                request_deserializer=relay_pb2.SubmitRequest.FromString,
                response_serializer=relay_pb2.SubmitResponse.SerializeToString,
            )
        },
    )
    return lambda server: server.add_generic_rpc_handlers((handler,))


__all__ = ["ScriptedRelay", "scripted_relays"]
