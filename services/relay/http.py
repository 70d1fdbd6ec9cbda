"""Admin HTTP app of the relay: /healthz, /readyz, /metrics.

Ready means: Redis answers PING (attachments and leases live there), the access decision
cache is subscribed, and the BEEP listeners are up.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from redis.exceptions import RedisError

from apexmesh.ops.http import create_ops_app
from apexmesh.store.access_cache import CachedAccessChecker


def create_http_app(
    registry: CollectorRegistry,
    redis: Redis,
    checker: CachedAccessChecker,
    listening: Callable[[], bool],
) -> FastAPI:
    async def ready() -> str | None:
        if not listening():
            return "BEEP listeners not started"
        try:
            await redis.ping()
        except (RedisError, OSError) as exc:
            return f"redis: {exc}"
        if not checker.synced:
            return "access cache not subscribed"
        return None

    return create_ops_app("relay", registry, ready)
