"""Composition root of the pubsub service: builds everything from settings, no globals.

Start order: Redis (PING), the access cache (subscribed to access changes before it
answers), the subscriber cache (following the event log before it answers), the
catalogue's load in the background (never waited for: docs/snapshot.md), the access,
presence and relay channels (lazy), the gRPC server, the lease loop, then the admin HTTP
server. Stop order is the reverse: gRPC first (with its grace
period), then the loop, then the pod's lease is given up so the leader redoes at once
whatever this pod left in the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import replace

import grpc
from prometheus_client import Gauge
from redis.asyncio import Redis
from redis.exceptions import RedisError

from apexmesh.aio.tasks import stop_tasks
from apexmesh.contracts.endpoint.v1 import endpoint_pb2_grpc
from apexmesh.contracts.presence.v1 import presence_pb2_grpc
from apexmesh.ops.admin import AdminSpec, Guard
from apexmesh.ops.audit import AuthFailures
from apexmesh.ops.http import HttpServer
from apexmesh.ops.logs import failure
from apexmesh.ops.registry import service_registry
from apexmesh.ops.settings import WILDCARD_HOSTS, SettingsError
from apexmesh.pubsub.schema import LocalSchemas, SchemaCache
from apexmesh.pubsub.selection.registry import default_classes
from apexmesh.pubsub.topic_index import SelectorCompiler
from apexmesh.rpc.access import AccessClient
from apexmesh.rpc.observe import observed_channel
from apexmesh.rpc.relay import RelaySubmitter
from apexmesh.rpc.retry import SUBMIT
from apexmesh.rpc.server import create_server, graceful_stop
from apexmesh.store.access_cache import CachedAccessChecker
from apexmesh.store.connection import connect_redis, keys_for
from apexmesh.store.pubsub import PubsubStore
from apexmesh.store.pubsub_cache import SubscriberCache
from apexmesh.store.pubsub_leader import elector_for
from apexmesh.store.pubsub_messages import MessageStore
from apexmesh.store.pubsub_snapshot import CatalogueSource, SnapshotStore
from services.pubsub.admin import pubsub_routers
from services.pubsub.catalogue_admin import catalogue_router
from services.pubsub.content import ContentSelection
from services.pubsub.endpoint import PubsubEndpointServicer
from services.pubsub.http import create_http_app
from services.pubsub.metrics import PubsubMetrics
from services.pubsub.servicer import PubsubService
from services.pubsub.settings import PubsubSettings

_log = logging.getLogger(__name__)

#: Connections from relays end after a minute (calls in flight get their full timeout
#: to finish): a relay then resolves the pubsub Service again and spreads its calls over
#: the pods an autoscaler added meanwhile (services/relay/app.py, round_robin).
CONNECTION_AGE_OPTIONS = (
    ("grpc.max_connection_age_ms", 60_000),
    ("grpc.max_connection_age_grace_ms", 45_000),
)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class PubsubApp:
    """One running pubsub pod: Redis, gRPC and HTTP servers, the lease loop."""

    def __init__(self, settings: PubsubSettings) -> None:
        self.settings = settings
        self.registry = service_registry("pubsub")
        self.redis: Redis = connect_redis(settings.redis_url, settings.redis_pool)
        self.keys = keys_for(settings.redis_url, settings.redis_prefix)
        self.store = PubsubStore(self.redis, self.keys, settings.pod_id)
        self.metrics = PubsubMetrics.create(self.registry)
        self.subscribers = SubscriberCache(
            self.redis,
            self.keys,
            clock=now_ms,
            topics=settings.cached_topics,
            placement_ttl_ms=settings.placement_ttl_ms,
        )
        #: The whole catalogue (snapshot + later events: docs/snapshot.md), loaded in the
        #: background once the pod serves; not on the delivery path.
        self.catalogue = CatalogueSource(SnapshotStore(self.redis, self.keys), clock=now_ms)
        #: Submits out at once, shared by every submitter of the pod (flow control).
        limit = asyncio.Semaphore(settings.max_submits)
        policy = replace(SUBMIT, attempts=settings.submit_attempts)
        self.relays = RelaySubmitter(
            settings.relay_addresses,
            timeout=settings.relay_timeout,
            policy=policy,
            limit=limit,
        )
        self.fanout = RelaySubmitter(
            settings.relay_addresses,
            timeout=settings.fanout_timeout,
            policy=policy,
            limit=limit,
        )
        #: Per relay pod, for forwarded data sent to the pod holding its recipients.
        self.direct = {
            address: RelaySubmitter(
                [address], timeout=settings.fanout_timeout, policy=policy, limit=limit
            )
            for address in settings.relay_addresses
        }
        self.guard = Guard(settings.admin, AuthFailures("pubsub", self.registry))
        self.http: HttpServer | None = None
        self._expiry_lag = Gauge(
            "apexmesh_pubsub_lease_expiry_lag_seconds",
            "How far past due the next subscription lease end is after the leader's round "
            "(0 when on time, and on pods that do not lead).",
            registry=self.registry,
        )
        self.service: PubsubService | None = None
        self._channels: list[grpc.aio.Channel] = []
        self._cache: CachedAccessChecker | None = None
        self._grpc: grpc.aio.Server | None = None
        self._loop: asyncio.Task[None] | None = None
        self._alive: asyncio.Task[None] | None = None
        #: Robust topics' leases and heartbeats (docs/robust.md).
        self._robust: asyncio.Task[None] | None = None
        self.grpc_port = 0
        self.http_port = 0

    async def start(self) -> None:
        await self.redis.ping()
        settings = self.settings
        access_channel = observed_channel(settings.access_address)
        self._channels.append(access_channel)
        access = AccessClient(access_channel, timeout=settings.relay_timeout)
        self._cache = CachedAccessChecker(access, self.redis, self.keys)
        await self._cache.start()
        await self.subscribers.start()
        if settings.catalogue == "eager":
            self.catalogue.start()
        presence = None
        if settings.presence_address:
            presence_channel = observed_channel(settings.presence_address)
            self._channels.append(presence_channel)
            presence = presence_pb2_grpc.PresenceServiceStub(presence_channel)
        try:
            local = LocalSchemas(dict(settings.schemas))
        except ValueError as exc:
            raise SettingsError(f"APEXMESH_PUBSUB_SCHEMAS: {exc}") from None
        selection = ContentSelection(
            compiler=SelectorCompiler(default_classes(), SchemaCache(local)),
            messages=MessageStore(self.redis, self.keys),
            metrics=self.metrics,
            clock=now_ms,
            max_octets=settings.max_message_octets,
            lifetime_ms=settings.message_lifetime_ms,
        )
        service = PubsubService(
            domains=settings.domains,
            store=self.store,
            access=access,
            access_cache=self._cache,
            relays=self.relays,
            cache=self.subscribers,
            fanout=self.fanout,
            direct=self.direct,
            presence=presence,
            metrics=self.metrics,
            clock=now_ms,
            lease_ms=settings.lease_ms,
            grant_data=settings.grant_data,
            hops=settings.hops,
            upstreams=settings.upstreams,
            upstream_duration=settings.upstream_duration,
            timeout=settings.relay_timeout,
            elector=elector_for(
                settings.leader_election,
                self.store,
                settings.pod_id,
                settings.redis_prefix,
                settings.namespace,
            ),
            selection=selection,
        )
        self.service = service
        # A redistributed robust topic is taken from its upstream by a stub of this
        # server's (services/pubsub/robust_upstream.py), answers included.
        service.robust.redistribute(settings.upstreams)
        service.redistribution.robust_answer = service.robust.upstream_answer
        Gauge(
            "apexmesh_pubsub_leader",
            "1 while this pod ends leases and redoes orphaned work.",
            registry=self.registry,
        ).set_function(lambda: 1.0 if service.leader else 0.0)
        self._grpc, self.grpc_port = await create_server(
            [
                lambda server: endpoint_pb2_grpc.add_WellKnownEndpointServicer_to_server(
                    PubsubEndpointServicer(service), server
                ),
            ],
            host=settings.grpc_host,
            port=settings.grpc_port,
            options=CONNECTION_AGE_OPTIONS,
            registry=self.registry,
        )
        service.robust.advertise(self.advertised())
        await service.keep_alive()
        self._alive = asyncio.create_task(self._keep_alive(service), name="pubsub-alive")
        self._robust = asyncio.create_task(service.robust.run(), name="pubsub-robust")
        self._loop = asyncio.create_task(self._run_timers(service), name="pubsub-leases")
        self.http = HttpServer(
            create_http_app(
                self.registry,
                self.redis,
                self.relays,
                AdminSpec(
                    guard=self.guard,
                    pod=settings.pod_id,
                    domains=settings.domains,
                    routers=[
                        *pubsub_routers(service, self.catalogue, settings.pod_id, self.guard),
                        catalogue_router(self.catalogue, settings.domains, self.guard),
                    ],
                    details=lambda: {
                        "grpc_port": self.grpc_port,
                        "http_port": self.http_port,
                        "leading": sorted(service.leading),
                        "relays": list(settings.relay_addresses),
                    },
                ),
            )
        )
        self.http_port = await self.http.start(settings.http_host, settings.http_port)

    def advertised(self) -> str:
        """Where other pods forward robust publications to (settings, else the bound
        host, ``POD_IP`` in place of a wildcard, and the port bound)."""
        if self.settings.advertise_address:
            return self.settings.advertise_address
        host = self.settings.grpc_host
        if host in WILDCARD_HOSTS:
            host = os.environ.get("POD_IP", "") or socket.gethostbyname(socket.gethostname())
        return f"{host}:{self.grpc_port}"

    async def _keep_alive(self, service: PubsubService) -> None:
        """Pod lease and leader locks, every third of the lease."""
        while True:
            try:
                await service.keep_alive()
                await self.metrics.count(self.store, service.domains, service.leading)
            except (RedisError, OSError) as exc:
                _log.warning("lease renewal: %s", failure(exc))
            await asyncio.sleep(self.settings.lease_ms / 3000)

    async def _run_timers(self, service: PubsubService) -> None:
        """The lease loop: sleep at most a tick, less when a lease ends sooner."""
        tick = self.settings.tick_seconds
        while True:
            try:
                await service.tick()
                delay = tick
                lag = 0.0
                if service.leader:
                    due = await service.next_timer()
                    if due is not None:
                        delay = min(tick, max(0.0, (due - now_ms()) / 1000))
                        lag = max(0.0, (now_ms() - due) / 1000)
                self._expiry_lag.set(lag)
            except (RedisError, OSError) as exc:
                _log.warning("lease loop: %s", failure(exc))
                delay = tick
            except Exception:  # noqa: BLE001 - the loop must outlive one bad round
                _log.exception("lease loop")
                delay = tick
            await asyncio.sleep(delay)

    async def stop(self) -> None:
        if self._grpc is not None:
            await graceful_stop(self._grpc, self.settings.shutdown_grace)
            self._grpc = None
        await stop_tasks((self._loop, self._alive, self._robust))
        self._loop = self._alive = self._robust = None
        if self.service is not None:
            await self.service.journal.aclose()
            with contextlib.suppress(RedisError, OSError):
                await self.service.robust.aclose()
        with contextlib.suppress(RedisError, OSError):
            if self.service is not None:
                await self.service.resign()
            await self.store.leave()
        if self.http is not None:
            await self.http.stop()
        if self._cache is not None:
            await self._cache.aclose()
            self._cache = None
        await self.subscribers.aclose()
        await self.catalogue.aclose()
        await self.relays.aclose()
        await self.fanout.aclose()
        for submitter in self.direct.values():
            await submitter.aclose()
        for channel in self._channels:
            await channel.close()
        self._channels.clear()
        await self.redis.aclose()


__all__ = ["PubsubApp", "now_ms"]
