"""Composition root of the relay: everything built from settings, no module globals.

Start order: Redis (PING), the access decision cache, the gRPC server (other pods and
services reach this pod), the attachment lease loop, the BEEP listeners (apex-edge and
apex-mesh), then the admin HTTP server. Stop order: listeners first (no new sessions),
release every session and attachment, then gRPC with its grace period, clients, Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
import time
from collections.abc import Callable
from typing import Final

import grpc
from redis.asyncio import Redis

from apexmesh.aio import BeepConnection, Channel, listen
from apexmesh.aio.tasks import within
from apexmesh.apex.associations import Binding
from apexmesh.apex.holding import HOLD_FOR_ENDPOINT, TIMING_OPTIONS
from apexmesh.apex.options import STATUS_REQUEST, OptionRegistry
from apexmesh.apex.party import PARTY_OPTIONS
from apexmesh.beep.sasl import SaslServers, StaticCredentials
from apexmesh.beep.sasl.throttle import FailureThrottle
from apexmesh.beep.session import SessionConfig
from apexmesh.contracts.relay.v1 import relay_pb2_grpc
from apexmesh.ops.admin import AdminSpec, Guard
from apexmesh.ops.audit import AuthFailures
from apexmesh.ops.http import HttpServer
from apexmesh.ops.registry import service_registry
from apexmesh.rpc.access import AccessClient
from apexmesh.rpc.observe import observed_channel
from apexmesh.rpc.server import create_server, graceful_stop
from apexmesh.store.access_cache import CachedAccessChecker
from apexmesh.store.attachments import AttachmentRegistry
from apexmesh.store.connection import connect_redis, keys_for
from apexmesh.store.held import HeldStore
from apexmesh.store.hops import HopLog
from apexmesh.store.pubsub_cache import SubscriberCache
from services.relay.admin import RelayView, relay_routers
from services.relay.edge import APEX_PROFILE, Mode
from services.relay.holder import Holder
from services.relay.http import create_http_app
from services.relay.leases import LeaseKeeper
from services.relay.mesh import MeshPool
from services.relay.metrics import RelayMetrics
from services.relay.peers import PeerDelivery
from services.relay.presence_hook import PresenceHook
from services.relay.reloading import (
    Material,
    MaterialWatcher,
    ReloadableCredentials,
    Watched,
    client_context,
    credentials_store,
    not_after,
    server_context,
)
from services.relay.router import Router
from services.relay.servicer import RelayServicer
from services.relay.serving import serve_link, start_handler
from services.relay.sessions import Sessions
from services.relay.settings import RelaySettings
from services.relay.timekeeper import wall_ms
from services.relay.topics import TopicFanout
from services.relay.tracing import HopTracer
from services.relay.wellknown import WellKnownServices

_log = logging.getLogger(__name__)

#: Channels to well-known services spread calls over every address a target resolves
#: to: in a cluster ``pubsub=dns:///<release>-pubsub-headless:7414`` names every pubsub
#: pod, and the pods the autoscaler adds are found when the channel re-resolves (the
#: pubsub server ends connections after a while for that; services/pubsub/app.py).
SERVICE_CHANNEL_OPTIONS: Final = (("grpc.lb_policy_name", "round_robin"),)


class RelayApp:
    """One running relay pod."""

    def __init__(self, settings: RelaySettings) -> None:
        self.settings = settings
        self.registry = service_registry("relay")
        self.metrics = RelayMetrics.create(self.registry)
        self.failures = AuthFailures("relay", self.registry)
        self.credentials = ReloadableCredentials(StaticCredentials(settings.credentials))
        self.sasl = SaslServers(
            self.credentials,
            mechanisms=settings.sasl_mechanisms if settings.credentials else (),
            realm=settings.domains[0],
            hosts=settings.host_names or settings.domains,
            allow_plaintext_without_tls=settings.dev,
        )
        self.sessions = Sessions(
            self.failures,
            self.metrics.sessions.inc,
            throttle=FailureThrottle(settings.sasl_throttle),
            sasl=self.sasl,
        )
        self.redis: Redis = connect_redis(settings.redis_url, settings.redis_pool)
        self.keys = keys_for(settings.redis_url, settings.redis_prefix)
        self._access_channel = observed_channel(settings.access_address)
        self.access = AccessClient(self._access_channel, timeout=settings.access_timeout)
        self.checker = CachedAccessChecker(self.access, self.redis, self.keys)
        self.attachments = AttachmentRegistry(
            self.redis, self.keys, settings.pod_id, lease_ms=settings.lease_ms
        )
        self._service_channels = {
            name: tuple(
                observed_channel(address, options=SERVICE_CHANNEL_OPTIONS) for address in addresses
            )
            for name, addresses in settings.services.items()
        }
        self._report_channel = (
            None if settings.report_address is None else observed_channel(settings.report_address)
        )
        self.server_ssl = self._server_context()
        self.mesh = MeshPool(
            domain=settings.domains[0],
            routes=settings.routes,
            ssl_context=self._client_context(),
            credentials=settings.credentials,
            max_in_flight=settings.domain_in_flight,
        )
        self.reloader = MaterialWatcher(
            self._watched(), self.registry, interval=settings.reload_seconds
        )
        self.peers = PeerDelivery(settings.max_message, max_in_flight=settings.pod_stream_in_flight)
        understood = {STATUS_REQUEST, *PARTY_OPTIONS, *TIMING_OPTIONS}
        if settings.hold_limits is None:
            understood.discard(HOLD_FOR_ENDPOINT)
        registry = OptionRegistry(internal=frozenset(understood))
        self.router = Router(
            domains=settings.domains,
            options=registry,
            access=self.checker,
            attachments=self.attachments,
            peers=self.peers,
            mesh=self.mesh,
            services=WellKnownServices(
                self.access,
                self._service_channels,
                self._report_channel,
                timeout=settings.service_timeout_ms / 1000,
                retried=frozenset(settings.retry_services),
                delivery_prefix=settings.pod_id,
                max_calls_per_pod=settings.service_calls,
            ),
            metrics=self.metrics,
            trusted=settings.trusted,
            allow_anonymous=settings.dev,
            clock=time.monotonic,
            min_transit_ms=settings.min_transit_ms,
            flow_limits=settings.flow_limits,
        )
        #: Subscriber lists of the topics published through this pod, for the plain
        #: publications it fans out itself (services/relay/topics.py).
        self.subscribers: SubscriberCache | None = None
        if settings.topic_fanout and "pubsub" in settings.services:
            self.subscribers = SubscriberCache(
                self.redis, self.keys, clock=wall_ms, topics=settings.cached_topics
            )
            self.router.executor.topics = TopicFanout(
                domains=frozenset(settings.domains),
                cache=self.subscribers,
                access=self.checker,
                originate=self.router.originate,
                clock=wall_ms,
            )
        self.held = HeldStore(self.redis, self.keys, lease_ms=settings.lease_ms)
        if settings.hold_limits is not None:
            self.router.holder = Holder(
                store=self.held,
                limits=settings.hold_limits,
                registry=registry,
                timekeeper=self.router.timekeeper,
                metrics=self.metrics,
                pod_id=settings.pod_id,
                domains=settings.domains,
                attached=self.router.attached_channel,
                sweep_seconds=settings.hold_sweep_ms / 1000,
            )
        self.presence_hook = (
            None
            if settings.presence_address is None
            else PresenceHook(settings.presence_address, settings.pod_id)
        )
        self.router.presence = self.presence_hook
        self.mesh.serve_link = self._serve_link
        self.hops = HopLog(self.redis, self.keys)
        self.tracer = HopTracer(self.hops, self.router, settings.pod_id) if settings.trace else None
        self.router.tracer = self.tracer
        guard = Guard(settings.admin, self.failures)
        view = RelayView(
            pod_id=settings.pod_id,
            domains=settings.domains,
            sessions=self.sessions,
            table=self.router.table,
            held=self.held,
            hops=self.hops,
            drain=self.drain,
            undrain=self.undrain,
            reload=self.reloader.check,
        )
        self.http = HttpServer(
            create_http_app(
                self.registry,
                self.redis,
                self.checker,
                lambda: bool(self._listeners),
                lambda: self.sessions.draining,
                self.access,
                AdminSpec(
                    guard=guard,
                    pod=settings.pod_id,
                    domains=settings.domains,
                    routers=relay_routers(view, guard),
                    details=self._details,
                ),
            )
        )
        self._grpc: grpc.aio.Server | None = None
        self._listeners: list[asyncio.Server] = []
        #: Listeners closed by a drain that was undone (their connections live on).
        self._retired: list[asyncio.Server] = []
        self.leases = LeaseKeeper(
            attachments=self.attachments,
            table=self.router.table,
            pod_id=settings.pod_id,
            address=lambda: self.grpc_address,
            lease_ms=settings.lease_ms,
        )
        self.grpc_port = self.edge_port = self.mesh_port = self.http_port = 0

    # ------------------------------------------------------------ TLS and SASL

    def _server_context(self) -> ssl.SSLContext | None:
        if self.settings.tls_cert is None or self.settings.tls_key is None:
            return None
        context = server_context(self.settings.tls_cert, self.settings.tls_key)
        self.metrics.serving(self.settings.tls_cert)
        return context

    def _client_context(self) -> ssl.SSLContext | None:
        if self.settings.tls_ca is not None:
            return client_context(self.settings.tls_ca)
        return None

    def _watched(self) -> list[Watched]:
        """The material reloaded while running (services/relay/reloading.py) and where
        each new piece goes: the server context to connections accepted afterwards, the
        CA to apex-mesh links opened afterwards, the credentials to SASL exchanges
        started afterwards (and to this relay's own password towards other domains)."""
        settings, watched = self.settings, []
        cert, key = settings.tls_cert, settings.tls_key
        if cert is not None and key is not None:

            def tls(context: ssl.SSLContext) -> None:
                self.server_ssl = context
                self.metrics.serving(cert)

            watched.append(
                Watched(
                    Material.TLS,
                    (cert, key),
                    functools.partial(server_context, cert, key),
                    tls,
                    lambda _: f"certificate {cert}, notAfter {not_after(cert)}",
                )
            )
        if settings.tls_ca is not None:
            ca = settings.tls_ca

            def trust(context: ssl.SSLContext) -> None:
                self.mesh.ssl_context = context

            watched.append(
                Watched(
                    Material.CA,
                    (ca,),
                    functools.partial(client_context, ca),
                    trust,
                    lambda _: f"CA bundle {ca} for apex-mesh links",
                )
            )
        if settings.sasl_file is not None:
            sasl_file = settings.sasl_file

            def sasl(built: tuple[dict[str, str], StaticCredentials]) -> None:
                self.credentials.current = built[1]
                self.mesh.credentials = built[0]

            watched.append(
                Watched(
                    Material.SASL,
                    (sasl_file,),
                    functools.partial(credentials_store, sasl_file, allow_empty=settings.dev),
                    sasl,
                    lambda built: f"{len(built[0])} identities from {sasl_file}",
                )
            )
        return watched

    def _accepted(self, mode: Mode, conn: BeepConnection) -> None:
        """A listener accepted ``conn``: it tunes TLS with the context loaded now."""
        conn.ssl_context = self.server_ssl
        self.sessions.add(mode, conn)

    def _session_config(self) -> SessionConfig:
        return SessionConfig(
            profiles=(APEX_PROFILE,),
            tls_available=self.server_ssl is not None,
            sasl_mechanisms=self.sasl.mechanisms,
            sasl_server=self.sasl if self.sasl.mechanisms else None,
            max_message_octets=self.settings.max_message,
            receive_window_octets=self.settings.receive_window,
            seq_step_fraction=self.settings.seq_step,
            idle_seconds=300.0,
            require_privacy=self.settings.require_privacy,
            accept_nul_mime_header=self.settings.interop_vortex_nul,
        )

    def _details(self) -> dict[str, object]:
        """The relay's facts for ``/admin/v1/info`` (``apexctl servers info``)."""
        settings = self.settings
        return {
            "edge_port": self.edge_port,
            "mesh_port": self.mesh_port,
            "grpc_port": self.grpc_port,
            "http_port": self.http_port,
            "grpc_address": self.grpc_address,
            "sessions": len(self.sessions),
            "attachments": len(self.router.table),
            "draining": self.sessions.draining,
            "routes": dict(settings.routes),
            "services": {name: list(pods) for name, pods in settings.services.items()},
            "access": settings.access_address,
            "report": settings.report_address or "",
            "presence": settings.presence_address or "",
            "tls": self.server_ssl is not None,
            "material": self.reloader.state(),
            "sasl": bool(settings.credentials),
            "trace": settings.trace,
        }

    async def drain(self) -> None:
        """Stop accepting sessions (both listeners) and report not ready; the sessions
        already open go on (services/relay/sessions.py)."""
        if not self.sessions.start_draining():
            return
        _log.info("draining: no new sessions; %d open", len(self.sessions))
        for server in self._listeners:
            server.close()

    async def undrain(self) -> None:
        """Undo a drain (``apexctl drain --undo``): listen again on the same ports and
        report ready."""
        if not self.sessions.draining:
            return
        self._retired += self._listeners
        self._listeners = await self._listen(self.edge_port, self.mesh_port)
        self.sessions.stop_draining()
        _log.info("drain undone: accepting sessions again; %d open", len(self.sessions))

    async def _serve_link(
        self,
        conn: BeepConnection,
        channel: Channel,
        binding: Binding,
        peer_domain: str | None,
        unbound: Callable[[], None],
    ) -> None:
        await serve_link(
            self.router, conn, channel, binding, peer_domain=peer_domain, on_unbound=unbound
        )

    # ------------------------------------------------------------ lifecycle

    @property
    def grpc_address(self) -> str:
        return f"{self.settings.advertise_host}:{self.grpc_port}"

    async def start(self) -> None:
        await self.redis.ping()
        await self.checker.start()
        if self.subscribers is not None:
            await self.subscribers.start()
        servicer = RelayServicer(self.router)
        self._grpc, self.grpc_port = await create_server(
            [lambda server: relay_pb2_grpc.add_RelayServiceServicer_to_server(servicer, server)],
            host=self.settings.grpc_host,
            port=self.settings.grpc_port,
            max_message_bytes=self.peers.max_message_bytes,
            registry=self.registry,
        )
        await self.leases.start()
        if self.router.holder is not None:
            self.router.holder.start()
        self._listeners = await self._listen(self.settings.edge_port, self.settings.mesh_port)
        self.edge_port = self._listeners[0].sockets[0].getsockname()[1]
        self.mesh_port = self._listeners[1].sockets[0].getsockname()[1]
        self.reloader.start()
        self.http_port = await self.http.start(self.settings.http_host, self.settings.http_port)

    async def _listen(self, edge_port: int, mesh_port: int) -> list[asyncio.Server]:
        """Open the apex-edge and apex-mesh listeners. When the second cannot bind (its
        port taken), the first is closed before the error goes on: a start that fails
        half way leaves no listening socket behind."""
        servers: list[asyncio.Server] = []
        try:
            for mode, host, port in (
                (Mode.EDGE, self.settings.edge_host, edge_port),
                (Mode.MESH, self.settings.mesh_host, mesh_port),
            ):
                server = await listen(
                    host,
                    port,
                    self._session_config,
                    ssl_context=self.server_ssl,
                    on_start=start_handler(self.router, mode),
                    on_connection=functools.partial(self._accepted, mode),
                )
                servers.append(server)
        except BaseException:
            for opened in servers:
                opened.close()
                await opened.wait_closed()
            raise
        return servers

    async def stop(self) -> None:
        for server in self._listeners:
            server.close()
        await self.leases.close()
        await self.reloader.close()
        connections = self.sessions.connections()
        await asyncio.gather(
            *(conn.close(timeout=2.0) for conn in connections), return_exceptions=True
        )
        for server in (*self._listeners, *self._retired):
            # wait_closed waits for every accepted connection; all were closed above.
            with contextlib.suppress(Exception):
                await within(server.wait_closed(), 2.0)
        self._listeners.clear()
        self._retired.clear()
        if self.router.holder is not None:
            await self.router.holder.close()
        with contextlib.suppress(Exception):
            await self.attachments.release_all()
        await self.router.close()
        if self.tracer is not None:
            await self.tracer.close()
        if self._grpc is not None:
            await graceful_stop(self._grpc, self.settings.shutdown_grace)
            self._grpc = None
        await self.http.stop()
        await self.mesh.close()
        await self.peers.close()
        await self.checker.aclose()
        if self.subscribers is not None:
            await self.subscribers.aclose()
        await self.router.services.aclose()
        for channel in (
            self._access_channel,
            *(c for pods in self._service_channels.values() for c in pods),
        ):
            await channel.close()
        if self._report_channel is not None:
            await self._report_channel.close()
        if self.presence_hook is not None:
            await self.presence_hook.aclose()
        await self.redis.aclose()
