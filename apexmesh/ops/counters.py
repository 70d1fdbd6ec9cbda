"""Prometheus counters for the per-message path: plain integers, read when scraped.

:class:`prometheus_client.Counter` takes a lock and checks its state on every increment
(about half a microsecond), which a relay pays several times per data. A service's
counters are incremented on its event loop only, and ``/metrics`` is served on that loop
too, so a counter here is an integer per label set, exposed as a Prometheus counter
family (``NAME_total``) by a collector registered like any other metric.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector


class CounterChild:
    """One label set's count."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        """Add ``amount`` (a counter never goes down)."""
        if amount < 0:
            raise ValueError("counters only increase")
        self.value += amount


class LoopCounter(Collector):
    """A labelled counter for code running on one event loop (see the module docstring)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry | None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], CounterChild] = {}
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> CounterChild:
        """The child for one value per label name."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}")
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = CounterChild()
        return child

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in self._children.items():
            family.add_metric(values, child.value)
        yield family

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)


__all__ = ["CounterChild", "LoopCounter"]
