"""The test process's heap, kept out of timing tests' way, and its collector pauses seen.

Tests that run services in the test's own process (relays, access, presence) and time
them share that process's garbage collector with everything the suite created before:
a full collection walks every tracked object the earlier tests left, which a service
process never holds. :func:`frozen_heap` moves those objects into the permanent
generation for the duration of a test (``gc.freeze``), so a collection walks only what
the test itself made; :class:`CollectorPauses` records each collection that took long,
so a timing assertion can say whether the process it measured in was stopped.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Objects alive now are not walked by collections inside the block."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass
class CollectorPauses:
    """Collections longer than ``threshold`` seconds, as (wall-clock start, seconds,
    generation), while the recorder is installed."""

    threshold: float = 0.05
    seen: list[tuple[float, float, int]] = field(default_factory=list)
    _started: float = 0.0
    _wall: float = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started, self._wall = time.perf_counter(), time.time()
            return
        took = time.perf_counter() - self._started
        if took >= self.threshold:
            self.seen.append((self._wall, took, int(info.get("generation", -1))))

    @contextlib.contextmanager
    def installed(self) -> Iterator[CollectorPauses]:
        gc.callbacks.append(self._callback)
        try:
            yield self
        finally:
            gc.callbacks.remove(self._callback)


__all__ = ["CollectorPauses", "frozen_heap"]
