"""Await a condition by polling it, with a deadline: the harness never sleeps a fixed time
hoping something is ready (issue #32).

Every deadline here, and every timing bound a test asserts because the behaviour itself
is a timing promise, is multiplied by one factor, :data:`TIME_FACTOR`, read from
``APEXMESH_TEST_TIME_FACTOR`` (default 1; tests/README.md): a slow or loaded machine
raises it instead of each test guessing its own margin.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar, cast

T = TypeVar("T")


def _factor() -> float:
    text = os.environ.get("APEXMESH_TEST_TIME_FACTOR", "").strip()
    if not text:
        return 1.0
    value = float(text)
    if value < 1.0:
        raise ValueError(f"APEXMESH_TEST_TIME_FACTOR must be >= 1, not {text!r}")
    return value


#: How much slower than a quiet two-core machine this run may be (>= 1).
TIME_FACTOR: Final = _factor()

#: Seconds between two probes of a condition.
INTERVAL: Final = 0.005


def scaled(seconds: float) -> float:
    """``seconds`` times :data:`TIME_FACTOR`: a deadline or a timing bound of a test."""
    return seconds * TIME_FACTOR


async def wait_until(
    condition: Callable[[], T | None] | Callable[[], Awaitable[T | None]],
    within: float = 5.0,
    *,
    every: float = INTERVAL,
    what: str = "",
) -> T:
    """The first true value of ``condition()`` (it may be a coroutine function: a probe
    that fetches what it checks returns it, or None); TimeoutError after
    ``scaled(within)`` seconds, naming ``what``."""
    try:
        async with asyncio.timeout(scaled(within)):
            while True:
                outcome = condition()
                if inspect.isawaitable(outcome):
                    outcome = await outcome
                if outcome:
                    return cast("T", outcome)
                await asyncio.sleep(every)  # a probe interval, not a readiness guess
    except TimeoutError:
        raise TimeoutError(f"not within {scaled(within):.2f}s: {what or condition}") from None


async def eventually(predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Return once ``predicate()`` is true; raise TimeoutError after ``within`` seconds
    (scaled). The first helper of the suite; :func:`wait_until` also takes coroutines."""
    await wait_until(predicate, within)


async def still_true(
    condition: Callable[[], bool], during: float, *, every: float = INTERVAL
) -> None:
    """Assert ``condition()`` holds for ``during`` seconds (scaled): what a test checks
    when the promise is that nothing *more* happens (no duplicate, no second call). The
    one place a test waits for time itself, bounded by the factor."""
    loop = asyncio.get_running_loop()
    end = loop.time() + scaled(during)
    while True:
        assert condition(), f"stopped holding: {condition}"
        if loop.time() >= end:
            return
        await asyncio.sleep(every)


def block_until(
    condition: Callable[[], T | None], within: float = 5.0, *, every: float = 0.02, what: str = ""
) -> T:
    """Blocking :func:`wait_until` for threads and synchronous fixtures: the first true
    value of ``condition()``; TimeoutError after ``scaled(within)`` seconds."""
    deadline = time.monotonic() + scaled(within)
    while True:
        outcome = condition()
        if outcome:
            return outcome
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {scaled(within):.2f}s: {what or condition}")
        time.sleep(every)  # a probe interval, not a readiness guess


__all__ = [
    "INTERVAL",
    "TIME_FACTOR",
    "block_until",
    "eventually",
    "scaled",
    "still_true",
    "wait_until",
]
