"""The garbage collector of a service process: its thresholds, and what its pauses cost.

CPython's cyclic collector runs generation 0 every 700 net allocations, generation 1 every
10 of those and a full collection every 10 of those (when the long-lived objects grew by a
quarter). A relay or pubsub pod allocates a few objects per message for nothing but
short-lived frames, futures and parse results, almost none of them in cycles, while it
keeps large caches (attachments, decisions, parse memos, subscriber lists) that every
full collection walks again. Issue #33 measured 7-14 % of relay and pubsub CPU in the
collector, with 20-100 ms full collections, even after the start's ``gc.freeze()``.

So each service may run with thresholds of its own (:data:`DEFAULT_THRESHOLDS`, measured:
docs/operations.md "Garbage collection"), ``APEXMESH_GC_THRESHOLDS`` (``g0,g1,g2``)
overrides them, and :class:`GcPauses` exports what the collector costs:
``apexmesh_gc_pause_seconds_total{generation}`` and
``apexmesh_gc_longest_pause_seconds{generation}``, beside prometheus_client's
``python_gc_*`` counts.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator, Mapping
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from apexmesh.ops.settings import SettingsError

#: Python's own thresholds (``gc.get_threshold()`` of a fresh interpreter).
PYTHON_THRESHOLDS: Final = (700, 10, 10)

#: Per service; empty: every service keeps Python's. 50000,20,100 halved the relay's
#: collector share in the fan-out bench, but kept garbage long enough that a relay's RSS
#: did not come back after 10,000 sessions closed (tests/system/test_relay_load.py):
#: docs/operations.md "Garbage collection".
DEFAULT_THRESHOLDS: Final[Mapping[str, tuple[int, int, int]]] = {}

ENV: Final = "APEXMESH_GC_THRESHOLDS"


def thresholds(service: str, env: Mapping[str, str]) -> tuple[int, int, int]:
    """The thresholds ``service`` runs with: ``APEXMESH_GC_THRESHOLDS`` when set, else
    the measured default; raises :class:`SettingsError` naming the variable."""
    text = env.get(ENV, "").strip()
    if not text:
        return DEFAULT_THRESHOLDS.get(service, PYTHON_THRESHOLDS)
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise SettingsError(f"{ENV} must be three integers g0,g1,g2, not {text!r}") from None
    if len(values) != 3 or not 1 <= values[0] <= 10_000_000 or min(values[1:]) < 1:
        raise SettingsError(f"{ENV} must be g0,g1,g2 with 1 <= g0 <= 10000000 and g1, g2 >= 1")
    return values[0], values[1], values[2]


class GcPauses(Collector):
    """Times every collection (``gc.callbacks``) and exports the totals per generation.

    Times are the collecting thread's CPU time (``time.thread_time``), not the wall
    clock: on a busy machine a collection may wait for a core, which is not its cost.
    One per process: the collector is process-wide, so is what it costs. Installed by
    :meth:`install`, which is idempotent."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self._started = 0.0
        self._installed = False

    def install(self) -> GcPauses:
        if not self._installed:
            gc.callbacks.append(self._callback)
            self._installed = True
        return self

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._callback)
            self._installed = False

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
            return
        generation = info.get("generation", 2)
        pause = time.thread_time() - self._started
        self.seconds[generation] += pause
        self.collections[generation] += 1
        self.longest[generation] = max(self.longest[generation], pause)

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        total = CounterMetricFamily(
            "apexmesh_gc_pause_seconds",
            "CPU seconds the cyclic garbage collector ran, per generation collected.",
            labels=["generation"],
        )
        longest = GaugeMetricFamily(
            "apexmesh_gc_longest_pause_seconds",
            "The longest collection of each generation since the process started (CPU s).",
            labels=["generation"],
        )
        for generation in range(3):
            total.add_metric([str(generation)], self.seconds[generation])
            longest.add_metric([str(generation)], self.longest[generation])
        yield total
        yield longest


#: The process's one timer (the collector it watches is process-wide too).
GC_PAUSES: Final = GcPauses()


__all__ = ["DEFAULT_THRESHOLDS", "ENV", "GC_PAUSES", "PYTHON_THRESHOLDS", "GcPauses", "thresholds"]
