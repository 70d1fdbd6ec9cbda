"""Leader election over a Kubernetes Lease (coordination.k8s.io/v1), sans I/O.

One pubsub pod per domain ends leases and redoes orphaned journal entries (docs/pubsub.md).
In a cluster the leader holds a Lease object, the way client-go's leaderelection does it:
the holder renews ``renewTime`` well within ``leaseDurationSeconds``; anyone may take a
Lease whose renewal is overdue; every write carries the ``resourceVersion`` it read, so of
two pods racing for the same Lease the API server lets one win (409 for the other).

:func:`decide` is that rule as a pure function of the Lease read and the time; the
adapter (:mod:`apexmesh.store.pubsub_leader`) does the reading and writing. Correctness of
lease expiry never depends on a single leader (the Redis claim script ends each lease
once, whoever runs it): the election only keeps the work on one pod.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

#: What a pod does after reading the Lease.
Action = Literal["create", "renew", "take", "follow"]

#: Longest Kubernetes object name (DNS-1123 subdomain).
MAX_NAME: Final = 253

_NOT_NAME: Final = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRecord:
    """The parts of a Lease that matter here."""

    #: ``spec.holderIdentity``; "" when released.
    holder: str
    #: ``spec.renewTime`` in ms since the epoch (0 when absent).
    renew_ms: int
    #: ``spec.leaseDurationSeconds`` in ms.
    duration_ms: int


def decide(current: LeaseRecord | None, pod: str, now_ms: int) -> Action:
    """``create`` when there is no Lease, ``renew`` when this pod holds it, ``take`` when
    it is released or its holder's renewal is overdue, else ``follow``."""
    if current is None:
        return "create"
    if current.holder == pod:
        return "renew"
    if not current.holder or current.renew_ms + current.duration_ms < now_ms:
        return "take"
    return "follow"


def lease_name(prefix: str, domain: str) -> str:
    """The Lease object's name for one domain: ``<prefix>-pubsub-<domain>`` in DNS-1123
    form (``apexmesh-pubsub-example-com``)."""
    text = _NOT_NAME.sub("-", f"{prefix}-pubsub-{domain}".lower())
    text = re.sub("-{2,}", "-", text).strip("-")
    return text[:MAX_NAME].rstrip("-")


__all__ = ["Action", "LeaseRecord", "decide", "lease_name"]
