"""Prometheus metrics of the relay (names follow the Prometheus naming guide)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge


@dataclass(frozen=True, slots=True)
class RelayMetrics:
    sessions: Gauge
    attachments: Gauge
    data: Counter
    deliveries: Counter
    outcomes: Counter

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
                "Deliveries dispatched, by route (local, pod, mesh, service).",
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
