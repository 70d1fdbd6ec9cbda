"""Flow control per channel (services/relay/flow.py): bounds, order, slow consumers.

The ledger is pure; the channel flow runs on a loop whose clock and timers are faked, so
the slow-consumer limit of ten seconds is crossed without waiting for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from apexmesh.relay.outcomes import ENDPOINT_DETACHED, SHED
from services.relay.flow import ChannelFlow, FlowLimits, Ledger

pytestmark = pytest.mark.unit

LIMITS = FlowLimits(max_in_flight=2, max_octets=1000, max_waiting=3, slow_after_seconds=10.0)


class FakeTimers:
    """The two loop methods ChannelFlow uses for time, on a clock moved by hand; futures
    come from the real running loop."""

    def __init__(self) -> None:
        self.now = 100.0
        self._timers: list[tuple[float, Callable[[], None], Handle]] = []
        self._loop = asyncio.get_running_loop()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> Handle:
        handle = Handle()
        self._timers.append((when, callback, handle))
        return handle

    def create_future(self) -> asyncio.Future[Any]:
        return self._loop.create_future()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [t for t in self._timers if t[0] <= self.now]
        self._timers = [t for t in self._timers if t[0] > self.now]
        for _, callback, handle in sorted(due, key=lambda t: t[0]):
            if not handle.cancelled:
                callback()


class Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def flow(shed: list[int] | None = None) -> tuple[ChannelFlow, FakeTimers]:
    timers = FakeTimers()
    counted = shed if shed is not None else []
    return ChannelFlow(LIMITS, timers, on_shed=counted.append), timers  # type: ignore[arg-type]


def test_ledger_room_by_count_and_octets_and_a_lone_data_always_fits() -> None:
    ledger = Ledger(LIMITS)
    assert ledger.room(5000)  # larger than max_octets, but nothing in flight
    ledger.take(600)
    assert not ledger.room(500)  # octets
    assert ledger.room(400)
    ledger.take(400)
    assert not ledger.room(1)  # count
    ledger.release(600)
    assert ledger.room(500)


def test_ledger_a_slow_consumer_recovers_at_half_the_bounds() -> None:
    ledger = Ledger(FlowLimits(max_in_flight=4, max_octets=1000))
    for _ in range(4):
        ledger.take(100)
    ledger.slow = True
    ledger.release(100)
    assert ledger.slow  # 3 in flight, above half of 4
    ledger.release(100)
    assert not ledger.slow


def test_ledger_overdue_after_the_limit() -> None:
    ledger = Ledger(LIMITS)
    assert not ledger.overdue(100.0, 109.9)
    assert ledger.overdue(100.0, 110.0)


async def test_room_is_taken_at_once_while_there_is_some() -> None:
    channel, _ = flow()
    assert channel.take(100) is None
    assert channel.take(100) is None
    waiting = channel.take(100)
    assert isinstance(waiting, asyncio.Future)
    assert not waiting.done()


async def test_waiting_deliveries_are_served_in_order_as_answers_come() -> None:
    channel, _ = flow()
    channel.take(100)
    channel.take(100)
    first = channel.take(100)
    second = channel.take(100)
    assert isinstance(first, asyncio.Future)
    assert isinstance(second, asyncio.Future)
    channel.release(100)
    assert first.done()
    assert first.result() is None
    assert not second.done()
    assert not channel.take_now(1)  # someone waits: no overtaking
    channel.release(100)
    assert second.result() is None


async def test_too_many_waiting_are_shed_at_once() -> None:
    shed: list[int] = []
    channel, _ = flow(shed)
    channel.take(100)
    channel.take(100)
    waiting = [channel.take(100) for _ in range(3)]
    assert all(isinstance(w, asyncio.Future) for w in waiting)
    assert channel.take(100) == SHED
    assert shed == [1]


async def test_a_consumer_that_keeps_data_waiting_too_long_is_shed_until_it_catches_up() -> None:
    shed: list[int] = []
    channel, timers = flow(shed)
    channel.take(100)
    channel.take(100)
    first = channel.take(100)
    timers.advance(5)
    second = channel.take(100)
    assert isinstance(first, asyncio.Future)
    assert isinstance(second, asyncio.Future)
    timers.advance(4.9)
    assert not first.done()  # 9.9 s: not yet
    timers.advance(0.2)
    assert first.result() == SHED
    assert second.result() == SHED
    assert shed == [2]
    assert channel.take(100) == SHED  # still slow: nothing waits behind it
    channel.release(100)
    assert channel.ledger.in_flight == 1  # half of two: served again
    assert channel.take(100) is None


async def test_a_timer_re_arms_for_the_next_waiter_once_the_first_was_served() -> None:
    channel, timers = flow()
    channel.take(100)
    channel.take(100)
    first = channel.take(100)
    timers.advance(8)
    second = channel.take(100)
    channel.release(100)  # first served after 8 s
    assert isinstance(first, asyncio.Future)
    assert first.result() is None
    timers.advance(2.5)  # first's deadline passes: second has waited 2.5 s only
    assert isinstance(second, asyncio.Future)
    assert not second.done()
    timers.advance(8)
    assert second.result() == SHED


async def test_closing_the_channel_ends_waiting_deliveries_as_detached() -> None:
    channel, _ = flow()
    channel.take(100)
    channel.take(100)
    waiting = channel.take(100)
    channel.close()
    assert isinstance(waiting, asyncio.Future)
    assert waiting.result() == ENDPOINT_DETACHED
    assert channel.take(1) == ENDPOINT_DETACHED


def test_limits_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="at least one"):
        FlowLimits(max_in_flight=0)
    with pytest.raises(ValueError, match="positive"):
        FlowLimits(slow_after_seconds=0)
