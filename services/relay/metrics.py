"""Prometheus metrics of the relay (names follow the Prometheus naming guide).

Labelled children are resolved once and kept (``count``): ``Counter.labels`` costs a lock
and a dictionary build per call, too much for a per-message path. The counters every
data moves (data operations, deliveries, outcomes) are loop counters
(:mod:`apexmesh.ops.counters`): plain integers, read when scraped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from prometheus_client import CollectorRegistry, Counter, Gauge

from apexmesh.ops.counters import CounterChild, LoopCounter


@dataclass(frozen=True, slots=True)
class RelayMetrics:
    sessions: Gauge
    attachments: Gauge
    data: LoopCounter
    deliveries: LoopCounter
    outcomes: LoopCounter
    timing_reports: Counter
    deadline_misses: Counter
    held: Counter
    held_count: Gauge
    held_bytes: Gauge
    held_oldest_age: Gauge
    tls_expiry: Gauge
    _children: dict[tuple[int, str], Counter | CounterChild] = field(default_factory=dict)

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
            data=LoopCounter(
                "apexmesh_relay_data_operations",
                "Data operations received, by result (accepted or refused).",
                ["result"],
                registry=registry,
            ),
            deliveries=LoopCounter(
                "apexmesh_relay_deliveries",
                "Deliveries dispatched, by route (local, pod, from-pod, mesh, service).",
                ["route"],
                registry=registry,
            ),
            outcomes=LoopCounter(
                "apexmesh_relay_delivery_outcomes",
                "Delivery outcomes per recipient (delivered or the reply code).",
                ["result"],
                registry=registry,
            ),
            timing_reports=Counter(
                "apexmesh_relay_timing_reports",
                "dataTiming reports sent (RFC 3342 section 2), by kind: final_hop (250), "
                "timing_error (550), transient (350).",
                ["kind"],
                registry=registry,
            ),
            deadline_misses=Counter(
                "apexmesh_relay_deadline_misses",
                "Recipients whose dataTiming noLaterThan was reached, or predicted unmeetable.",
                ["cause"],
                registry=registry,
            ),
            held=Counter(
                "apexmesh_relay_held_data",
                "hold4Endpoint events at this pod: held, refused (quota or policy), "
                "delivered (drained after the endpoint's ok), expired.",
                ["event"],
                registry=registry,
            ),
            held_count=Gauge(
                "apexmesh_relay_held_entries",
                "Data held for endpoints that are not attached, per domain (from Redis).",
                ["domain"],
                registry=registry,
            ),
            held_bytes=Gauge(
                "apexmesh_relay_held_bytes",
                "Payload octets held for endpoints that are not attached, per domain.",
                ["domain"],
                registry=registry,
            ),
            held_oldest_age=Gauge(
                "apexmesh_relay_held_oldest_age_seconds",
                "Age of the oldest held data per domain (0 when none is held).",
                ["domain"],
                registry=registry,
            ),
            tls_expiry=Gauge(
                "apexmesh_relay_tls_certificate_expiry_timestamp_seconds",
                "notAfter of the TLS certificate the relay serves, as a Unix time (the "
                "chart alerts before it).",
                registry=registry,
            ),
        )

    def serving(self, certificate: Path) -> None:
        """Record the expiry of the certificate now served (the first of the PEM file)."""
        served = x509.load_pem_x509_certificate(certificate.read_bytes())
        self.tls_expiry.set(served.not_valid_after_utc.timestamp())

    def count(self, counter: Counter | LoopCounter, label: str, amount: int = 1) -> None:
        """Increment ``counter``'s child for ``label`` (its only label)."""
        key = (id(counter), label)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(label)
        child.inc(amount)
