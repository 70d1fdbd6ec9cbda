"""One bounded, blocking Redis connection pool per process, sized from settings.

redis-py's default pool opens a new socket for every concurrent command: a burst (10,000
sessions closing at once, 100 pipelined subscribes) opens thousands of connections and
then fails ("Too many connections", or Redis's own ``maxclients``). Every apex-mesh
process instead builds its one client here, over a
:class:`redis.asyncio.BlockingConnectionPool`: at most ``max_connections`` sockets, and a
command that finds them all busy waits up to ``timeout`` seconds for one to come back
before it fails with a :class:`redis.exceptions.ConnectionError` (the caller's usual
Redis failure path). Bursts queue instead of failing, and the stores coalesce what
queues (:mod:`apexmesh.store.batching`), so a burst costs a few round trips.

Settings (every service, read by :meth:`RedisPoolSettings.from_env`):

- ``APEXMESH_REDIS_MAX_CONNECTIONS`` (``64``): sockets of the pool, 2..10000. Long-lived
  subscriptions (the access cache's change channel, the pubsub event follower) each keep
  one of them.
- ``APEXMESH_REDIS_POOL_TIMEOUT_SECONDS`` (``5.0``): how long a command waits for a free
  connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from redis.asyncio import BlockingConnectionPool, Redis

from apexmesh.ops.settings import SettingsError, env_float, env_int

#: Default number of connections of a process's pool.
DEFAULT_MAX_CONNECTIONS: Final = 64
#: Default seconds a command waits for a free connection.
DEFAULT_POOL_TIMEOUT: Final = 5.0


@dataclass(frozen=True, slots=True)
class RedisPoolSettings:
    """How big the process's Redis pool is and how long a command waits for room."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    timeout: float = DEFAULT_POOL_TIMEOUT

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RedisPoolSettings:
        """Read ``APEXMESH_REDIS_MAX_CONNECTIONS`` and
        ``APEXMESH_REDIS_POOL_TIMEOUT_SECONDS`` (see the module docstring)."""
        size = env_int(
            env, "APEXMESH_REDIS_MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS, low=2, high=10_000
        )
        timeout = env_float(env, "APEXMESH_REDIS_POOL_TIMEOUT_SECONDS", DEFAULT_POOL_TIMEOUT)
        if timeout > 600:
            raise SettingsError("APEXMESH_REDIS_POOL_TIMEOUT_SECONDS must be at most 600")
        return cls(max_connections=size, timeout=timeout)


def connect_redis(url: str, pool: RedisPoolSettings) -> Redis:
    """The process's Redis client over a bounded, blocking pool (no I/O until used);
    the client owns the pool, so its ``aclose()`` closes every connection."""
    return Redis.from_pool(
        BlockingConnectionPool.from_url(
            url, max_connections=pool.max_connections, timeout=pool.timeout
        )
    )


__all__ = ["RedisPoolSettings", "connect_redis"]
