"""The answers a :class:`~apexmesh.client.robust.RobustClient` waits for on its own
operations (subscribe, cancel, resume, source query, permissions, snapshot), by transID.

The client is its attachment's only reader, so it matches every answer itself: a
``reply`` (or draft-wyman's subscription ``reply``), a ``sourceinfo``, a
``permissiontable``, and a snapshot's images with their ``gapreply``. A snapshot's
images arrive as data carrying a ``robust`` option whose ``gap`` is the snapshot's
transID and ``gapseq`` its place (docs/robust.md "snapshot"), in any order and on any
path, and the ``gapreply`` says how many there are: :class:`Snapshot` puts them in
order and is complete when all of them came, an empty snapshot as soon as its
``gapreply`` says 0.
"""

from __future__ import annotations

import asyncio
from typing import Any

from apexmesh.pubsub.robust.elements import RobustInfo
from apexmesh.pubsub.robust.stub import Publication
from apexmesh.pubsub.robust.stub_events import publication_of


class Snapshot:
    """One snapshot's images (XEP 3.1), collected in ``gapseq`` order."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._images: dict[int, Publication] = {}
        self._count: int | None = None
        self.done: asyncio.Future[list[Publication]] = asyncio.get_running_loop().create_future()

    def image(self, info: RobustInfo, payload: bytes) -> None:
        if info.gap_seq is None or info.source_seq is None or info.gap_seq in self._images:
            return
        self._images[info.gap_seq] = publication_of(self.topic, info, payload)
        self._check()

    def counted(self, count: int) -> None:
        self._count = count
        self._check()

    def _check(self) -> None:
        count = self._count
        if count is None or self.done.done():
            return
        if all(number in self._images for number in range(1, count + 1)):
            self.done.set_result([self._images[number] for number in range(1, count + 1)])


class Answers:
    """Futures of the answers waited for, by transID; snapshots beside them."""

    def __init__(self) -> None:
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self.snapshots: dict[int, Snapshot] = {}

    def expect(self, trans_id: int) -> asyncio.Future[Any]:
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[trans_id] = waiter
        return waiter

    def settle(self, trans_id: int, answer: object) -> bool:
        """Hand ``answer`` to whoever waits for ``trans_id``; False when nobody does."""
        waiter = self._waiting.get(trans_id)
        if waiter is None:
            return False
        if not waiter.done():
            waiter.set_result(answer)
        return True

    def forget(self, trans_id: int) -> None:
        self._waiting.pop(trans_id, None)
        self.snapshots.pop(trans_id, None)


__all__ = ["Answers", "Snapshot"]
