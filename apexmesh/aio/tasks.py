"""Stopping background tasks without trusting that one cancellation arrives.

Every service runs loops as tasks (lease renewal, sweeps, listeners) and stops them by
cancelling and awaiting them. A cancellation can be lost on its way: a library catches
it, or turns it into another error, which a loop's error handling then takes for a
Redis or network failure and goes round again. ``task.cancel(); await task`` then
waits forever, and so does the service's shutdown (seen in a test run: a relay's stop
hung on its lease-renewal loop, sleeping for its next round in a task already marked
"cancelling", i.e. the cancellation had been delivered and swallowed during a Redis
call). One way it is lost is Python 3.11's ``asyncio.wait_for``: cancelled just as what
it awaits finishes, it returns the result and the cancellation is gone
(python/cpython#86296). redis-py's writes used it (apexmesh/store/cancellable.py keeps
them from it); the project's own code awaits with a bound through :func:`within`, and
ruff refuses ``asyncio.wait_for`` in it (pyproject.toml, TID251).

:func:`stop_task` cancels, waits a bounded time, and cancels again while the task
lives; a task that outlives every request is left with a warning instead of hanging
the shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable
from typing import Any, Final, TypeVar

T = TypeVar("T")

_log = logging.getLogger(__name__)

#: Seconds to wait after each cancellation request.
STOP_GRACE_SECONDS: Final = 2.0

#: Cancellation requests before a task is given up on.
STOP_REQUESTS: Final = 3


async def within(awaitable: Awaitable[T], timeout: float | None) -> T:  # noqa: ASYNC109
    """``await awaitable``, or TimeoutError after ``timeout`` seconds (None: unbounded),
    as ``asyncio.wait_for`` (same parameters), but a cancellation of the caller is never
    lost (module docstring). The awaitable runs in the caller's task: a timeout cancels
    it there."""
    async with asyncio.timeout(timeout):
        return await awaitable


async def stop_task(task: asyncio.Future[Any] | None, *, grace: float = STOP_GRACE_SECONDS) -> None:
    """Cancel ``task`` and wait until it ended: at most ``grace`` seconds after each of
    :data:`STOP_REQUESTS` requests. Its result or exception is consumed (a stopped loop's
    last error is not news)."""
    if task is None:
        return
    for _ in range(STOP_REQUESTS):
        if task.done():
            break
        task.cancel()
        await asyncio.wait({task}, timeout=grace)
    if not task.done():
        name = task.get_name() if isinstance(task, asyncio.Task) else repr(task)
        _log.warning("task %s did not stop after %d cancellations", name, STOP_REQUESTS)
        return
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" at collection


async def stop_tasks(
    tasks: Iterable[asyncio.Future[Any] | None], *, grace: float = STOP_GRACE_SECONDS
) -> None:
    """:func:`stop_task` for each of ``tasks``, all at once."""
    await asyncio.gather(*(stop_task(task, grace=grace) for task in tasks))


__all__ = ["STOP_GRACE_SECONDS", "STOP_REQUESTS", "stop_task", "stop_tasks", "within"]
