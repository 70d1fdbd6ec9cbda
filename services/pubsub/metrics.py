"""The pubsub pod's Prometheus metrics (one registry per pod, no globals)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from apexmesh.store.pubsub import PubsubStore


@dataclass(frozen=True, slots=True)
class PubsubMetrics:
    operations: Counter
    publications: Counter
    forwarded: Counter
    sent: Counter
    expired: Counter
    #: Fan-out data a relay never took, by why (every one of them, always).
    fanout_failures: Counter
    topics: Gauge
    subscriptions: Gauge
    selector_match: Histogram

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
            topics=Gauge(
                "apexmesh_pubsub_topics",
                "Topics of a domain (exported by the domain's leader pod only, so that a "
                "sum over pods counts each once).",
                ["domain"],
                registry=registry,
            ),
            subscriptions=Gauge(
                "apexmesh_pubsub_subscriptions",
                "Subscriptions of a domain's topics (leader pod only, as for topics).",
                ["domain"],
                registry=registry,
            ),
            selector_match=Histogram(
                "apexmesh_pubsub_selector_match_seconds",
                "Time to match one publication against a topic's content selectors "
                "(content-based pubsub).",
                buckets=(0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1),
                registry=registry,
            ),
        )

    async def count(self, store: PubsubStore, domains: Iterable[str], leading: set[str]) -> None:
        """Refresh the topic and subscription gauges of the domains this pod leads;
        drop those it no longer leads."""
        for domain in domains:
            if domain not in leading:
                for gauge in (self.topics, self.subscriptions):
                    with contextlib.suppress(KeyError):  # never set here
                        gauge.remove(domain)
                continue
            topics, subscriptions = await store.counts(domain)
            self.topics.labels(domain).set(topics)
            self.subscriptions.labels(domain).set(subscriptions)


__all__ = ["PubsubMetrics"]
