"""Await a condition by polling it, with a deadline: the harness never sleeps a fixed time
hoping something is ready."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Return once ``predicate()`` is true; raise TimeoutError after ``within`` seconds."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - the predicate has no event to await
            await asyncio.sleep(0.005)
