"""Admin HTTP app of the pubsub service: /healthz, /readyz, /metrics.

Ready means Redis answers PING and at least one relay address is configured (without
one, no reply or forwarded data can leave the service).
"""

from __future__ import annotations

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from redis.exceptions import RedisError

from apexmesh.ops.http import create_ops_app
from apexmesh.rpc.relay import RelaySubmitter


def create_http_app(registry: CollectorRegistry, redis: Redis, relays: RelaySubmitter) -> FastAPI:
    async def ready() -> str | None:
        if not relays.addresses:
            return "no relay address configured (APEXMESH_RELAY_ADDRESSES)"
        try:
            await redis.ping()
        except (RedisError, OSError):
            return "redis unreachable"
        return None

    return create_ops_app("pubsub", registry, ready)


__all__ = ["create_http_app"]
