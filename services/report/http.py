"""HTTP app of the report service: /healthz, /readyz, /metrics and the admin API.

Readiness means at least one relay address is configured: without one every Report is
answered 421, so the pod is kept out of rotation. Relays are not probed here (nor per
request); gRPC channels reconnect by themselves and a relay that is down is skipped by
the failover of :class:`services.report.servicer.RelayPool`.
"""

from __future__ import annotations

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from apexmesh.ops.admin import AdminSpec
from apexmesh.ops.http import create_ops_app
from services.report.servicer import RelayPool


def create_http_app(
    registry: CollectorRegistry, relays: RelayPool, admin: AdminSpec | None = None
) -> FastAPI:
    async def ready() -> str | None:
        if not relays.addresses:
            return "no relay address configured (APEXMESH_RELAY_ADDRESSES)"
        return None

    return create_ops_app("report", registry, ready, admin)


__all__ = ["create_http_app"]
