"""Cancel a task at each turn of the event loop in turn, and see whether it ends: the
check that a cancellation landing as an awaited call finishes is not lost (Python
3.11's ``asyncio.wait_for`` loses it: apexmesh/aio/tasks.py, apexmesh/store/cancellable.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tests.support.polling import scaled


async def turns_going_on(
    body: Callable[[], Awaitable[object]], turns: int, *, limit: int = 1
) -> list[int]:
    """Run ``body()`` in a loop as a task, ``turns`` times, cancelling the ``n``-th after
    ``n`` turns of the loop: the turns after which the task went on (at most ``limit``;
    such a task is then ended by a flag its loop checks, not by another cancellation,
    which could be lost too)."""
    stopped = False

    async def loop() -> None:
        while not stopped:
            await body()

    going_on: list[int] = []
    for turn in range(turns):
        task = asyncio.create_task(loop())
        for _ in range(turn):
            await asyncio.sleep(0)  # one turn of the loop: where the cancellation lands
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=scaled(2))
        if not done:
            going_on.append(turn)
            stopped = True
            await asyncio.wait([task], timeout=scaled(10))
            stopped = False
            if len(going_on) >= limit:
                break
    return going_on
