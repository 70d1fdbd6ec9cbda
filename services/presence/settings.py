"""Settings of the presence service, read once from environment variables.

- ``APEXMESH_PRESENCE_DOMAINS`` (required): domains whose ``apex=presence`` this is.
- ``APEXMESH_REDIS_URL`` (``redis://127.0.0.1:6379/0``): TLS or a password unless dev.
- ``APEXMESH_REDIS_PREFIX`` (``apexmesh``): prefix of every key (``store/keys.py``).
- ``APEXMESH_REDIS_MAX_CONNECTIONS`` (``64``), ``APEXMESH_REDIS_POOL_TIMEOUT_SECONDS`` (``5``):
  the process's one bounded, blocking Redis pool (``apexmesh/store/connection.py``).
- ``APEXMESH_ACCESS_ADDRESS`` (required): gRPC address of the access service (tokens
  ``presence:subscribe``, ``presence:watch``, ``presence:publish``).
- ``APEXMESH_RELAY_ADDRESSES``: relay gRPC addresses replies are submitted through.
- ``APEXMESH_RELAY_TIMEOUT_SECONDS`` (``2.0``): deadline of one Submit or access call.
- ``APEXMESH_PRESENCE_TICK_SECONDS`` (``0.25``): longest sleep of the timer loop (ends
  durations, checks attachment leases).
- ``APEXMESH_PRESENCE_GRPC_HOST`` / ``_PORT`` (``127.0.0.1`` / ``7413``; 0 = any port).
- ``APEXMESH_PRESENCE_HTTP_HOST`` / ``_PORT`` (``127.0.0.1`` / ``8413``): admin HTTP.
- ``APEXMESH_ADMIN_TOKEN`` / ``APEXMESH_ADMIN_READ_TOKEN`` (or ``..._FILE``): bearer
  tokens of the admin API (apexmesh/ops/admin.py).
- ``APEXMESH_SHUTDOWN_GRACE`` (``5.0``), ``APEXMESH_DEV`` (``0``).

Wildcard binds are refused unless ``APEXMESH_DEV=1`` (the rule of apexmesh/ops/settings.py).
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
    bind_host,
    check_grpc_target,
    check_redis_url,
    env_flag,
    env_float,
    env_int,
    grpc_targets,
    required_domains,
)
from apexmesh.store.connection import RedisPoolSettings


@dataclass(frozen=True, slots=True)
class PresenceSettings:
    domains: tuple[str, ...]
    redis_url: str
    redis_prefix: str
    redis_pool: RedisPoolSettings
    access_address: str
    relay_addresses: tuple[str, ...]
    relay_timeout: float
    tick_seconds: float
    grpc_host: str
    grpc_port: int
    http_host: str
    http_port: int
    shutdown_grace: float
    dev: bool
    admin: AdminTokens = field(default_factory=AdminTokens)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PresenceSettings:
        """Read and validate; raise :class:`SettingsError` with the variable's name."""
        env = os.environ if env is None else env
        dev = env_flag(env, DEV_FLAG)
        domains = required_domains(env, "APEXMESH_PRESENCE_DOMAINS")
        access = env.get("APEXMESH_ACCESS_ADDRESS", "")
        if not access:
            raise SettingsError("APEXMESH_ACCESS_ADDRESS is required")
        tick = env_float(env, "APEXMESH_PRESENCE_TICK_SECONDS", 0.25)
        if not 0 < tick <= 60:
            raise SettingsError("APEXMESH_PRESENCE_TICK_SECONDS must be in (0, 60]")
        return cls(
            domains=domains,
            redis_url=check_redis_url(
                env.get("APEXMESH_REDIS_URL", "redis://127.0.0.1:6379/0"), dev=dev
            ),
            redis_prefix=env.get("APEXMESH_REDIS_PREFIX", "apexmesh") or "apexmesh",
            redis_pool=RedisPoolSettings.from_env(env),
            access_address=check_grpc_target("APEXMESH_ACCESS_ADDRESS", access),
            relay_addresses=grpc_targets(env, "APEXMESH_RELAY_ADDRESSES"),
            relay_timeout=env_float(env, "APEXMESH_RELAY_TIMEOUT_SECONDS", 2.0),
            tick_seconds=tick,
            grpc_host=bind_host(env, "APEXMESH_PRESENCE_GRPC_HOST", dev=dev),
            grpc_port=env_int(env, "APEXMESH_PRESENCE_GRPC_PORT", 7413),
            http_host=bind_host(env, "APEXMESH_PRESENCE_HTTP_HOST", dev=dev),
            http_port=env_int(env, "APEXMESH_PRESENCE_HTTP_PORT", 8413),
            shutdown_grace=env_float(env, "APEXMESH_SHUTDOWN_GRACE", 5.0),
            dev=dev,
            admin=admin_tokens(env, dev=dev),
        )


__all__ = ["PresenceSettings"]
