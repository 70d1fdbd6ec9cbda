"""What every gRPC server and client of the mesh shows an operator: the standard gRPC
server metrics, and the correlation id of the data a call is about.

Metrics (the names of go-grpc-prometheus and py-grpc-prometheus, which Grafana
dashboards for gRPC already use):

* ``grpc_server_started_total{grpc_type, grpc_service, grpc_method}``
* ``grpc_server_handled_total{grpc_type, grpc_service, grpc_method, grpc_code}``
* ``grpc_server_handling_seconds{grpc_type, grpc_service, grpc_method}`` (histogram)

A streaming call is one call: counted when it starts and when it ends, its time the
stream's life (the relay's pod-to-pod ``DeliverStream`` carries thousands of messages
in one call, which the relay counts itself). The unary calls carried in batches over a
stream (:mod:`apexmesh.rpc.batched`: ``WellKnownEndpoint.DeliverStream``,
``RelayService.SubmitStream``) are counted as well, each as the unary call it stands for
(``grpc_type="unary"``, the method without ``Stream``), timed from its batch's arrival
to its answer's departure, with the code the unary call would have ended with.

Correlation: a client call made while :data:`apexmesh.ops.logs.correlation_id` is set
sends it as the metadata ``apexmesh-cid``; the server sets it again for the handler, so
the log lines of the called service carry the id of the data they are about.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram

from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.ops.logs import correlation_id
from apexmesh.rpc.channels import internal_channel

#: The metadata key carrying the correlation id.
CID_KEY: Final = "apexmesh-cid"

#: Buckets of the handling time: a cached access check takes about 100 µs, a report a
#: few ms, a stream minutes.
_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    60.0,
)


def _cid_of(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == CID_KEY:
            return str(value)[:64]
    return ""


def _kind(handler: grpc.RpcMethodHandler) -> str:
    if handler.request_streaming and handler.response_streaming:
        return "bidi_stream"
    if handler.request_streaming:
        return "client_stream"
    return "server_stream" if handler.response_streaming else "unary"


class ServerObserver(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Counts and times every call and sets the caller's correlation id."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["grpc_type", "grpc_service", "grpc_method"]
        self.started = Counter(
            "grpc_server_started", "RPCs started on the server.", labels, registry=registry
        )
        self.handled = Counter(
            "grpc_server_handled",
            "RPCs completed on the server, by status code.",
            [*labels, "grpc_code"],
            registry=registry,
        )
        self.seconds = Histogram(
            "grpc_server_handling_seconds",
            "Time from the start of an RPC to its end on the server.",
            labels,
            buckets=_BUCKETS,
            registry=registry,
        )

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return None
        service, _, method = str(details.method).lstrip("/").rpartition("/")
        labels = (_kind(handler), service, method)
        cid = _cid_of(details.invocation_metadata)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, labels, cid),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.stream_unary, labels, cid),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        behavior = handler.unary_stream or handler.stream_stream
        factory = (
            grpc.unary_stream_rpc_method_handler
            if handler.unary_stream is not None
            else grpc.stream_stream_rpc_method_handler
        )
        if handler.request_deserializer == common_pb2.CallBatch.FromString:
            behavior = self._batched(behavior, ("unary", service, method.removesuffix("Stream")))
        wrapped = (
            self._streaming(behavior, labels, cid)
            if inspect.isasyncgenfunction(behavior)
            else self._unary(behavior, labels, cid)
        )
        return factory(
            wrapped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _finish(
        self, labels: tuple[str, str, str], context: Any, began: float, failed: bool
    ) -> None:
        code = context.code()
        if code is None:
            name = "UNKNOWN" if failed else "OK"
        else:
            name = code.name if isinstance(code, grpc.StatusCode) else str(code)
        self.handled.labels(*labels, name).inc()
        self.seconds.labels(*labels).observe(time.perf_counter() - began)

    def _unary(
        self, behavior: Callable[..., Any], labels: tuple[str, str, str], cid: str
    ) -> Callable[..., Awaitable[Any]]:
        async def observed(request: Any, context: Any) -> Any:
            self.started.labels(*labels).inc()
            token = correlation_id.set(cid) if cid else None
            began = time.perf_counter()
            failed = True
            try:
                result = await behavior(request, context)
                failed = False
                return result
            finally:
                self._finish(labels, context, began, failed)
                if token is not None:
                    correlation_id.reset(token)

        return observed

    def _streaming(
        self, behavior: Callable[..., AsyncIterator[Any]], labels: tuple[str, str, str], cid: str
    ) -> Callable[..., AsyncIterator[Any]]:
        async def observed(request: Any, context: Any) -> AsyncIterator[Any]:
            self.started.labels(*labels).inc()
            if cid:
                correlation_id.set(cid)  # this generator's own context
            began = time.perf_counter()
            failed = True
            try:
                async for item in behavior(request, context):
                    yield item
                failed = False
            finally:
                self._finish(labels, context, began, failed)

        return observed

    def _batched(
        self,
        behavior: Callable[..., AsyncIterator[common_pb2.CallBatch]],
        labels: tuple[str, str, str],
    ) -> Callable[..., AsyncIterator[common_pb2.CallBatch]]:
        started, handled, seconds = self.started, self.handled, self.seconds

        async def observed(
            requests: AsyncIterator[common_pb2.CallBatch], context: Any
        ) -> AsyncIterator[common_pb2.CallBatch]:
            began: dict[int, float] = {}

            async def arriving() -> AsyncIterator[common_pb2.CallBatch]:
                async for batch in requests:
                    now = time.perf_counter()
                    began.update(dict.fromkeys(batch.ids, now))
                    started.labels(*labels).inc(len(batch.ids))
                    yield batch

            def finish(call_id: int, code: str, now: float) -> None:
                handled.labels(*labels, code).inc()
                seconds.labels(*labels).observe(now - began.pop(call_id, now))

            async for answers in behavior(arriving(), context):
                now = time.perf_counter()
                for call_id in answers.ids:
                    finish(call_id, "OK", now)
                for call_id, number in zip(answers.failed_ids, answers.failed_codes, strict=False):
                    finish(call_id, _CODE_NAMES.get(number, "UNKNOWN"), now)
                yield answers

        return observed


#: gRPC status code names by number, for the codes of batched calls.
_CODE_NAMES: Final = {code.value[0]: code.name for code in grpc.StatusCode}


class _CidClient(
    grpc.aio.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.aio.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Sends the current correlation id with every call made while one is set."""

    @staticmethod
    def _with_cid(details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        cid = correlation_id.get()
        if not cid:
            return details
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        metadata.add(CID_KEY, cid)
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(self._with_cid(details), request)

    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(self._with_cid(details), request)


def observed_channel(target: str, **kwargs: Any) -> grpc.aio.Channel:
    """An internal channel (:func:`apexmesh.rpc.channels.internal_channel`: it reconnects
    within a second of a restarted peer) whose calls carry the correlation id."""
    return internal_channel(target, interceptors=[_CidClient()], **kwargs)


__all__ = ["CID_KEY", "ServerObserver", "observed_channel"]
