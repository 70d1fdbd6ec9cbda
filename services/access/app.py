"""Composition root of the access service: builds everything from settings, no globals.

Start order: Redis (PING), seed entries, the decision cache (subscribed before anything is
served), the gRPC server, then the admin HTTP server. Stop order is the reverse, with the
gRPC grace period first so in-flight checks finish (uvicorn's shutdown order).
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime

import grpc
from prometheus_client import Gauge
from redis.asyncio import Redis

from apexmesh.apex.access import Domains, TokenRegistry, parse_entries
from apexmesh.contracts.access.v1 import access_pb2_grpc
from apexmesh.ops.admin import AdminSpec, Guard
from apexmesh.ops.audit import AuthFailures
from apexmesh.ops.http import HttpServer
from apexmesh.ops.registry import service_registry
from apexmesh.rpc.server import create_server, graceful_stop
from apexmesh.store.access_cache import CachedAccessChecker
from apexmesh.store.access_entries import AccessEntryStore
from apexmesh.store.connection import connect_redis, keys_for
from services.access.admin import access_routers
from services.access.http import create_http_app
from services.access.servicer import AccessMetrics, AccessOperations, AccessServicer
from services.access.settings import AccessSettings

_log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


class AccessApp:
    """One running access service: Redis client, store, cache, gRPC and HTTP servers."""

    def __init__(self, settings: AccessSettings) -> None:
        self.settings = settings
        self.registry = service_registry("access")
        self.redis: Redis = connect_redis(settings.redis_url, settings.redis_pool)
        self.keys = keys_for(settings.redis_url, settings.redis_prefix)
        self.tokens = TokenRegistry().with_tokens(settings.extra_tokens)
        self.store = AccessEntryStore(self.redis, self.keys)
        self.metrics = AccessMetrics.create(self.registry)
        self.operations = AccessOperations(
            self.store,
            Domains.of(*settings.domains, known=settings.endpoints),
            self.tokens,
            operators=settings.operators,
            clock=_now,
            metrics=self.metrics,
        )
        self.checker = CachedAccessChecker(
            self.operations, self.redis, self.keys, resync_interval=settings.resync_seconds
        )
        Gauge(
            "apexmesh_access_cached_decisions",
            "Decisions held by the service's own decision cache.",
            registry=self.registry,
        ).set_function(lambda: len(self.checker))
        guard = Guard(settings.admin, AuthFailures("access", self.registry))
        self.http = HttpServer(
            create_http_app(
                self.registry,
                self.redis,
                self.checker,
                AdminSpec(
                    guard=guard,
                    pod=f"access-{os.getpid()}",
                    domains=settings.domains,
                    routers=access_routers(
                        self.store, self.tokens, frozenset(settings.domains), _now, guard
                    ),
                    details=lambda: {"grpc_port": self.grpc_port, "http_port": self.http_port},
                ),
            )
        )
        self._grpc: grpc.aio.Server | None = None
        self.grpc_port = 0
        self.http_port = 0

    async def start(self) -> None:
        await self.redis.ping()
        if self.settings.seed_file is not None:
            entries = parse_entries(self.settings.seed_file.read_bytes(), self.tokens)
            created = await self.store.seed(entries, _now())
            _log.info("seeded %d of %d access entries", created, len(entries))
        await self.checker.start()
        servicer = AccessServicer(self.operations, self.checker, self.metrics)
        self._grpc, self.grpc_port = await create_server(
            [lambda server: access_pb2_grpc.add_AccessServiceServicer_to_server(servicer, server)],
            host=self.settings.grpc_host,
            port=self.settings.grpc_port,
            registry=self.registry,
        )
        self.http_port = await self.http.start(self.settings.http_host, self.settings.http_port)

    async def stop(self) -> None:
        if self._grpc is not None:
            await graceful_stop(self._grpc, self.settings.shutdown_grace)
            self._grpc = None
        await self.http.stop()
        await self.checker.aclose()
        await self.redis.aclose()


__all__ = ["AccessApp"]
