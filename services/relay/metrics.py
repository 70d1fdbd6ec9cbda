"""Prometheus metrics of the relay (names follow the Prometheus naming guide).

Labelled children are resolved once and kept (``count``): ``Counter.labels`` costs a lock
and a dictionary build per call, too much for a per-message path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge


@dataclass(frozen=True, slots=True)
class RelayMetrics:
    sessions: Gauge
    attachments: Gauge
    data: Counter
    deliveries: Counter
    outcomes: Counter
    _children: dict[tuple[int, str], Counter] = field(default_factory=dict)

    @classmethod
    def create(cls, registry: CollectorRegistry) -> RelayMetrics:
        return cls(
            sessions=Gauge(
                "apexmesh_relay_sessions", "Open BEEP sessions (edge and mesh).", registry=registry
            ),
            attachments=Gauge(
                "apexmesh_relay_attachments",
                "Endpoints attached to this relay pod.",
                registry=registry,
            ),
            data=Counter(
                "apexmesh_relay_data_operations",
                "Data operations received, by result (accepted or refused).",
                ["result"],
                registry=registry,
            ),
            deliveries=Counter(
                "apexmesh_relay_deliveries",
                "Deliveries dispatched, by route (local, pod, from-pod, mesh, service).",
                ["route"],
                registry=registry,
            ),
            outcomes=Counter(
                "apexmesh_relay_delivery_outcomes",
                "Delivery outcomes per recipient (delivered or the reply code).",
                ["result"],
                registry=registry,
            ),
        )

    def count(self, counter: Counter, label: str) -> None:
        """Increment ``counter``'s child for ``label`` (its only label)."""
        key = (id(counter), label)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(label)
        child.inc()
