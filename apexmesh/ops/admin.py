"""The admin API every service serves under ``/admin`` of its HTTP port.

Operators (``apexctl``, the dashboard, scripts) read and change a running service here:
sessions and held data at a relay, topics at pubsub, access entries, presence entries.
It is a FastAPI app of its own, mounted at ``/admin`` beside ``/healthz``, ``/readyz``
and ``/metrics`` (which stay open for probes and scrapes), with its OpenAPI document at
``/admin/openapi.json`` (the schema is no secret; the interactive docs page is off
because it loads its scripts from a CDN).

Every route needs a bearer token (RFC 6750), compared in constant time:

* the **read** token may call every ``GET``;
* the **admin** token may call everything (changes: drain, close a session, create or
  delete a topic, grant or deny access, a logger's level: ``PUT /v1/log-level``).

No token answers 401 with ``WWW-Authenticate: Bearer``; a read token on a change answers
403. Each refusal is an authentication failure (:mod:`apexmesh.ops.audit`): counted and
logged with the peer's address, never with the token presented. With no token
configured the admin API refuses every call.

A service adds its own routes as :class:`fastapi.APIRouter` objects built with the
:class:`Guard` dependencies (``services/<name>/admin.py``); :func:`create_admin_app`
adds ``GET /v1/info``, which every service answers the same way.

A route that needs Redis while Redis cannot answer (down, restarting, loading its data,
a cluster without a master for a slot) answers **503** with the reason and a
``Retry-After``, the way ``/readyz`` reports the same condition, instead of the 500 of an
unhandled exception: the operator learns that the service is fine and its store is not,
and retries. It is done here once, as an exception handler of every service's admin
app (:data:`REDIS_UNAVAILABLE`), not route by route; any other error stays a 500.
"""

from __future__ import annotations

import enum
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from redis import exceptions as redis_errors

from apexmesh import __version__
from apexmesh.ops.audit import AuthFailures
from apexmesh.ops.settings import AdminTokens

_log = logging.getLogger(__name__)

#: Where the admin app is mounted on a service's HTTP port.
ADMIN_PREFIX: Final = "/admin"
#: The version prefix of every admin route (``/admin/v1/...``).
API_VERSION: Final = "/v1"

#: Redis failures that mean "Redis cannot answer now", not "this request is wrong":
#: no connection (refused, reset, the pool's wait for a free one ran out, redis-py's
#: ``ConnectionError`` and its ``BusyLoadingError`` while a restarted server loads its
#: AOF), a command that timed out, and a cluster that is down, failing over
#: (``TRYAGAIN``) or whose node was just demoted to a read-only replica.
REDIS_UNAVAILABLE: Final = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.ClusterDownError,
    redis_errors.TryAgainError,
    redis_errors.ReadOnlyError,
)
#: Seconds an operator is asked to wait before trying again (``Retry-After``): about a
#: restarted Redis's time to load a small AOF.
RETRY_AFTER_SECONDS: Final = 5


class Role(enum.IntEnum):
    """What a caller may do; a higher role may do what a lower one may."""

    READ = 1
    ADMIN = 2


class Problem(BaseModel):
    """An error answer (FastAPI's shape)."""

    detail: str


#: The documented answers of a guarded route, for the OpenAPI document.
GUARDED: Final[dict[int | str, dict[str, Any]]] = {
    400: {"model": Problem, "description": "a value the schema allows but the service cannot use"},
    401: {"model": Problem, "description": "no or an unknown bearer token"},
    403: {"model": Problem, "description": "the token's role may not do this"},
    503: {"model": Problem, "description": "the service's Redis cannot answer now; retry"},
}
#: The documented answers of a guarded route about one named thing.
GUARDED_ONE: Final[dict[int | str, dict[str, Any]]] = {
    **GUARDED,
    404: {"model": Problem, "description": "no such thing"},
}

_bearer = HTTPBearer(auto_error=False, description="the service's admin or read token")


class Guard:
    """The two dependencies routes declare: :meth:`read` and :meth:`admin`."""

    def __init__(self, tokens: AdminTokens, failures: AuthFailures) -> None:
        self._tokens = tokens
        self._failures = failures

    def role_of(self, token: str) -> Role | None:
        """The role a token grants (constant-time comparisons, both always made)."""
        presented = token.encode()
        is_admin = self._tokens.admin is not None and secrets.compare_digest(
            presented, self._tokens.admin.encode()
        )
        is_read = self._tokens.read is not None and secrets.compare_digest(
            presented, self._tokens.read.encode()
        )
        if is_admin:
            return Role.ADMIN
        return Role.READ if is_read else None

    def _check(
        self, request: Request, credentials: HTTPAuthorizationCredentials | None, needed: Role
    ) -> Role:
        peer = None if request.client is None else (request.client.host, request.client.port)
        if credentials is None or credentials.scheme.lower() != "bearer":
            self._failures.record("bearer", peer, "no bearer token")
            raise HTTPException(
                401, "a bearer token is required", headers={"WWW-Authenticate": "Bearer"}
            )
        role = self.role_of(credentials.credentials)
        if role is None:
            self._failures.record("bearer", peer, "unknown token")
            raise HTTPException(
                401,
                "the bearer token is not valid",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        if role < needed:
            self._failures.record("bearer", peer, f"read-only token on {request.url.path}")
            raise HTTPException(403, "this needs the admin token")
        return role

    async def read(
        self,
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    ) -> Role:
        """Dependency of a route that only reads."""
        return self._check(request, credentials, Role.READ)

    async def admin(
        self,
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    ) -> Role:
        """Dependency of a route that changes something."""
        return self._check(request, credentials, Role.ADMIN)

    def reader(self) -> APIRouter:
        """A router whose every route needs at least the read token."""
        return APIRouter(dependencies=[Depends(self.read)], responses=GUARDED)

    def changer(self) -> APIRouter:
        """A router whose every route needs the admin token."""
        return APIRouter(dependencies=[Depends(self.admin)], responses=GUARDED)


class ServiceInfo(BaseModel):
    """What every service says about itself (``apexctl servers info``)."""

    service: str = Field(description="relay, access, pubsub, report, presence or dashboard")
    pod: str = Field(description="the pod (process) id")
    version: str
    domains: list[str]
    started_at: float = Field(description="start time, seconds since the epoch")
    uptime_seconds: float
    ready: bool
    reason: str = Field("", description="why the service is not ready")
    details: dict[str, Any] = Field(
        default_factory=dict, description="service-specific facts (ports, peers, draining)"
    )


#: The levels ``PUT /v1/log-level`` accepts (the logging module's names).
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class LogLevel(BaseModel):
    """A logger's level (``apexctl log-level``); the root logger when ``logger`` is ""."""

    level: str = Field(description="DEBUG, INFO, WARNING, ERROR or CRITICAL")
    logger: str = Field("", max_length=200, description='a logger name; "" is the root')


#: A readiness probe: returns None when ready, or the reason it is not.
ReadinessProbe = Callable[[], Awaitable[str | None]]


@dataclass(frozen=True)
class AdminSpec:
    """What a service puts in its admin API (given to
    :func:`apexmesh.ops.http.create_ops_app`)."""

    guard: Guard
    #: The pod (process) id shown by ``/v1/info``.
    pod: str
    domains: Sequence[str]
    #: The service's own routes, built with :meth:`Guard.reader` / :meth:`Guard.changer`.
    routers: Sequence[APIRouter] = ()
    #: Service-specific facts for ``/v1/info`` (ports, peers, draining).
    details: Callable[[], dict[str, Any]] | None = None


def create_admin_app(service: str, spec: AdminSpec, ready: ReadinessProbe) -> FastAPI:
    """The admin app of ``service``: ``GET /v1/info`` and the service's routers."""
    guard, details = spec.guard, spec.details
    app = FastAPI(
        title=f"apex-mesh {service} admin API",
        version=__version__,
        description=__doc__,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    started = time.time()
    info = guard.reader()

    @info.get("/info", response_model=ServiceInfo, summary="What this service is and how it is")
    async def get_info() -> ServiceInfo:
        reason = await ready()
        return ServiceInfo(
            service=service,
            pod=spec.pod,
            version=__version__,
            domains=list(spec.domains),
            started_at=started,
            uptime_seconds=round(time.time() - started, 3),
            ready=reason is None,
            reason=reason or "",
            details={} if details is None else details(),
        )

    change = guard.changer()

    @info.get("/log-level", response_model=LogLevel, summary="A logger's level now")
    async def get_log_level(logger: str = "") -> LogLevel:
        found = logging.getLogger(logger or None)
        return LogLevel(level=logging.getLevelName(found.getEffectiveLevel()), logger=logger)

    @change.put(
        "/log-level",
        response_model=LogLevel,
        summary="Set a logger's level at runtime (until the process restarts)",
    )
    async def put_log_level(wanted: LogLevel) -> LogLevel:
        level = wanted.level.upper()
        if level not in LOG_LEVELS:
            raise HTTPException(400, f"level must be one of {', '.join(LOG_LEVELS)}")
        logging.getLogger(wanted.logger or None).setLevel(level)
        _log.warning("log level of %s set to %s", wanted.logger or "the root logger", level)
        return LogLevel(level=level, logger=wanted.logger)

    app.include_router(info, prefix=API_VERSION, tags=["service"])
    app.include_router(change, prefix=API_VERSION, tags=["service"])
    for router in spec.routers:
        app.include_router(router, prefix=API_VERSION)
    for error in REDIS_UNAVAILABLE:
        app.add_exception_handler(error, _redis_unavailable)
    return app


async def _redis_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """503 for a route that needed Redis while it could not answer (module docstring).
    The reason is redis-py's own text (the address and the failure), as ``/readyz``
    gives it; the operator who may read the admin API may read that."""
    reason = f"redis unreachable: {type(exc).__name__}: {exc}"[:500]
    _log.warning("admin %s %s: %s", request.method, request.url.path, reason)
    return JSONResponse(
        status_code=503,
        content={"detail": reason},
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


__all__ = [
    "ADMIN_PREFIX",
    "API_VERSION",
    "REDIS_UNAVAILABLE",
    "RETRY_AFTER_SECONDS",
    "AdminSpec",
    "GUARDED",
    "GUARDED_ONE",
    "LOG_LEVELS",
    "Guard",
    "LogLevel",
    "Problem",
    "ReadinessProbe",
    "Role",
    "ServiceInfo",
    "create_admin_app",
]
