"""Coalescing many small Redis operations into few round trips.

When 10,000 sessions close at once, 10,000 attachment releases are asked for within a
few milliseconds. Sent one by one they need 10,000 round trips (and, with redis-py's
default pool, 10,000 sockets: "Too many connections"); sent as they queue, a few batches
do. A :class:`Coalescer` collects the operations its callers ask for and hands them to
its ``flush`` function in batches of at most ``max_batch``: what is asked while a batch
is out goes in the next one, so an idle store answers one operation in one round trip
and a busy one amortizes a round trip over many operations.

With ``concurrency`` 1 (the default) batches go out one at a time, in the order the
operations were asked for: a release asked before a claim of the same endpoint is done
before it, as if each had been sent alone.

A caller that stops waiting (cancelled) does not take its operation back: it is done
with its batch, as a command already written to a socket would be.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Generic, TypeVar

from apexmesh.aio.tasks import stop_tasks

_T = TypeVar("_T")
_R = TypeVar("_R")

#: Default largest number of operations in one batch.
MAX_BATCH: Final = 1000


class Coalescer(Generic[_T, _R]):
    """Batches of operations for ``flush``; see the module docstring.

    ``flush(items)`` returns one result per item, in order; if it raises, every caller of
    that batch gets the exception.
    """

    def __init__(
        self,
        name: str,
        flush: Callable[[Sequence[_T]], Awaitable[Sequence[_R]]],
        *,
        max_batch: int = MAX_BATCH,
        concurrency: int = 1,
    ) -> None:
        if max_batch < 1 or concurrency < 1:
            raise ValueError(f"coalescer {name!r} needs max_batch and concurrency >= 1")
        self.name = name
        self._flush = flush
        self._max_batch = max_batch
        self._concurrency = concurrency
        self._pending: deque[tuple[_T, asyncio.Future[_R]]] = deque()
        self._workers: set[asyncio.Task[None]] = set()
        #: Batches flushed and operations in them (metrics, tests).
        self.batches = 0
        self.operations = 0

    def __len__(self) -> int:
        """Operations asked for and not yet in a batch."""
        return len(self._pending)

    async def call(self, item: _T) -> _R:
        """Do ``item`` with the next batch; its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_R] = loop.create_future()
        self._pending.append((item, future))
        if len(self._workers) < self._concurrency:
            worker = loop.create_task(self._work(), name=f"coalescer-{self.name}")
            self._workers.add(worker)
        return await future

    async def _work(self) -> None:
        try:
            await self._drain()
        finally:
            # Synchronously, not in a done callback: an operation asked for right after
            # this worker's last batch must find it gone and start another.
            self._workers.discard(asyncio.current_task())

    async def _drain(self) -> None:
        pending = self._pending
        while pending:
            batch = [pending.popleft() for _ in range(min(self._max_batch, len(pending)))]
            self.batches += 1
            self.operations += len(batch)
            try:
                results = await self._flush([item for item, _ in batch])
            except asyncio.CancelledError:
                _fail(batch, ConnectionError(f"{self.name}: closed before the batch was done"))
                raise
            except Exception as exc:  # noqa: BLE001 - handed to every caller of the batch
                _fail(batch, exc)
                continue
            if len(results) != len(batch):
                _fail(batch, RuntimeError(f"{self.name}: {len(results)} results for {len(batch)}"))
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def aclose(self) -> None:
        """Stop: batches out are cancelled, and what is still queued fails."""
        await stop_tasks(list(self._workers))
        queued = list(self._pending)
        self._pending.clear()
        _fail(queued, ConnectionError(f"{self.name}: closed"))


def _fail(batch: Sequence[tuple[object, asyncio.Future[_R]]], exc: BaseException) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)


__all__ = ["MAX_BATCH", "Coalescer"]
