"""The last hour of every pod's rates, kept in the dashboard's memory (sans I/O).

The rate charts (issue #31) need history but not a database: one sample per poll and
per rate, in a ring of an hour's worth, is a few hundred kilobytes for a mesh of dozens
of pods. A restart of the dashboard starts the charts afresh; Prometheus (the chart's
ServiceMonitor) is the place for longer history.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

#: Seconds of history kept.
WINDOW_SECONDS: Final = 3600.0
#: Points a series is reduced to for a chart (one per 10 s over the hour).
CHART_POINTS: Final = 360


@dataclass(slots=True)
class RateHistory:
    """Samples ``(time, value)`` per (pod, rate), an hour's worth at most."""

    poll_seconds: float
    window_seconds: float = WINDOW_SECONDS
    _series: dict[tuple[str, str], deque[tuple[float, float]]] = field(default_factory=dict)

    @property
    def capacity(self) -> int:
        return max(1, math.ceil(self.window_seconds / max(self.poll_seconds, 0.01)) + 1)

    def add(self, pod: str, at: float, rates: Mapping[str, float]) -> None:
        for key, value in rates.items():
            ring = self._series.get((pod, key))
            if ring is None:
                ring = self._series[(pod, key)] = deque(maxlen=self.capacity)
            ring.append((at, value))

    def keys(self, pod: str) -> list[str]:
        return sorted(key for who, key in self._series if who == pod)

    def series(
        self, pod: str, key: str, now: float, points: int = CHART_POINTS
    ) -> list[tuple[float, float]]:
        """The samples of the window ending at ``now``, averaged into at most
        ``points`` buckets of equal time (a bucket without samples is left out)."""
        ring = self._series.get((pod, key))
        if not ring:
            return []
        start = now - self.window_seconds
        step = self.window_seconds / points
        sums: dict[int, list[float]] = {}
        for at, value in ring:
            if at < start:
                continue
            bucket = min(points - 1, int((at - start) / step))
            acc = sums.setdefault(bucket, [0.0, 0.0])
            acc[0] += value
            acc[1] += 1
        return [
            (round(start + (b + 0.5) * step, 3), round(total / n, 3))
            for b, (total, n) in sorted(sums.items())
        ]

    def totals(self, pods: list[str], key: str, now: float) -> list[tuple[float, float]]:
        """The sum over ``pods`` of one rate, per bucket (the overview's chart)."""
        merged: dict[float, float] = {}
        for pod in pods:
            for at, value in self.series(pod, key, now):
                merged[at] = merged.get(at, 0.0) + value
        return [(at, round(value, 3)) for at, value in sorted(merged.items())]


__all__ = ["CHART_POINTS", "WINDOW_SECONDS", "RateHistory"]
