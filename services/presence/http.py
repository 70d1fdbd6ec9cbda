"""HTTP app of the presence service: /healthz, /readyz, /metrics and the admin API.

Ready means Redis answers PING and at least one relay address is configured (without
one, no reply can leave the service).
"""

from __future__ import annotations

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from apexmesh.ops.admin import AdminSpec
from apexmesh.ops.http import create_ops_app, redis_ready
from apexmesh.rpc.relay import RelaySubmitter


def create_http_app(
    registry: CollectorRegistry,
    redis: Redis,
    relays: RelaySubmitter,
    admin: AdminSpec | None = None,
) -> FastAPI:
    ready = redis_ready(redis, relay_addresses=relays.addresses)
    return create_ops_app("presence", registry, ready, admin)


__all__ = ["create_http_app"]
