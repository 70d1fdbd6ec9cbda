"""Flow control of what a relay pod holds for one endpoint: bounded, never silently lost.

Every APEX channel of this pod (an endpoint attached over it) may hold at most
:attr:`FlowLimits.max_in_flight` data, and :attr:`FlowLimits.max_octets` of payload, sent
or queued for sending and not answered yet. A delivery that finds no room waits; the data
it belongs to is not answered (the relay answers ``ok`` once every copy is in custody,
services/relay/router.py), so the sender's BEEP window closes (RFC 3081 3.1.3, see
apexmesh/beep/session.py) and the sender is slowed where it enters, instead of the heap
growing. The endpoint's answers release room and wake the waiting deliveries in order.

A slow subscriber must not hold everyone else back for long. The stated policy:

* a delivery waits at most :attr:`FlowLimits.slow_after_seconds` for room; when the
  oldest waiting delivery has waited that long, the endpoint is a **slow consumer**:
  every waiting delivery is shed, and so is every new one until the endpoint has worked
  its queue down to half the bounds;
* more than :attr:`FlowLimits.max_waiting` deliveries waiting: the newest is shed at once;
* a shed copy has the outcome 421 (reason ``SHED``): counted in
  ``apexmesh_relay_delivery_outcomes_total{result="shed"}``, logged, and reported to an
  originator that asked (statusRequest); the other recipients of the same data proceed.
  A data whose every copy was shed is refused with 421 instead of ``ok``.

:class:`Ledger` is the accounting and the policy, sans-I/O (time is passed in);
:class:`ChannelFlow` is its asyncio adapter (futures for the waiting deliveries, one
timer for the slow-consumer check).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from apexmesh.relay.outcomes import ENDPOINT_DETACHED, SHED, Outcome

#: What a waiting delivery learns: None once its data is queued (in custody), else the
#: outcome that ended it (shed, or the attachment ended).
Taken = Outcome | None


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """Bounds on what one APEX channel of this pod holds for its endpoint."""

    #: Data sent or queued to the endpoint and not answered yet. 256 keeps a fast
    #: endpoint busy across a millisecond of round trip at tens of thousands per second.
    max_in_flight: int = 256
    #: Their payload octets (one data larger than this still goes alone).
    max_octets: int = 4 << 20
    #: Deliveries that may wait for room; more are shed at once.
    max_waiting: int = 4096
    #: Seconds the oldest waiting delivery may wait before the endpoint is a slow
    #: consumer (its waiting and further data shed until it works its queue down).
    slow_after_seconds: float = 10.0

    def __post_init__(self) -> None:
        if self.max_in_flight < 1 or self.max_octets < 1 or self.max_waiting < 0:
            raise ValueError("flow limits must allow at least one data in flight")
        if self.slow_after_seconds <= 0:
            raise ValueError("slow_after_seconds must be positive")


class Ledger:
    """The counts and the slow-consumer state of one channel (sans-I/O)."""

    __slots__ = ("in_flight", "limits", "octets", "slow")

    def __init__(self, limits: FlowLimits) -> None:
        self.limits = limits
        self.in_flight = 0
        self.octets = 0
        #: True while the endpoint is a slow consumer (see the module docstring).
        self.slow = False

    def room(self, octets: int) -> bool:
        """True when one more data of ``octets`` fits (a lone data always fits)."""
        limits = self.limits
        if self.in_flight == 0:
            return True
        return self.in_flight < limits.max_in_flight and self.octets + octets <= limits.max_octets

    def take(self, octets: int) -> None:
        self.in_flight += 1
        self.octets += octets

    def release(self, octets: int) -> None:
        """The endpoint answered (or the data ended otherwise); a slow consumer that has
        worked its queue down to half the bounds is served again."""
        self.in_flight -= 1
        self.octets -= octets
        limits = self.limits
        if (
            self.slow
            and self.in_flight <= limits.max_in_flight // 2
            and self.octets <= limits.max_octets // 2
        ):
            self.slow = False

    def overdue(self, waiting_since: float, now: float) -> bool:
        """True when a delivery waiting since ``waiting_since`` makes the endpoint slow."""
        return now - waiting_since >= self.limits.slow_after_seconds


@dataclass(slots=True)
class _Waiter:
    octets: int
    since: float
    future: asyncio.Future[Taken]


class ChannelFlow:
    """The asyncio side of one channel's :class:`Ledger` (see the module docstring)."""

    def __init__(
        self,
        limits: FlowLimits,
        loop: asyncio.AbstractEventLoop,
        *,
        on_shed: Callable[[int], None] | None = None,
    ) -> None:
        self.ledger = Ledger(limits)
        self._loop = loop
        self._waiting: deque[_Waiter] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        #: Told how many deliveries were shed at once (metrics and logs).
        self._on_shed = on_shed

    @property
    def waiting(self) -> int:
        """Deliveries waiting for room."""
        return len(self._waiting)

    def take_now(self, octets: int) -> bool:
        """Take room for one data at once when there is some and nobody waits before it."""
        ledger = self.ledger
        if self._waiting or ledger.slow or self._closed or not ledger.room(octets):
            return False
        ledger.take(octets)
        return True

    def take(self, octets: int) -> Taken | asyncio.Future[Taken]:
        """Room for one data: None when taken now, an outcome when it is refused now
        (shed, channel closed), else a future of either once decided."""
        if self.take_now(octets):
            return None
        if self._closed:
            return ENDPOINT_DETACHED
        limits = self.ledger.limits
        if self.ledger.slow or len(self._waiting) >= limits.max_waiting:
            self._shed(1)
            return SHED
        future: asyncio.Future[Taken] = self._loop.create_future()
        self._waiting.append(_Waiter(octets, self._loop.time(), future))
        self._arm()
        return future

    def release(self, octets: int) -> None:
        """The endpoint answered a data of ``octets`` (or it ended otherwise)."""
        self.ledger.release(octets)
        self._wake()

    def close(self) -> None:
        """The channel is gone: waiting deliveries end as detached."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, deque()
        for waiter in waiting:
            if not waiter.future.done():
                waiter.future.set_result(ENDPOINT_DETACHED)

    def _wake(self) -> None:
        ledger = self.ledger
        waiting = self._waiting
        while waiting:
            head = waiting[0]
            if head.future.done():  # its caller stopped waiting
                waiting.popleft()
                continue
            if ledger.slow or not ledger.room(head.octets):
                return
            waiting.popleft()
            ledger.take(head.octets)
            head.future.set_result(None)

    def _arm(self) -> None:
        """One timer at the oldest waiter's slow-consumer deadline."""
        if self._timer is not None or not self._waiting:
            return
        deadline = self._waiting[0].since + self.ledger.limits.slow_after_seconds
        self._timer = self._loop.call_at(deadline, self._check)

    def _check(self) -> None:
        self._timer = None
        waiting = self._waiting
        while waiting and waiting[0].future.done():
            waiting.popleft()
        if not waiting:
            return
        if self.ledger.overdue(waiting[0].since, self._loop.time()):
            self.ledger.slow = True
            shed = 0
            while waiting:
                waiter = waiting.popleft()
                if not waiter.future.done():
                    waiter.future.set_result(SHED)
                    shed += 1
            self._shed(shed)
            return
        self._arm()

    def _shed(self, count: int) -> None:
        if count and self._on_shed is not None:
            self._on_shed(count)


#: The limits a relay uses when its settings name none.
DEFAULT_LIMITS: Final = FlowLimits()


__all__ = ["DEFAULT_LIMITS", "ChannelFlow", "FlowLimits", "Ledger", "Taken"]
