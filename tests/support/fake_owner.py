"""A robust topic's owner pod (its ``WellKnownEndpoint``) as a real gRPC server, scripted:
it sequences each delivery id once and answers a repeat from that first commit, as the
real owner does (``RobustSequencing._done``, the Redis delivery key), and it can cut
off its first calls after taking them: held past the caller's deadline, or aborted
with a code. It serves ``DeliverStream`` (batched ``Deliver``) as pubsub pods do and
records every call, whether it carried the forwarded mark, and the streams it saw."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.endpoint.v1 import endpoint_pb2, endpoint_pb2_grpc
from apexmesh.rpc.endpoint import WellKnownEndpointServicer
from apexmesh.rpc.server import create_server
from services.pubsub.robust_owner import forwarded


class ScriptedOwner(WellKnownEndpointServicer):
    def __init__(self, *failures: grpc.StatusCode, held: int = 0) -> None:
        #: Codes the first calls end with once taken (their delivery is committed).
        self.failures = list(failures)
        #: Calls, after the failures, that are taken and then never answered until the
        #: server stops (the caller's deadline cuts them off).
        self.held = held
        self._release = asyncio.Event()
        #: (delivery id, carried the forwarded mark) of every call, in order.
        self.calls: list[tuple[str, bool]] = []
        #: delivery id -> the seq of its first commit.
        self.committed: dict[str, int] = {}
        self.streams_opened = 0
        self.batches = 0
        #: Streams whose caller ended them (closed, or its channel closed).
        self.streams_ended = 0
        self.ended = asyncio.Event()

    async def Deliver(  # noqa: N802 - generated servicer method name
        self, request: endpoint_pb2.EndpointDeliverRequest, context: grpc.aio.ServicerContext
    ) -> endpoint_pb2.EndpointDeliverResponse:
        self.calls.append((request.delivery_id, forwarded(context)))
        key = request.delivery_id or f"anonymous-{len(self.calls)}"
        if key not in self.committed:
            self.committed[key] = len(self.committed) + 1
        if self.failures:
            await context.abort(self.failures.pop(0), "scripted cut-off")
        if self.held:
            self.held -= 1
            await self._release.wait()
        return endpoint_pb2.EndpointDeliverResponse(status=common_pb2.ApexStatus(code=250))

    async def DeliverStream(  # noqa: N802 - generated servicer method name
        self,
        request_iterator: AsyncIterator[common_pb2.CallBatch],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[common_pb2.CallBatch]:
        async for batch in super().DeliverStream(self._counted(request_iterator), context):
            yield batch

    async def _counted(
        self, batches: AsyncIterator[common_pb2.CallBatch]
    ) -> AsyncIterator[common_pb2.CallBatch]:
        self.streams_opened += 1
        try:
            async for batch in batches:
                self.batches += 1
                yield batch
        finally:
            self.streams_ended += 1
            self.ended.set()

    def release(self) -> None:
        """Answer the held calls (before the server stops: no handler left pending)."""
        self._release.set()


@asynccontextmanager
async def scripted_owners(*servicers: ScriptedOwner) -> AsyncIterator[list[str]]:
    """Serve each servicer on its own loopback port; yield their addresses."""
    servers: list[grpc.aio.Server] = []
    addresses: list[str] = []
    try:
        for servicer in servicers:
            server, port = await create_server(
                [
                    functools.partial(
                        endpoint_pb2_grpc.add_WellKnownEndpointServicer_to_server, servicer
                    )
                ]
            )
            servers.append(server)
            addresses.append(f"127.0.0.1:{port}")
        yield addresses
    finally:
        for servicer in servicers:
            servicer.release()
        for server in servers:
            await server.stop(0)


__all__ = ["ScriptedOwner", "scripted_owners"]
