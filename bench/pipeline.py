"""Keep a fixed number of operations in flight, the same way for every bench.

The raw BEEP echo and the relay path are both driven by :func:`pipelined`, so that a
ratio between them compares the work behind one operation, not two ways of waiting: each
completion starts the next operation from its callback (no task, no semaphore, no
wake-up of the driver per operation) until ``count`` have completed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


async def pipelined(start: Callable[[], asyncio.Future[Any]], count: int, depth: int) -> None:
    """Run ``count`` operations, ``depth`` at a time; ``start()`` begins one and returns
    the future of its completion. Raises the first operation's error, if any."""
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    started = completed = 0

    def done(operation: asyncio.Future[Any]) -> None:
        nonlocal started, completed
        completed += 1
        if finished.done():
            return
        if operation.cancelled() or operation.exception() is not None:
            finished.set_exception(operation.exception() or asyncio.CancelledError())
            return
        if started < count:
            started += 1
            start().add_done_callback(done)
        elif completed == count:
            finished.set_result(None)

    if count == 0:
        return
    for _ in range(min(depth, count)):
        started += 1
        start().add_done_callback(done)
    await finished
