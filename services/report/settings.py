"""Settings of the report service, read once from environment variables.

- ``APEXMESH_REPORT_DOMAINS`` (required): administrative domains whose ``apex=report``
  this service is, comma-separated; a Report for any other domain is answered 553.
- ``APEXMESH_RELAY_ADDRESSES``: relay gRPC addresses (``host:port``, ``[v6]:port``),
  comma-separated, that statusResponses are submitted through, round-robin with
  failover. May be empty: the service then starts but is not ready and answers 421.
- ``APEXMESH_RELAY_TIMEOUT_SECONDS`` (``2.0``): deadline of one Submit call.
- ``APEXMESH_REPORT_RETRY_SECONDS`` (``20``): how long an owed statusResponse is
  submitted again after transient failures (a relay that cannot check the originator's
  access while the access service is down answers 421) before it is reported
  undeliverable; ``0`` tries once. Keep it below the relays'
  ``APEXMESH_RELAY_SERVICE_TIMEOUT_MS`` (30 s), the time a relay waits for a Report: a
  retry never starts when less than one attempt's time is left of the caller's deadline.
- ``APEXMESH_REPORT_GRPC_HOST`` / ``_PORT`` (``127.0.0.1`` / ``7412``; 0 = any port).
- ``APEXMESH_REPORT_HTTP_HOST`` / ``_PORT`` (``127.0.0.1`` / ``8412``): admin HTTP.
- ``APEXMESH_SHUTDOWN_GRACE`` (``5.0``): seconds in-flight calls get on SIGTERM.
- ``APEXMESH_DEV`` (``0``): ``1`` allows development-only settings.

Unsafe outside development (:mod:`apexmesh.ops.settings` names "a wildcard bind" among
the values refused unless ``APEXMESH_DEV=1``): binding the gRPC or HTTP server to a
wildcard address (``0.0.0.0``, ``::``, empty). A pod binds its own address instead (the
Kubernetes downward API's ``status.podIP``), so the service is never exposed on an
interface nobody chose. There is no Redis, so no Redis URL rule applies.
- ``APEXMESH_ADMIN_TOKEN`` / ``APEXMESH_ADMIN_READ_TOKEN`` (or ``..._FILE``): bearer
  tokens of the admin API (apexmesh/ops/admin.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from apexmesh.ops.settings import (
    DEV_FLAG,
    AdminTokens,
    SettingsError,
    admin_tokens,
    check_bind_host,
    env_flag,
    env_float,
    env_int,
    grpc_targets,
    required_domains,
)


@dataclass(frozen=True, slots=True)
class ReportSettings:
    domains: tuple[str, ...]
    relay_addresses: tuple[str, ...]
    relay_timeout: float
    grpc_host: str
    grpc_port: int
    http_host: str
    http_port: int
    shutdown_grace: float
    dev: bool
    admin: AdminTokens = field(default_factory=AdminTokens)
    #: Seconds an owed report is retried after transient failures (0: once).
    retry_seconds: float = 20.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReportSettings:
        """Read and validate; raise :class:`SettingsError` with the variable's name."""
        env = os.environ if env is None else env
        dev = env_flag(env, DEV_FLAG)
        domains = required_domains(env, "APEXMESH_REPORT_DOMAINS")
        relays = grpc_targets(env, "APEXMESH_RELAY_ADDRESSES")
        return cls(
            domains=domains,
            relay_addresses=relays,
            relay_timeout=env_float(env, "APEXMESH_RELAY_TIMEOUT_SECONDS", 2.0),
            retry_seconds=_retry_seconds(env),
            grpc_host=check_bind_host(
                "APEXMESH_REPORT_GRPC_HOST",
                env.get("APEXMESH_REPORT_GRPC_HOST", "127.0.0.1"),
                dev=dev,
            ),
            grpc_port=env_int(env, "APEXMESH_REPORT_GRPC_PORT", 7412),
            http_host=check_bind_host(
                "APEXMESH_REPORT_HTTP_HOST",
                env.get("APEXMESH_REPORT_HTTP_HOST", "127.0.0.1"),
                dev=dev,
            ),
            http_port=env_int(env, "APEXMESH_REPORT_HTTP_PORT", 8412),
            shutdown_grace=env_float(env, "APEXMESH_SHUTDOWN_GRACE", 5.0),
            dev=dev,
            admin=admin_tokens(env, dev=dev),
        )


def _retry_seconds(env: Mapping[str, str]) -> float:
    """``APEXMESH_REPORT_RETRY_SECONDS``: 0 .. 600 (0, one attempt, is allowed)."""
    name = "APEXMESH_REPORT_RETRY_SECONDS"
    if env.get(name, "").strip() in ("0", "0.0"):
        return 0.0
    seconds = env_float(env, name, 20.0)
    if seconds > 600:
        raise SettingsError(f"{name} must be 0 .. 600")
    return seconds


__all__ = ["ReportSettings"]
