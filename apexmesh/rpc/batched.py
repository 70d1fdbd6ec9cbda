"""Unary calls carried in batches over one long-lived gRPC stream (``CallBatch``).

Why: a grpc.aio unary call costs the caller and the callee a few hundred microseconds of
CPU each (measured here: 330 us and 450 us per call with a hundred in flight), whatever
the request holds; a stream message costs about as much, the requests in it a few
microseconds each. The relay hands every publication to a pubsub pod and every pubsub
fan-out comes back to a relay, so those calls set the cost of pubsub (docs/pubsub.md).
Here the calls a process makes while the stream's previous message is being written go
out together as one ``CallBatch``; an idle caller still sends each call at once (a batch
of one), so nothing waits for a batch to fill.

The callee runs each request as its unary handler would and answers in the order the
handlers finish. The caller keeps the unary call's contract (:meth:`BatchedCaller.call`
returns the response or raises :class:`grpc.aio.AioRpcError`), so its retry rules stay
as they are:

- a request never handed to the stream when it broke: ``UNAVAILABLE`` (it reached
  nobody);
- a request handed to the stream and not answered when it broke, or not answered within
  its timeout: ``UNKNOWN`` or ``DEADLINE_EXCEEDED`` (cut off, outcome unknown);
- a request whose handler raised: ``UNKNOWN``, as a unary call would end;
- a callee that does not implement the stream (an older pod during a rolling upgrade):
  its calls, and every later one, go as unary calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final, Generic, NoReturn, Protocol, TypeVar, cast

import grpc
from google.protobuf.message import DecodeError

from apexmesh.aio.tasks import within
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.ops.logs import correlation_id

_log = logging.getLogger(__name__)

#: Serialized octets after which a batch is cut and the next calls start another, so no
#: stream message nears the gRPC message limit.
BATCH_OCTETS: Final = 1 << 20

#: Seconds a closing caller gives the callee to answer the calls it has.
CLOSE_SECONDS: Final = 1.0

#: Seconds a stream carries new calls before the caller starts another and lets the old
#: one finish what it carries. Why: a callee that ends connections after an age (the
#: pubsub pods do, so that relays spread over pods an autoscaler added) sends GOAWAY and,
#: after a grace, cuts every stream still open on that connection; a stream that lived
#: forever was always cut with calls in it (``UNKNOWN``, "max connection age"), and under
#: load some of them ran out of retries. A stream younger than the connection age minus
#: its grace is never cut: the new stream opens on the new connection, the old drains.
STREAM_SECONDS: Final = 20.0

#: Seconds a retired stream has to answer the calls it carries before it is cancelled
#: (within the pubsub pods' 45 s grace, beyond the relay's 30 s call timeout).
DRAIN_SECONDS: Final = 40.0

#: Initial metadata a callee sends before it reads any request: a caller whose stream
#: broke before it arrived knows that no request of it reached a handler.
STARTED: Final = ("apexmesh-batched", "started")

#: Requests of one stream a callee handles at once; it reads no further batch until one
#: finishes (gRPC's flow control then slows the caller).
MAX_HANDLED_PER_STREAM: Final = 4096


class _Message(Protocol):
    def SerializeToString(self) -> bytes: ...  # noqa: N802 (protobuf's name)


RequestT = TypeVar("RequestT", bound=_Message)
ResponseT = TypeVar("ResponseT", bound=_Message)

#: Opens the stream method (``stub.SubmitStream`` and the like).
OpenStream = Callable[
    [AsyncIterator[common_pb2.CallBatch]],
    "grpc.aio.StreamStreamCall[common_pb2.CallBatch, common_pb2.CallBatch]",
]
#: The unary method (``stub.Submit``), for callees without the stream.
UnaryCall = Callable[..., Awaitable[ResponseT]]
#: Parses a serialized response (``SubmitResponse.FromString``).
Parse = Callable[[bytes], ResponseT]


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """The error a unary call would have raised."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class _UnsupportedError(Exception):
    """The callee does not implement the stream: send as a unary call instead."""


class _CallAbortedError(Exception):
    """A handler aborted its call (``context.abort``): that call fails, not the stream."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code


class _CallContext:
    """The stream's context as one call's handler sees it: ``abort`` ends that call
    with its code, as it would end a unary call; everything else is the stream's."""

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: object) -> NoReturn:
        raise _CallAbortedError(code, details)

    def __getattr__(self, name: str) -> object:
        return getattr(self._context, name)


#: gRPC status codes by number (``StatusCode.value[0]``).
_CODES: Final = {code.value[0]: code for code in grpc.StatusCode}


class _Stream:
    """One stream: requests batched as they come, responses matched by id."""

    def __init__(self, open_stream: OpenStream, name: str) -> None:
        self.name = name
        self.loop = asyncio.get_running_loop()
        self._ids = itertools.count(1)
        self._batch = common_pb2.CallBatch()
        self._octets = 0
        self._ready: deque[common_pb2.CallBatch] = deque()
        self._wake = asyncio.Event()
        self._closing = False
        #: Requests handed to gRPC and not answered.
        self._sent: dict[int, asyncio.Future[bytes]] = {}
        #: Requests in a batch not yet handed to gRPC.
        self._unsent: dict[int, asyncio.Future[bytes]] = {}
        self.broken = False
        self.unsupported = False
        #: The callee sent :data:`STARTED`: requests sent may have been handled.
        self.started = False
        self.opened_at = self.loop.time()
        self._task = self.loop.create_task(self._run(open_stream))

    def send(self, request: bytes) -> asyncio.Future[bytes]:
        future: asyncio.Future[bytes] = self.loop.create_future()
        call_id = next(self._ids)
        if self._octets + len(request) > BATCH_OCTETS and self._batch.ids:
            self._cut()
        self._octets += len(request)
        self._batch.ids.append(call_id)
        self._batch.messages.append(request)
        self._batch.correlation_ids.append(correlation_id.get())
        self._unsent[call_id] = future
        self._wake.set()
        return future

    def _cut(self) -> None:
        self._ready.append(self._batch)
        self._batch = common_pb2.CallBatch()
        self._octets = 0

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> common_pb2.CallBatch:
        """The next batch for gRPC to write (the stream's request iterator). An iterator
        object, not an async generator: gRPC may drop it while it waits, and a dropped
        generator's finalizer would fail ("aclose(): asynchronous generator is already
        running")."""
        while not self._ready:
            if self._batch.ids:
                self._cut()
                break
            if self._closing:
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()
        batch = self._ready.popleft()
        for call_id in batch.ids:
            future = self._unsent.pop(call_id, None)
            if future is not None:
                self._sent[call_id] = future
        return batch

    async def _run(self, open_stream: OpenStream) -> None:
        failure = rpc_error(grpc.StatusCode.UNKNOWN, "stream ended")
        try:
            call = open_stream(self)
            self.started = STARTED in tuple(await call.initial_metadata())
            async for answers in call:
                sent = self._sent
                for call_id, message in zip(answers.ids, answers.messages, strict=False):
                    future = sent.pop(call_id, None)
                    if future is not None and not future.done():
                        future.set_result(message)
                codes = answers.failed_codes
                for index, call_id in enumerate(answers.failed_ids):
                    future = sent.pop(call_id, None)
                    if future is not None and not future.done():
                        number = codes[index] if index < len(codes) else -1
                        code = _CODES.get(number, grpc.StatusCode.UNKNOWN)
                        future.set_exception(rpc_error(code, "call failed"))
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                self.unsupported = True
            else:
                self._log_broken(exc)
            failure = rpc_error(exc.code(), exc.details() or "stream broke")
        except grpc.aio.UsageError:
            # The channel was closed (the service is stopping) before this stream could
            # open: its calls reached nobody, and the task ends without an error nobody
            # would retrieve.
            failure = rpc_error(grpc.StatusCode.CANCELLED, "channel closed")
        finally:
            self.broken = True
            self._fail(failure)

    def _log_broken(self, exc: grpc.aio.AioRpcError) -> None:
        """A connection's normal end is DEBUG, a failure WARNING with the call's details.

        Normal: the callee ended the connection by age (GOAWAY, the pubsub pods every
        60 s) or this caller cancelled a retired stream, and no call was cut off, so
        nothing was lost: the next call opens another stream. Anything else (calls cut
        off or not sent, another code) is a failure an operator should see."""
        code = exc.code()
        cut_off, unsent = len(self._sent), len(self._unsent)
        rotation = code == grpc.StatusCode.UNAVAILABLE or (
            code == grpc.StatusCode.CANCELLED and self._closing
        )
        if rotation and not cut_off and not unsent:
            _log.debug("%s stream ended: %s (%s)", self.name, code.name, exc.details() or "")
            return
        _log.warning(
            "%s stream broke: %s (%s); %d calls cut off, %d not sent; %s",
            self.name,
            code.name,
            exc.details() or "no details",
            cut_off,
            unsent,
            exc.debug_error_string() or "",
        )

    def _fail(self, failure: grpc.aio.AioRpcError) -> None:
        unavailable = rpc_error(grpc.StatusCode.UNAVAILABLE, "not handled: the stream broke")
        cut_off = unavailable
        if self.started:
            # Whatever the code says, a request the callee may have read has an unknown
            # outcome: cut off, never "reached nobody".
            code = failure.code()
            cut_off = (
                failure
                if code != grpc.StatusCode.UNAVAILABLE
                else rpc_error(grpc.StatusCode.UNKNOWN, failure.details() or "stream broke")
            )
        sent, self._sent = self._sent, {}
        unsent, self._unsent = self._unsent, {}
        for futures, error in ((sent, cut_off), (unsent, unavailable)):
            for future in futures.values():
                if future.done():
                    continue
                if self.unsupported:
                    future.set_exception(_UnsupportedError())
                else:
                    future.set_exception(error)

    async def close(self, within: float = CLOSE_SECONDS) -> None:
        """End the stream as a caller ends a unary call: the callee finishes the calls
        it has (``within`` seconds at most), then the stream is cancelled."""
        self._closing = True
        self._wake.set()
        # Bounded waits only: a shutdown never hangs on a stream whose peer is gone.
        await asyncio.wait({self._task}, timeout=within)
        if not self._task.done():
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=CLOSE_SECONDS)


class BatchedCaller(Generic[RequestT, ResponseT]):
    """Calls of one unary method of one callee, carried over its stream method."""

    def __init__(
        self,
        open_stream: OpenStream,
        unary: UnaryCall[ResponseT],
        parse: Parse[ResponseT],
        *,
        name: str,
        stream_seconds: float = STREAM_SECONDS,
        drain_seconds: float = DRAIN_SECONDS,
    ) -> None:
        self._open_stream = open_stream
        self._unary = unary
        self._parse = parse
        self._name = name
        self._stream_seconds = stream_seconds
        self._drain_seconds = drain_seconds
        self._stream: _Stream | None = None
        self._unsupported = False
        #: Retired streams finishing the calls they carry, by the task that closes each.
        self._closing: dict[asyncio.Task[None], _Stream] = {}

    async def call(self, request: RequestT, *, timeout: float) -> ResponseT:  # noqa: ASYNC109 (a gRPC deadline, as the unary call takes)
        """The response, or the :class:`grpc.aio.AioRpcError` a unary call would raise."""
        if self._unsupported:
            return await self._unary(request, timeout=timeout)
        future = self._current().send(request.SerializeToString())
        try:
            message = await within(future, timeout)
        except TimeoutError:
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "no answer in time") from None
        except _UnsupportedError:
            self._unsupported = True
            return await self._unary(request, timeout=timeout)
        return self._parse(message)

    def _current(self) -> _Stream:
        stream = self._stream
        if stream is not None and not stream.broken:
            if stream.loop.time() - stream.opened_at < self._stream_seconds:
                return stream
            self._retire(stream, self._drain_seconds)  # aged: drains, the next one starts
        elif stream is not None:
            self._unsupported = self._unsupported or stream.unsupported
            self._retire(stream, CLOSE_SECONDS)
        stream = self._stream = _Stream(self._open_stream, self._name)
        return stream

    def _retire(self, stream: _Stream, within: float) -> None:
        task = stream.loop.create_task(stream.close(within))
        self._closing[task] = stream
        task.add_done_callback(self._closing.pop)

    async def aclose(self) -> None:
        """End every stream, draining ones included, within :data:`CLOSE_SECONDS` each:
        a shutdown does not wait out a retired stream's drain."""
        stream, self._stream = self._stream, None
        streams = [*self._closing.values(), *([] if stream is None else [stream])]
        await asyncio.gather(*(each.close() for each in streams))
        if self._closing:
            await asyncio.wait(tuple(self._closing), timeout=2 * CLOSE_SECONDS)


# --------------------------------------------------------------------------- callee

#: A unary handler of a servicer (``servicer.Submit``).
Handler = Callable[[RequestT, grpc.aio.ServicerContext], Awaitable[_Message]]


class _Answers:
    """Responses gathered into one CallBatch per turn of the stream's writer."""

    def __init__(self) -> None:
        self.batch = common_pb2.CallBatch()
        self.wake = asyncio.Event()
        self.handling = 0
        self.room = asyncio.Event()
        self.room.set()
        self.finished = False

    def failed(self, call_id: int, code: grpc.StatusCode) -> None:
        self.batch.failed_ids.append(call_id)
        self.batch.failed_codes.append(code.value[0])
        self.wake.set()

    def answered(self, call_id: int, task: asyncio.Task[_Message]) -> None:
        self.handling -= 1
        error = None if task.cancelled() else task.exception()
        if task.cancelled():
            self.failed(call_id, grpc.StatusCode.CANCELLED)
        elif isinstance(error, _CallAbortedError):
            self.failed(call_id, error.code)
        elif error is not None:
            _log.error("batched call %d failed", call_id, exc_info=error)
            self.failed(call_id, grpc.StatusCode.UNKNOWN)
        else:
            self.batch.ids.append(call_id)
            self.batch.messages.append(task.result().SerializeToString())
        self.room.set()
        self.wake.set()

    @property
    def done(self) -> bool:
        return self.finished and self.handling == 0 and not self._pending_output

    @property
    def _pending_output(self) -> bool:
        return bool(self.batch.ids or self.batch.failed_ids)

    def take(self) -> common_pb2.CallBatch | None:
        if not self._pending_output:
            return None
        batch, self.batch = self.batch, common_pb2.CallBatch()
        return batch


async def serve_batched(
    request_iterator: AsyncIterator[common_pb2.CallBatch],
    context: grpc.aio.ServicerContext,
    handler: Handler[RequestT],
    parse: Callable[[bytes], RequestT],
    *,
    max_handling: int = MAX_HANDLED_PER_STREAM,
) -> AsyncIterator[common_pb2.CallBatch]:
    """The stream method of a servicer: every request of every batch handled by the
    unary ``handler`` (each a task of its own, started in the order received, with the
    caller's correlation id), the answers batched back as they finish. A handler that
    outlives the stream (the caller went away) still runs to its end: its work, like a
    unary call's cut off by the caller, is not undone."""
    await context.send_initial_metadata((STARTED,))
    answers = _Answers()
    call_context = cast(grpc.aio.ServicerContext, _CallContext(context))
    handlers: set[asyncio.Task[_Message]] = set()

    async def read() -> None:
        try:
            async for batch in request_iterator:
                cids = batch.correlation_ids
                for index, (call_id, message) in enumerate(
                    zip(batch.ids, batch.messages, strict=False)
                ):
                    while answers.handling >= max_handling:
                        answers.room.clear()
                        await answers.room.wait()
                    try:
                        request = parse(message)
                    except DecodeError:
                        answers.failed(call_id, grpc.StatusCode.INTERNAL)
                        continue
                    correlation_id.set(cids[index] if index < len(cids) else "")
                    task = asyncio.ensure_future(handler(request, call_context))
                    answers.handling += 1
                    handlers.add(task)
                    task.add_done_callback(handlers.discard)
                    task.add_done_callback(functools.partial(answers.answered, call_id))
        finally:
            answers.finished = True
            answers.wake.set()

    reader = asyncio.ensure_future(read())
    try:
        while not answers.done:
            await answers.wake.wait()
            answers.wake.clear()
            batch = answers.take()
            if batch is not None:
                yield batch
        failure = None if reader.cancelled() or not reader.done() else reader.exception()
        if failure is not None:
            raise failure
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await reader


__all__ = [
    "BATCH_OCTETS",
    "MAX_HANDLED_PER_STREAM",
    "STARTED",
    "BatchedCaller",
    "rpc_error",
    "serve_batched",
]
