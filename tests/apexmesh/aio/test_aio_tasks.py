"""Stopping background tasks (apexmesh/aio/tasks.py): a cancellation lost inside a
library (caught, or turned into another error a loop goes round on) does not hang the
shutdown that waits for the task."""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass

import pytest

from apexmesh.aio.tasks import STOP_REQUESTS, stop_task, stop_tasks, within
from tests.support.cancelling import turns_going_on
from tests.support.polling import scaled

pytestmark = pytest.mark.integration


@dataclass
class Swallower:
    """A loop whose error handling takes the next ``budget`` cancellations for ordinary
    errors and goes round again, as a renewal loop did."""

    budget: int
    seen: int = 0

    async def run(self) -> None:
        while True:
            try:
                await asyncio.sleep(3600)  # only ever ends by being cancelled
            except asyncio.CancelledError:
                self.seen += 1
                if self.budget <= 0:
                    raise
                self.budget -= 1
                task = asyncio.current_task()
                assert task is not None
                task.uncancel()


async def test_a_task_that_stops_at_once() -> None:
    task = asyncio.create_task(asyncio.sleep(3600))  # to be cancelled while sleeping
    await asyncio.sleep(0)
    await within(stop_task(task), scaled(1))
    assert task.cancelled()


async def test_a_lost_cancellation_is_asked_again() -> None:
    loop = Swallower(budget=1)
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0)
    await within(stop_task(task, grace=0.05), scaled(2))
    assert task.cancelled()
    assert loop.seen == 2


async def test_a_task_that_never_stops_is_left_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = Swallower(budget=10**6)
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="apexmesh.aio.tasks"):
        await within(stop_task(task, grace=0.02), scaled(2))
    assert not task.done()
    assert loop.seen == STOP_REQUESTS
    assert "did not stop" in caplog.text
    loop.budget = 0  # the test's own clean-up
    await within(stop_task(task), scaled(1))
    assert task.cancelled()


async def test_an_ended_tasks_error_is_consumed_and_none_is_fine() -> None:
    async def fails() -> None:
        raise RuntimeError("last error of a loop")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await stop_tasks([task, None])
    assert isinstance(task.exception(), RuntimeError)


async def _done_at_once() -> int:
    await asyncio.sleep(0)  # one turn, as a write that drains at once
    return 1


async def test_within_never_loses_a_cancellation() -> None:
    """Python 3.11's ``wait_for`` returns the result when its task is cancelled as the
    awaited call finishes (python/cpython#86296); :func:`within` ends every task."""
    assert await turns_going_on(lambda: within(_done_at_once(), scaled(10)), 12) == []


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 rebuilt wait_for on timeout")
async def test_asyncio_wait_for_loses_one_on_this_python() -> None:
    """What the test above would find without :func:`within` (why ruff refuses
    ``asyncio.wait_for``, pyproject.toml TID251)."""
    assert await turns_going_on(lambda: asyncio.wait_for(_done_at_once(), 10), 12) != []  # noqa: TID251
