"""HTTP app of the relay: /healthz, /readyz, /metrics and the admin API (/admin).

Ready means: Redis answers PING (attachments and leases live there), the access decision
cache is subscribed, the BEEP listeners are up, and the pod is not draining.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from apexmesh.ops.admin import AdminSpec
from apexmesh.ops.http import create_ops_app, redis_ready
from apexmesh.store.access_cache import CachedAccessChecker


def create_http_app(
    registry: CollectorRegistry,
    redis: Redis,
    checker: CachedAccessChecker,
    listening: Callable[[], bool],
    draining: Callable[[], bool],
    admin: AdminSpec | None = None,
) -> FastAPI:
    def serving() -> str | None:
        if draining():
            return "draining: not accepting new sessions"
        if not listening():
            return "BEEP listeners not started"
        return None if checker.synced else "access cache not subscribed"

    return create_ops_app("relay", registry, redis_ready(redis, also=serving), admin)
