"""Composition root of the presence service: builds everything from settings, no globals.

Start order: Redis (PING), the stored state (entries, operations, attachments) into the
core, the access and relay channels (lazy), the gRPC server, the timer loop, then the
admin HTTP server. Stop order is the reverse, with the gRPC grace period first.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import UTC, datetime

import grpc
from prometheus_client import Gauge
from redis.asyncio import Redis
from redis.exceptions import RedisError

from apexmesh.aio.tasks import stop_task
from apexmesh.contracts.endpoint.v1 import endpoint_pb2_grpc
from apexmesh.contracts.presence.v1 import presence_pb2_grpc
from apexmesh.ops.admin import AdminSpec, Guard
from apexmesh.ops.audit import AuthFailures
from apexmesh.ops.http import HttpServer
from apexmesh.ops.registry import service_registry
from apexmesh.rpc.access import AccessClient
from apexmesh.rpc.observe import observed_channel
from apexmesh.rpc.relay import RelaySubmitter
from apexmesh.rpc.server import create_server, graceful_stop
from apexmesh.store.connection import connect_redis, keys_for
from apexmesh.store.presence import PresenceStore
from services.presence.admin import presence_routers
from services.presence.http import create_http_app
from services.presence.servicer import (
    PresenceEndpointServicer,
    PresenceMetrics,
    PresenceService,
    PresenceServicer,
)
from services.presence.settings import PresenceSettings

_log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


class PresenceApp:
    """One running presence service: Redis, core, gRPC and HTTP servers, timer loop."""

    def __init__(self, settings: PresenceSettings) -> None:
        self.settings = settings
        self.registry = service_registry("presence")
        self.redis: Redis = connect_redis(settings.redis_url, settings.redis_pool)
        self.keys = keys_for(settings.redis_url, settings.redis_prefix)
        self.store = PresenceStore(self.redis, self.keys)
        self.metrics = PresenceMetrics.create(self.registry)
        self.relays = RelaySubmitter(settings.relay_addresses, timeout=settings.relay_timeout)
        guard = Guard(settings.admin, AuthFailures("presence", self.registry))
        self.http = HttpServer(
            create_http_app(
                self.registry,
                self.redis,
                self.relays,
                AdminSpec(
                    guard=guard,
                    pod=f"presence-{os.getpid()}",
                    domains=settings.domains,
                    routers=presence_routers(
                        lambda: None if self.service is None else self.service.core, guard
                    ),
                    details=lambda: {"grpc_port": self.grpc_port, "http_port": self.http_port},
                ),
            )
        )
        self.service: PresenceService | None = None
        self._access_channel: grpc.aio.Channel | None = None
        self._grpc: grpc.aio.Server | None = None
        self._loop: asyncio.Task[None] | None = None
        self.grpc_port = 0
        self.http_port = 0

    async def start(self) -> None:
        await self.redis.ping()
        core = await self.store.load(self.settings.domains)
        _log.info(
            "loaded %d presence entries, %d operations", len(core.entries), len(core.operations)
        )
        self._access_channel = observed_channel(self.settings.access_address)
        access = AccessClient(self._access_channel, timeout=self.settings.relay_timeout)
        service = PresenceService(core, self.store, access, self.relays, self.metrics, _now)
        self.service = service
        Gauge(
            "apexmesh_presence_operations_in_progress",
            "Subscribe and watch operations in progress.",
            registry=self.registry,
        ).set_function(lambda: len(core.operations))
        self._grpc, self.grpc_port = await create_server(
            [
                lambda server: presence_pb2_grpc.add_PresenceServiceServicer_to_server(
                    PresenceServicer(service), server
                ),
                lambda server: endpoint_pb2_grpc.add_WellKnownEndpointServicer_to_server(
                    PresenceEndpointServicer(service), server
                ),
            ],
            host=self.settings.grpc_host,
            port=self.settings.grpc_port,
            registry=self.registry,
        )
        self._loop = asyncio.create_task(self._run_timers(service))
        self.http_port = await self.http.start(self.settings.http_host, self.settings.http_port)

    async def _run_timers(self, service: PresenceService) -> None:
        """Call the core with the time: durations end, lapsed leases become detaches."""
        tick = self.settings.tick_seconds
        while True:
            try:
                await service.tick()
                await service.check_leases()
            except (RedisError, OSError) as exc:
                _log.warning("timer loop: %s", exc)
            except Exception:  # noqa: BLE001 - the loop must outlive one bad round
                _log.exception("timer loop")
            timer = service.core.get_timer()
            delay = tick
            if timer is not None:
                delay = min(tick, max(0.0, (timer - _now()).total_seconds()))
            await asyncio.sleep(delay)

    async def stop(self) -> None:
        if self._grpc is not None:
            await graceful_stop(self._grpc, self.settings.shutdown_grace)
            self._grpc = None
        await stop_task(self._loop)
        self._loop = None
        await self.http.stop()
        await self.relays.aclose()
        if self._access_channel is not None:
            await self._access_channel.close()
            self._access_channel = None
        await self.redis.aclose()


__all__ = ["PresenceApp"]
