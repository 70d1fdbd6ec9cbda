"""The pubsub pod's Prometheus metrics (one registry per pod, no globals)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter


@dataclass(frozen=True, slots=True)
class PubsubMetrics:
    operations: Counter
    publications: Counter
    forwarded: Counter
    sent: Counter
    expired: Counter
    #: Fan-out data a relay never took, by why (every one of them, always).
    fanout_failures: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> PubsubMetrics:
        return cls(
            operations=Counter(
                "apexmesh_pubsub_operations",
                "Operations handled, by operation and reply code.",
                ["operation", "code"],
                registry=registry,
            ),
            publications=Counter(
                "apexmesh_pubsub_publications",
                "Data received for a topic, by the code answered.",
                ["code"],
                registry=registry,
            ),
            forwarded=Counter(
                "apexmesh_pubsub_forwarded_recipients",
                "Recipients named in data forwarded to subscribers.",
                registry=registry,
            ),
            sent=Counter(
                "apexmesh_pubsub_sent",
                "Elements originated by apex=pubsub, by relay answer code.",
                ["code"],
                registry=registry,
            ),
            expired=Counter(
                "apexmesh_pubsub_leases_expired",
                "Subscriptions ended because their duration ran out.",
                registry=registry,
            ),
            fanout_failures=Counter(
                "apexmesh_pubsub_fanout_failures",
                "Fan-out data no relay took after every retry (the publication is answered "
                "with the code, never ok), by reason: unavailable (no relay reachable), "
                "aborted (calls cut off, outcome unknown), refused (a relay's error code).",
                ["reason"],
                registry=registry,
            ),
        )


__all__ = ["PubsubMetrics"]
