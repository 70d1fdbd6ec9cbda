"""HTTP app of the access service: /healthz, /readyz, /metrics and the admin API.

Readiness means: Redis answers PING and the decision cache is subscribed to the change
channel (without the subscription Check would bypass the cache, which is correct but
slow, so the pod is taken out of rotation until it is back).
"""

from __future__ import annotations

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
    admin: AdminSpec | None = None,
) -> FastAPI:
    def subscribed() -> str | None:
        return None if checker.synced else "access cache not subscribed"

    return create_ops_app("access", registry, redis_ready(redis, also=subscribed), admin)


__all__ = ["create_http_app"]
