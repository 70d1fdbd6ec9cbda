"""The Prometheus registry of one service, with the standard collectors on.

Each service owns a :class:`prometheus_client.CollectorRegistry` (tests run several
services in one process, so the global default registry is not used). This adds what
the default registry would have had: ``process_*`` (CPU seconds, resident memory, open
file descriptors, start time), ``python_info`` and ``python_gc_*``; the collector's
pauses (``apexmesh_gc_pause_seconds_total``, :mod:`apexmesh.ops.gc_tuning`); and
``apexmesh_build_info{service, version}`` (always 1), which dashboards join on.
"""

from __future__ import annotations

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Info,
)

from apexmesh import __version__
from apexmesh.ops.gc_tuning import GC_PAUSES


def service_registry(service: str) -> CollectorRegistry:
    """A registry for ``service`` with the process, platform and GC collectors."""
    registry = CollectorRegistry()
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR, GC_PAUSES):
        registry.register(collector)
    Info("apexmesh_build", "The apex-mesh version a service runs.", registry=registry).info(
        {"service": service, "version": __version__}
    )
    return registry


__all__ = ["service_registry"]
