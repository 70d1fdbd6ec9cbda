"""HTTP app of the relay: /healthz, /readyz, /metrics and the admin API (/admin).

Ready means: Redis answers PING (attachments and leases live there), the access decision
cache is subscribed, the BEEP listeners are up, the pod is not draining, and the access
service answers. The relay fails closed without access (attaches and data to uncached
recipients get 421), so a pod that cannot reach it says so here and is taken out of its
Service until it can.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import grpc
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from apexmesh.aio.tasks import within
from apexmesh.ops.admin import AdminSpec
from apexmesh.ops.http import create_ops_app, redis_ready
from apexmesh.rpc.access import AccessClient
from apexmesh.store.access_cache import CachedAccessChecker

#: Seconds the readiness probe waits for the access service.
ACCESS_PROBE_SECONDS: Final = 1.0


def create_http_app(
    registry: CollectorRegistry,
    redis: Redis,
    checker: CachedAccessChecker,
    listening: Callable[[], bool],
    draining: Callable[[], bool],
    access: AccessClient,
    admin: AdminSpec | None = None,
) -> FastAPI:
    def serving() -> str | None:
        if draining():
            return "draining: not accepting new sessions"
        if not listening():
            return "BEEP listeners not started"
        return None if checker.synced else "access cache not subscribed"

    local = redis_ready(redis, also=serving)

    async def ready() -> str | None:
        reason = await local()
        if reason is not None:
            return reason
        try:
            await within(access.version(), ACCESS_PROBE_SECONDS)
        except (grpc.aio.AioRpcError, TimeoutError) as exc:
            detail = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else "no answer"
            return f"access service unreachable ({detail})"
        return None

    return create_ops_app("relay", registry, ready, admin)
