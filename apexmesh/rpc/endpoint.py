"""The base of every service's ``WellKnownEndpoint`` servicer (pubsub, presence, report).

A service implements ``Deliver``; ``DeliverStream``, the relay's way of calling it under
load, is the same handler with many calls to one stream message
(:mod:`apexmesh.rpc.batched`), so no service writes it again.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator

import grpc

from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.endpoint.v1 import endpoint_pb2, endpoint_pb2_grpc
from apexmesh.rpc.batched import serve_batched


class WellKnownEndpointServicer(endpoint_pb2_grpc.WellKnownEndpointServicer):
    """``DeliverStream`` as batched ``Deliver`` calls; subclasses implement ``Deliver``."""

    @abc.abstractmethod
    async def Deliver(  # noqa: N802 - generated servicer method name
        self, request: endpoint_pb2.EndpointDeliverRequest, context: grpc.aio.ServicerContext
    ) -> endpoint_pb2.EndpointDeliverResponse:
        """Process data addressed to the service (endpoint.proto)."""

    async def DeliverStream(  # noqa: N802 - generated servicer method name
        self,
        request_iterator: AsyncIterator[common_pb2.CallBatch],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[common_pb2.CallBatch]:
        async for batch in serve_batched(
            request_iterator,
            context,
            self.Deliver,
            endpoint_pb2.EndpointDeliverRequest.FromString,
        ):
            yield batch


__all__ = [
    "WellKnownEndpointServicer",
]
