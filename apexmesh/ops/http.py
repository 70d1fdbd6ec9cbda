"""The HTTP app every service serves: ``/healthz``, ``/readyz``, ``/metrics``, ``/admin``.

Kubernetes probes liveness on ``/healthz`` (the process answers) and readiness on
``/readyz`` (its dependencies answer: Redis, the gRPC server), and Prometheus scrapes
``/metrics`` in the text exposition format. The app is built per service instance from a
:class:`prometheus_client.CollectorRegistry` the composition root owns, so tests can run
several services in one process without the global default registry.

:class:`HttpServer` runs the app with uvicorn on a socket bound here (port 0 allowed) and
leaves signal handling to the service's ``__main__``. A service bound to its pod's address
is also bound to 127.0.0.1 on the same port: ``kubectl port-forward`` (and apexctl's
Kubernetes contexts, which use the same API) connects to the pod's loopback, never to its
address, and a loopback listener is reachable from inside the pod only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Generator, Sequence

import uvicorn
from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from apexmesh.ops.admin import ADMIN_PREFIX, AdminSpec, ReadinessProbe, create_admin_app
from apexmesh.ops.settings import WILDCARD_HOSTS

_log = logging.getLogger(__name__)

#: Where ``kubectl port-forward`` arrives inside a pod (the CRI dials localhost, IPv4).
PORT_FORWARD_HOST = "127.0.0.1"


def redis_ready(
    redis: Redis,
    *,
    relay_addresses: Sequence[str] | None = None,
    also: Callable[[], str | None] | None = None,
) -> ReadinessProbe:
    """The usual probe: Redis answers PING; for a service that sends through relays, at
    least one relay address is configured (without one nothing it sends can leave);
    ``also`` adds a service's own condition (its reason, or None)."""

    async def ready() -> str | None:
        if relay_addresses is not None and not relay_addresses:
            return "no relay address configured (APEXMESH_RELAY_ADDRESSES)"
        try:
            await redis.ping()
        except (RedisError, OSError) as exc:
            return f"redis unreachable: {exc}"
        return None if also is None else also()

    return ready


def create_ops_app(
    service: str,
    registry: CollectorRegistry,
    ready: ReadinessProbe,
    admin: AdminSpec | None = None,
) -> FastAPI:
    """Build the HTTP app of ``service``: probes, metrics, and the admin API under
    ``/admin`` (:mod:`apexmesh.ops.admin`) when ``admin`` is given."""
    app = FastAPI(title=f"apex-mesh {service}", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": service}

    @app.get("/readyz")
    async def readyz(response: Response) -> dict[str, str]:
        reason = await ready()
        if reason is not None:
            response.status_code = 503
            return {"status": "unavailable", "reason": reason}
        return {"status": "ready"}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    if admin is not None:
        app.mount(ADMIN_PREFIX, create_admin_app(service, admin, ready))
    return app


#: Seconds the admin HTTP server gives open requests when the service stops.
SHUTDOWN_SECONDS = 2


def _listening(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def also_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` also needs :data:`PORT_FORWARD_HOST`: yes for
    a specific address other than it (a pod's), no for it, ``localhost`` or a wildcard."""
    return host.strip().lower() not in {PORT_FORWARD_HOST, "localhost", *WILDCARD_HOSTS}


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # The service's __main__ owns SIGTERM/SIGINT and stops this server itself.
        yield


class HttpServer:
    """uvicorn serving one app on a socket bound by :meth:`start`."""

    def __init__(self, app: FastAPI) -> None:
        self._server = _Server(
            uvicorn.Config(
                app,
                log_level="warning",
                lifespan="off",
                access_log=False,
                # Bounded: a stuck probe or a lingering connection must not hold up the
                # service's SIGTERM shutdown.
                timeout_graceful_shutdown=SHUTDOWN_SECONDS,
            )
        )
        self._task: asyncio.Task[None] | None = None
        self._sockets: list[socket.socket] = []

    async def start(self, host: str, port: int) -> int:
        """Bind ``host:port`` (0 = any free port), and 127.0.0.1 on the same port when
        :func:`also_loopback`; start serving, return the port."""
        sockets = [_listening(host, port)]
        bound = int(sockets[0].getsockname()[1])
        if also_loopback(host):
            try:
                sockets.append(_listening(PORT_FORWARD_HOST, bound))
            except OSError as exc:  # the service still answers on its own address
                _log.warning("admin HTTP not on %s:%s: %s", PORT_FORWARD_HOST, bound, exc)
        self._sockets = sockets
        self._task = asyncio.create_task(self._server.serve(sockets=sockets), name="ops-http")
        return bound

    async def stop(self) -> None:
        self._server.should_exit = True
        task, self._task = self._task, None
        if task is not None:
            await task
        for sock in self._sockets:
            sock.close()
        self._sockets = []


__all__ = ["HttpServer", "ReadinessProbe", "also_loopback", "create_ops_app"]
