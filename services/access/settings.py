"""Settings of the access service, read once from environment variables.

- ``APEXMESH_DOMAINS`` (required): administrative domains served, comma-separated.
- ``APEXMESH_REDIS_URL`` (``redis://127.0.0.1:6379/0``): TLS or a password unless dev.
- ``APEXMESH_REDIS_PREFIX`` (``apexmesh``): prefix of every key (``store/keys.py``).
- ``APEXMESH_REDIS_MAX_CONNECTIONS`` (``64``), ``APEXMESH_REDIS_POOL_TIMEOUT_SECONDS`` (``5``):
  the process's one bounded, blocking Redis pool (``apexmesh/store/connection.py``).
- ``APEXMESH_ACCESS_GRPC_HOST`` / ``_PORT`` (``127.0.0.1`` / ``7411``; 0 = any port).
- ``APEXMESH_ACCESS_HTTP_HOST`` / ``_PORT`` (``127.0.0.1`` / ``8411``): admin HTTP.
- ``APEXMESH_ACCESS_SEED_FILE``: access entries created at start when absent.
- ``APEXMESH_ACCESS_OPERATORS``: endpoints allowed every ``access:*`` operation.
- ``APEXMESH_ACCESS_ENDPOINTS_FILE``: the endpoints of the served domains, one identity
  per line (``#`` comments). With it, an owner that is neither a registered service nor
  one of these endpoints (or a subaddress of one) is not a valid address (RFC 3341
  sections 4.2-4.4 step 2: 550). Without it every endpoint of the domains is taken to
  exist.
- ``APEXMESH_ACCESS_EXTRA_TOKENS``: extra ``service:operation`` tokens to accept.
- ``APEXMESH_ACCESS_RESYNC_SECONDS`` (``1.0``): cache version check interval.
- ``APEXMESH_SHUTDOWN_GRACE`` (``5.0``): seconds in-flight calls get on SIGTERM.
- ``APEXMESH_ADMIN_TOKEN`` / ``APEXMESH_ADMIN_READ_TOKEN`` (or ``..._FILE``): bearer
  tokens of the admin API (apexmesh/ops/admin.py).
- ``APEXMESH_DEV`` (``0``): ``1`` allows development-only settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from apexmesh.apex.access import AccessError, TokenRegistry
from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.ops.settings import (
    DEV_FLAG,
    AdminTokens,
    SettingsError,
    admin_tokens,
    check_redis_url,
    env_flag,
    env_float,
    env_int,
    env_list,
    required_domains,
)
from apexmesh.store.connection import RedisPoolSettings


@dataclass(frozen=True, slots=True)
class AccessSettings:
    domains: tuple[str, ...]
    redis_url: str
    redis_prefix: str
    redis_pool: RedisPoolSettings
    grpc_host: str
    grpc_port: int
    http_host: str
    http_port: int
    seed_file: Path | None
    operators: tuple[Endpoint, ...]
    #: The served domains' endpoints (RFC 3341 step 2), None: every endpoint exists.
    endpoints: tuple[Endpoint, ...] | None
    extra_tokens: tuple[str, ...]
    resync_seconds: float
    shutdown_grace: float
    dev: bool
    admin: AdminTokens = field(default_factory=AdminTokens)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AccessSettings:
        """Read and validate; raise :class:`SettingsError` with the variable's name."""
        env = os.environ if env is None else env
        dev = env_flag(env, DEV_FLAG)
        domains = required_domains(env, "APEXMESH_DOMAINS")
        try:
            operators = tuple(
                Endpoint.parse(text) for text in env_list(env, "APEXMESH_ACCESS_OPERATORS")
            )
        except EndpointError as exc:
            raise SettingsError(str(exc)) from None
        extra = env_list(env, "APEXMESH_ACCESS_EXTRA_TOKENS")
        try:
            TokenRegistry().with_tokens(extra)
        except AccessError as exc:
            raise SettingsError(f"APEXMESH_ACCESS_EXTRA_TOKENS: {exc}") from None
        seed = env.get("APEXMESH_ACCESS_SEED_FILE") or None
        listed = env.get("APEXMESH_ACCESS_ENDPOINTS_FILE") or None
        endpoints = None if listed is None else _read_endpoints(Path(listed), domains)
        return cls(
            domains=domains,
            redis_url=check_redis_url(
                env.get("APEXMESH_REDIS_URL", "redis://127.0.0.1:6379/0"), dev=dev
            ),
            redis_prefix=env.get("APEXMESH_REDIS_PREFIX", "apexmesh") or "apexmesh",
            redis_pool=RedisPoolSettings.from_env(env),
            grpc_host=env.get("APEXMESH_ACCESS_GRPC_HOST", "127.0.0.1"),
            grpc_port=env_int(env, "APEXMESH_ACCESS_GRPC_PORT", 7411),
            http_host=env.get("APEXMESH_ACCESS_HTTP_HOST", "127.0.0.1"),
            http_port=env_int(env, "APEXMESH_ACCESS_HTTP_PORT", 8411),
            seed_file=None if seed is None else Path(seed),
            operators=operators,
            endpoints=endpoints,
            extra_tokens=extra,
            resync_seconds=env_float(env, "APEXMESH_ACCESS_RESYNC_SECONDS", 1.0),
            shutdown_grace=env_float(env, "APEXMESH_SHUTDOWN_GRACE", 5.0),
            dev=dev,
            admin=admin_tokens(env, dev=dev),
        )


def _read_endpoints(path: Path, domains: tuple[str, ...]) -> tuple[Endpoint, ...]:
    """The endpoint directory: one identity per line, each in a served domain."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SettingsError(f"APEXMESH_ACCESS_ENDPOINTS_FILE: {exc}") from None
    endpoints: list[Endpoint] = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            endpoint = Endpoint.parse(text)
        except EndpointError as exc:
            raise SettingsError(f"{path}:{number}: {exc}") from None
        if endpoint.domain not in domains:
            raise SettingsError(f"{path}:{number}: {endpoint} is not in {', '.join(domains)}")
        endpoints.append(endpoint)
    return tuple(endpoints)
