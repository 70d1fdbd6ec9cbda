"""The coalescer: operations asked for together go out together, in order, and every
caller gets its own result (or the batch's error)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from apexmesh.aio.tasks import within
from apexmesh.store.batching import Coalescer
from tests.support.polling import scaled

pytestmark = pytest.mark.unit


class Recorder:
    """A flush that records its batches and can be held open or made to fail."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: Exception | None = None

    async def flush(self, items: Sequence[int]) -> list[int]:
        self.batches.append(list(items))
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return [item * 10 for item in items]


async def test_calls_of_one_moment_share_a_batch_in_order() -> None:
    recorder = Recorder()
    coalescer = Coalescer("test", recorder.flush)
    results = await asyncio.gather(*(coalescer.call(i) for i in range(5)))
    assert results == [0, 10, 20, 30, 40]
    assert recorder.batches == [[0, 1, 2, 3, 4]]


async def test_what_is_asked_during_a_flush_goes_in_the_next_batch() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    coalescer = Coalescer("test", recorder.flush)
    first = asyncio.ensure_future(coalescer.call(1))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert recorder.batches == [[1]]
    later = [asyncio.ensure_future(coalescer.call(i)) for i in (2, 3, 4)]
    await asyncio.sleep(0)
    assert len(coalescer) == 3  # queued behind the batch that is out (concurrency 1)
    recorder.gate.set()
    assert await first == 10
    assert [await f for f in later] == [20, 30, 40]
    assert recorder.batches == [[1], [2, 3, 4]]


async def test_batches_are_bounded() -> None:
    recorder = Recorder()
    coalescer = Coalescer("test", recorder.flush, max_batch=3)
    await asyncio.gather(*(coalescer.call(i) for i in range(7)))
    assert [len(batch) for batch in recorder.batches] == [3, 3, 1]
    assert (coalescer.batches, coalescer.operations) == (3, 7)


async def test_sequential_calls_each_get_an_answer() -> None:
    """A call made right after the previous batch's answer finds a worker (regression:
    the worker used to leave its set only in a done callback, one loop turn late)."""
    recorder = Recorder()
    coalescer = Coalescer("test", recorder.flush)
    for i in range(50):
        assert await within(coalescer.call(i), scaled(1.0)) == i * 10


async def test_a_failed_flush_fails_its_batch_only() -> None:
    recorder = Recorder()
    recorder.fail = ConnectionError("redis away")
    coalescer = Coalescer("test", recorder.flush)
    outcomes = await asyncio.gather(*(coalescer.call(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(o, ConnectionError) for o in outcomes)
    recorder.fail = None
    assert await coalescer.call(7) == 70


async def test_a_caller_that_stops_waiting_does_not_break_the_batch() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    coalescer = Coalescer("test", recorder.flush)
    gone = asyncio.ensure_future(coalescer.call(1))
    kept = asyncio.ensure_future(coalescer.call(2))
    await asyncio.sleep(0)
    gone.cancel()
    recorder.gate.set()
    assert await kept == 20
    assert recorder.batches == [[1, 2]]  # the operation was done anyway


async def test_aclose_fails_what_is_queued() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    coalescer = Coalescer("test", recorder.flush)
    out = asyncio.ensure_future(coalescer.call(1))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    queued = asyncio.ensure_future(coalescer.call(2))
    await asyncio.sleep(0)
    await coalescer.aclose()
    for future in (out, queued):
        with pytest.raises(ConnectionError):
            await future


@pytest.mark.parametrize(("batch", "concurrency"), [(0, 1), (1, 0)])
def test_bounds_must_be_positive(batch: int, concurrency: int) -> None:
    with pytest.raises(ValueError, match="max_batch"):
        Coalescer("test", Recorder().flush, max_batch=batch, concurrency=concurrency)
