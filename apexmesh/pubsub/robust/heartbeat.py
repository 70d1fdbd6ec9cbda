"""The heartbeat schedule of a pod's robust links (XEP-0040 section 2.5).

"During times of low traffic, an active circuit can be provided with regular heartbeat
transmissions. Heartbeats will increment the link level sequence numbers." A link that
carried nothing for its topic's heartbeat interval gets a heartbeat; a delivery pushes its
next heartbeat back by a whole interval, so a busy topic sends none.

One schedule serves every link a pod sequences, with one timer: :meth:`next_deadline` is
the earliest due time, :meth:`due` the links due at ``now`` (re-armed as if their
heartbeat was sent then). A heap with lazy deletion keeps touching a link O(log n) and
finding the due ones O(due log n), however many links are idle.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar

_L = TypeVar("_L", bound=Hashable)


class HeartbeatSchedule(Generic[_L]):
    """When each link needs its next heartbeat.

    The heap holds at most one entry per link (``_armed``): a delivery only moves the
    link's true deadline later, and an entry found early is pushed again at the true
    deadline. So a busy link costs a dict write per delivery, and the heap never holds
    more than one entry per link."""

    def __init__(self) -> None:
        self._deadline: dict[_L, int] = {}
        self._interval: dict[_L, int] = {}
        self._armed: set[_L] = set()
        self._heap: list[tuple[int, int, _L]] = []
        self._counter = itertools.count()

    def __len__(self) -> int:
        return len(self._deadline)

    def __contains__(self, link: object) -> bool:
        return link in self._deadline

    def touch(self, link: _L, now_ms: int, interval_ms: int | None = None) -> None:
        """``link`` carried something at ``now_ms`` (a delivery or a heartbeat): its next
        heartbeat is one interval later. ``interval_ms`` is required the first time."""
        interval = interval_ms if interval_ms is not None else self._interval[link]
        self._interval[link] = interval
        self._deadline[link] = now_ms + interval
        if link not in self._armed:
            self._push(link, now_ms + interval)

    def remove(self, link: _L) -> None:
        """The link ended (its subscription, or this pod no longer owns the topic)."""
        self._deadline.pop(link, None)
        self._interval.pop(link, None)

    def deadline(self, link: _L) -> int | None:
        return self._deadline.get(link)

    def next_deadline(self) -> int | None:
        """The earliest time a heartbeat is due (None: no link)."""
        self._settle()
        return self._heap[0][0] if self._heap else None

    def due(self, now_ms: int) -> list[_L]:
        """The links whose heartbeat is due at ``now_ms``, earliest first; each is
        re-armed one interval after ``now_ms`` (the caller sends their heartbeats)."""
        out: list[_L] = []
        while True:
            self._settle()
            if not self._heap or self._heap[0][0] > now_ms:
                break
            _, _, link = heapq.heappop(self._heap)
            self._armed.discard(link)
            out.append(link)
        for link in out:
            self.touch(link, now_ms)
        return out

    def _push(self, link: _L, when: int) -> None:
        self._armed.add(link)
        heapq.heappush(self._heap, (when, next(self._counter), link))

    def _settle(self) -> None:
        """Make the top entry carry its link's true deadline (or drop a removed link)."""
        heap = self._heap
        while heap:
            when, _, link = heap[0]
            true = self._deadline.get(link)
            if true == when:
                return
            heapq.heappop(heap)
            self._armed.discard(link)
            if true is not None:
                self._push(link, true)


__all__ = ["HeartbeatSchedule"]
