"""One bounded Redis client per process, sized from settings: standalone, Sentinel or Cluster.

redis-py's default pool opens a new socket for every concurrent command: a burst (10,000
sessions closing at once, 100 pipelined subscribes) opens thousands of connections and
then fails ("Too many connections", or Redis's own ``maxclients``). Every apex-mesh
process instead builds its one client here, over a
:class:`redis.asyncio.BlockingConnectionPool`: at most ``max_connections`` sockets, and a
command that finds them all busy waits up to ``timeout`` seconds for one to come back
before it fails with a :class:`redis.exceptions.ConnectionError` (the caller's usual
Redis failure path). Bursts queue instead of failing, and the stores coalesce what
queues (:mod:`apexmesh.store.batching`), so a burst costs a few round trips.

Three deployments, told apart by the URL's scheme (docs/redis.md):

- ``redis://``, ``rediss://``, ``unix://``: one Redis (with AOF), the names of
  :class:`~apexmesh.store.keys.Keys` as they always were.
- ``redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/PRIMARY-NAME[/DB]`` (or
  ``rediss+sentinel://``): a primary with replicas, managed by Sentinel. The client asks
  the sentinels for the primary on every new connection, so after a failover the next
  command reaches the promoted replica (commands meanwhile fail to their callers' Redis
  failure paths): no restart. The password is the primary's; the sentinels are asked
  without one unless ``?sentinel_password=...`` is given.
- ``redis+cluster://[:PASSWORD@]HOST:PORT[,HOST:PORT...]`` (or ``rediss+cluster://``):
  Redis Cluster through redis-py's cluster client (slots discovered from any of the
  nodes given); keys then carry hash tags (``Keys(cluster=True)``, :func:`keys_for`).

Settings (every service, read by :meth:`RedisPoolSettings.from_env`):

- ``APEXMESH_REDIS_MAX_CONNECTIONS`` (``64``): sockets of the pool, 2..10000 (per node in
  a cluster). Long-lived subscriptions (the access cache's change channel, the pubsub
  event follower) each keep one of them.
- ``APEXMESH_REDIS_POOL_TIMEOUT_SECONDS`` (``5.0``): how long a command waits for a free
  connection.
- ``APEXMESH_REDIS_WAIT_REPLICAS`` (``0``; the chart sets ``1`` with replicas): the held
  data and robust publication stores acknowledge a write only once ``WAIT`` says this many
  replicas have it (:class:`Durability`, docs/redis.md "What an acknowledgement promises").
- ``APEXMESH_REDIS_WAIT_TIMEOUT_MS`` (``1000``): how long that ``WAIT`` may take; a write
  not confirmed in time fails (:class:`NotReplicated`) and is not acknowledged.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast
from urllib.parse import parse_qs, unquote, urlsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import (
    AskError,
    AuthenticationError,
    ClusterDownError,
    MaxConnectionsError,
    MovedError,
    NoScriptError,
    RedisError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from apexmesh.aio.tasks import within
from apexmesh.ops.settings import SettingsError, env_float, env_int
from apexmesh.store.cancellable import keep_cancellations, sentinel_connection_class
from apexmesh.store.keys import Keys

#: Default number of connections of a process's pool.
DEFAULT_MAX_CONNECTIONS: Final = 64
#: Default seconds a command waits for a free connection.
DEFAULT_POOL_TIMEOUT: Final = 5.0
#: Default milliseconds a ``WAIT`` for replicas may take.
DEFAULT_WAIT_TIMEOUT_MS: Final = 1000

#: URL schemes of a Sentinel-managed primary and of a Redis Cluster.
SENTINEL_SCHEMES: Final = frozenset({"redis+sentinel", "rediss+sentinel"})
CLUSTER_SCHEMES: Final = frozenset({"redis+cluster", "rediss+cluster"})
#: Every scheme :func:`connect_redis` accepts.
SCHEMES: Final = frozenset({"redis", "rediss", "unix"}) | SENTINEL_SCHEMES | CLUSTER_SCHEMES

#: Seconds a cluster command that met a broken connection or a cluster without a primary
#: for its slot is tried again (the slot table reloaded before each try, :data:`_BACKOFF`
#: between them): longer than a failover of a primary to its replica
#: (``cluster-node-timeout`` plus the election: about 4.5 s with a 2 s timeout, measured
#: by tests/apexmesh/store/cluster/test_cluster_failover.py), so that delays commands
#: instead of failing them.
FAILOVER_SECONDS: Final = 15.0
#: Retries of a cluster pipeline (redis-py's own loop, 0.25 s apart, about 10 s).
FAILOVER_RETRIES: Final = 40
_BACKOFF: Final = ExponentialBackoff(cap=0.5, base=0.05)
#: Seconds a reply may take on a Sentinel or Cluster connection (a long script, a
#: blocked read); a standalone client waits as long as its connection lives.
SOCKET_TIMEOUT: Final = 30.0


class NotReplicated(RedisError):  # noqa: N818 (a Redis failure, named for what it says)
    """A write is on the primary but ``WAIT`` did not see the replicas it asks for in
    time: the caller must not acknowledge it (a retry may store it twice, never lose it)."""


@dataclass(frozen=True, slots=True)
class Durability:
    """When a store may acknowledge a write: ``replicas`` > 0 sends ``WAIT replicas
    timeout_ms`` on the write's own connection after it (:func:`replicated`)."""

    replicas: int = 0
    timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class RedisPoolSettings:
    """How big the process's Redis pool is, how long a command waits for room, and how
    many replicas an acknowledged write waits for."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    timeout: float = DEFAULT_POOL_TIMEOUT
    durability: Durability = Durability()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RedisPoolSettings:
        """Read the ``APEXMESH_REDIS_*`` pool and durability settings (module docstring)."""
        size = env_int(
            env, "APEXMESH_REDIS_MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS, low=2, high=10_000
        )
        timeout = env_float(env, "APEXMESH_REDIS_POOL_TIMEOUT_SECONDS", DEFAULT_POOL_TIMEOUT)
        if timeout > 600:
            raise SettingsError("APEXMESH_REDIS_POOL_TIMEOUT_SECONDS must be at most 600")
        replicas = env_int(env, "APEXMESH_REDIS_WAIT_REPLICAS", 0, low=0, high=16)
        wait_ms = env_int(
            env, "APEXMESH_REDIS_WAIT_TIMEOUT_MS", DEFAULT_WAIT_TIMEOUT_MS, low=1, high=60_000
        )
        return cls(max_connections=size, timeout=timeout, durability=Durability(replicas, wait_ms))


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (its keys need hash tags)."""
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def keys_for(url: str, prefix: str) -> Keys:
    """The key space of a deployment reached through ``url``: tagged on a cluster."""
    return Keys(prefix, cluster=is_cluster_url(url))


def _hosts(netloc: str, scheme: str) -> list[tuple[str, int]]:
    hosts = []
    for item in netloc.rpartition("@")[2].split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon or not host or not port.isdigit():
            raise SettingsError(f"APEXMESH_REDIS_URL ({scheme}): {item!r} is not host:port")
        hosts.append((host.strip("[]"), int(port)))
    return hosts


def _password(netloc: str) -> tuple[str | None, str | None]:
    auth, at, _ = netloc.rpartition("@")
    if not at:
        return None, None
    user, colon, password = auth.partition(":")
    return (unquote(user) or None), (unquote(password) if colon else None)


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's pool (the primary's address asked on each new connection) with the
    bounded, waiting behaviour of :class:`BlockingConnectionPool`."""


def connect_redis(url: str, pool: RedisPoolSettings) -> Redis:
    """The process's Redis client over a bounded pool (no I/O until used); the client
    owns its pool, so its ``aclose()`` closes every connection.

    A cluster's client is a :class:`~redis.asyncio.cluster.RedisCluster`, typed here as
    :class:`Redis`: the stores use only commands both implement (one-slot scripts,
    pipelines, pub/sub), which the cluster tests run (tests/apexmesh/store/cluster)."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise SettingsError(f"APEXMESH_REDIS_URL scheme {parts.scheme!r} is not redis")
    user, password = _password(parts.netloc)
    tls = parts.scheme.startswith("rediss")
    # On a cluster only its count is used, by pipelines (redis-py's loop, 0.25 s apart);
    # commands go through _BoundedCluster's own retry, which never retries a timeout (a
    # script that timed out may have run).
    retry = Retry(_BACKOFF, FAILOVER_RETRIES, (RedisConnectionError,))
    if parts.scheme in CLUSTER_SCHEMES:
        cluster = _BoundedCluster(
            pool.max_connections,
            pool.timeout,
            startup_nodes=[ClusterNode(h, p) for h, p in _hosts(parts.netloc, parts.scheme)],
            username=user,
            password=password,
            ssl=tls,
            # Per node; the client's semaphore keeps commands in flight to the pool's
            # size, and pipelines may use the rest.
            max_connections=2 * pool.max_connections,
            retry=retry,
            socket_timeout=SOCKET_TIMEOUT,
        )
        keep_cancellations(cluster)
        _CLUSTERS[cluster] = (url, pool)
        if pool.durability.replicas:
            _DURABILITY[cluster] = pool.durability
        return cast(Redis, cluster)
    if parts.scheme in SENTINEL_SCHEMES:
        client = _sentinel_client(parts.path, parts.query, parts, user, password, tls, pool)
    else:
        client = Redis.from_pool(
            BlockingConnectionPool.from_url(
                url, max_connections=pool.max_connections, timeout=pool.timeout
            )
        )
    if pool.durability.replicas:
        _DURABILITY[client] = pool.durability
    return client


#: The durability each client was made with (:func:`durability_of`).
_DURABILITY: Final[weakref.WeakKeyDictionary[Any, Durability]] = weakref.WeakKeyDictionary()


def durability_of(redis: Redis) -> Durability:
    """The :class:`Durability` the process's client was made with (``connect_redis``'s
    settings), so the stores that acknowledge writes follow the process's one setting
    without each service passing it. A cluster client runs ``WAIT`` too, on the
    connection of the write's own node (:meth:`_BoundedCluster.on_one_connection`)."""
    return _DURABILITY.get(redis, _NO_WAIT)


_NO_WAIT: Final = Durability()


#: Failures of a cluster command that mean it did not reach a primary of its slot, or
#: lost its connection: tried again for :data:`FAILOVER_SECONDS`. A timeout is not among
#: them (the script may have run); nor a full pool or refused credentials.
_FAILOVER_ERRORS: Final = (RedisConnectionError, ClusterDownError, SlotNotCoveredError)
_NOT_RETRIED: Final = (MaxConnectionsError, AuthenticationError)


class _BoundedCluster(RedisCluster):
    """redis-py's cluster client, with two of its behaviours changed:

    - It fails a command that finds its node's connections all busy
      (``MaxConnectionsError``) where the standalone pool waits: this one lets at most
      ``size`` commands be in flight and makes the others wait up to ``timeout`` seconds,
      then fail with a :class:`~redis.exceptions.ConnectionError` (the pool's behaviour).
    - Its command retries (``retry``'s count) run back to back, the backoff unused: 40
      took 1.6 s after a SIGKILLed primary, less than the election, and retried timeouts
      too. Here redis-py retries nothing (:attr:`ERRORS_ALLOW_RETRY`) and
      :meth:`execute_command` tries again with a backoff for :data:`FAILOVER_SECONDS`,
      after broken connections and a missing primary only."""

    #: What redis-py's own command loop retries (an exact-type check): nothing.
    ERRORS_ALLOW_RETRY = ()  # type: ignore[assignment]

    def __init__(self, size: int, timeout: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._room = asyncio.Semaphore(size)
        self._wait = timeout
        #: Script texts by hash, and the (node, hash) pairs known to be loaded.
        self._scripts: dict[str, Any] = {}
        self._loaded: set[tuple[str, str]] = set()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        await self._take_room()
        try:
            return await self._through_failover(*args, **kwargs)
        finally:
            self._room.release()

    async def _take_room(self) -> None:
        """One of the ``size`` places of commands in flight, or RedisConnectionError after
        ``timeout`` s (through :func:`~apexmesh.aio.tasks.within`: with ``wait_for`` a
        cancellation as the place was taken was lost)."""
        try:
            await within(self._room.acquire(), self._wait)
        except TimeoutError:
            raise RedisConnectionError(f"no free connection in {self._wait} s") from None

    def register_script(self, script: Any) -> Any:
        """redis-py's script object; its text is kept by hash, so that
        :meth:`on_one_connection` can load it on a node that does not know it yet."""
        made = super().register_script(script)
        self._scripts[made.sha] = made.script
        return made

    async def on_one_connection(
        self, commands: Sequence[tuple[Any, ...]], durability: Durability
    ) -> list[Any]:
        """Send ``commands`` (keys of one slot), then ``WAIT`` when ``durability`` asks
        for replicas, in one write on one connection of the slot's primary: WAIT counts
        that connection's writes (redis-py's cluster pipeline refuses scripts, and may
        send a redirected command on its own, away from the WAIT). Tried again like a
        command (:meth:`_through_failover`) after a broken connection or a moved slot.
        Returns the commands' replies, then WAIT's."""
        await self._take_room()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FAILOVER_SECONDS
        failures = 0
        try:
            while True:
                try:
                    return await self._one_write(commands, durability)
                except (*_FAILOVER_ERRORS, MovedError, AskError, TryAgainError) as exc:
                    left = deadline - loop.time()
                    if isinstance(exc, _NOT_RETRIED) or left <= 0:
                        raise
                    self._initialize = True  # the slot table is reloaded first
                    failures += 1
                    await asyncio.sleep(min(_BACKOFF.compute(failures), left))
        finally:
            self._room.release()

    async def _one_write(
        self, commands: Sequence[tuple[Any, ...]], durability: Durability
    ) -> list[Any]:
        if self._initialize:
            await self.initialize()
        slot = await self._determine_slot(*commands[0])
        node = self.nodes_manager.get_node_from_slot(slot)
        batch: list[tuple[Any, ...]] = [
            ("SCRIPT", "LOAD", self._scripts[sha])
            for sha in dict.fromkeys(c[1] for c in commands if c[0] == "EVALSHA")
            if (node.name, sha) not in self._loaded
        ]
        loads = len(batch)
        batch += commands
        if durability.replicas:
            batch.append(("WAIT", durability.replicas, durability.timeout_ms))
        queued = [PipelineCommand(i, *c) for i, c in enumerate(batch)]
        try:
            await node.execute_pipeline(queued)
        except (RedisConnectionError, OSError):
            self._loaded = {loaded for loaded in self._loaded if loaded[0] != node.name}
            raise
        results = [c.result for c in queued]
        for result in results:
            if isinstance(result, Exception):
                if isinstance(result, (RedisConnectionError, NoScriptError)):
                    self._loaded = {done for done in self._loaded if done[0] != node.name}
                raise result
        self._loaded.update((node.name, c[1]) for c in batch[:loads])
        return results[loads:]

    async def _through_failover(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command; after a failure of :data:`_FAILOVER_ERRORS` try again, the
        slot table reloaded (redis-py marks it stale on that failure), until a promoted
        replica answers or :data:`FAILOVER_SECONDS` have passed. A command sent to named
        nodes is not tried again: those nodes may be gone (redis-py's rule too)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FAILOVER_SECONDS
        failures = 0
        while True:
            try:
                return await super().execute_command(*args, **kwargs)
            except _FAILOVER_ERRORS as exc:
                left = deadline - loop.time()
                if isinstance(exc, _NOT_RETRIED) or "target_nodes" in kwargs or left <= 0:
                    raise
                failures += 1
                await asyncio.sleep(min(_BACKOFF.compute(failures), left))


#: How each cluster client was made, so that :func:`dedicated_client` can make a sibling.
_CLUSTERS: Final[weakref.WeakKeyDictionary[Any, tuple[str, RedisPoolSettings]]] = (
    weakref.WeakKeyDictionary()
)


def dedicated_client(redis: Redis) -> Redis:
    """A client of the same Redis on connections of its own that does not retry: what a
    long-lived follower (a blocked XREAD) holds, so that a lost read reaches its error
    path (resynchronise) instead of waiting in a hidden retry. The caller closes it."""
    made = _CLUSTERS.get(redis)
    if made is None:
        return redis.client()
    url, pool = made
    parts = urlsplit(url)
    user, password = _password(parts.netloc)
    return cast(
        Redis,
        keep_cancellations(
            RedisCluster(
                startup_nodes=[ClusterNode(h, p) for h, p in _hosts(parts.netloc, parts.scheme)],
                username=user,
                password=password,
                ssl=parts.scheme.startswith("rediss"),
                max_connections=pool.max_connections,
                retry=Retry(NoBackoff(), 0),
                socket_timeout=SOCKET_TIMEOUT,
            )
        ),
    )


class _SentinelRedis(Redis):
    """The primary's client; closing it closes its connections to the sentinels too."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool = self.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            for sentinel in pool.sentinel_manager.sentinels:
                await sentinel.aclose()


def _sentinel_client(
    path: str,
    query: str,
    parts: Any,
    user: str | None,
    password: str | None,
    tls: bool,
    pool: RedisPoolSettings,
) -> Redis:
    names = [segment for segment in path.split("/") if segment]
    if not names or len(names) > 2 or (len(names) == 2 and not names[1].isdigit()):
        raise SettingsError("APEXMESH_REDIS_URL (sentinel): the path is /PRIMARY-NAME[/DB]")
    options = parse_qs(query)
    sentinel_password = options.get("sentinel_password", [None])[0]
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        _hosts(parts.netloc, parts.scheme),
        sentinel_kwargs={"password": sentinel_password, "socket_timeout": 1.0},
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=2.0,
    )
    client: Redis = sentinel.master_for(
        names[0],
        redis_class=_SentinelRedis,
        connection_pool_class=_BlockingSentinelPool,
        db=int(names[1]) if len(names) == 2 else 0,
        username=user,
        password=password,
        # TLS or not by the class (the pool reads ``ssl`` only without one).
        connection_class=sentinel_connection_class(tls),
        max_connections=pool.max_connections,
        timeout=pool.timeout,
        # redis-py's own retry (no backoff retries of ours): with retries, its connection
        # kept dialling the dead primary's address for as long as they lasted (measured
        # 19 s); without, a command fails fast until the sentinels name the promoted
        # replica, then the next one reaches it (2.3 s after a SIGKILL here).
        check_connection=True,
    )
    return client


class _Queued:
    """Stands for a pipeline in the calls :func:`replicated` runs on a cluster: records
    the commands (a script's ``EVALSHA``) for :meth:`_BoundedCluster.on_one_connection`."""

    def __init__(self) -> None:
        self.commands: list[tuple[Any, ...]] = []

    def execute_command(self, *args: Any) -> None:
        self.commands.append(args)

    async def evalsha(self, sha: str, numkeys: int, *args: Any) -> None:
        self.commands.append(("EVALSHA", sha, numkeys, *args))


async def replicated(
    redis: Redis, durability: Durability, calls: Sequence[Any], *, keys: Sequence[str]
) -> list[Any]:
    """Run ``calls`` (each ``f(pipe)``, queuing one command) in one pipeline, then, when
    ``durability`` asks for replicas, ``WAIT`` on that same connection (WAIT counts the
    replicas that have this connection's writes). Returns the calls' results; raises
    :class:`NotReplicated` when fewer replicas confirmed in time. ``keys`` name what is
    written (for the message). On a cluster the calls' scripts go to their slot's primary
    on one connection, WAIT after them (:meth:`_BoundedCluster.on_one_connection`)."""
    if isinstance(redis, _BoundedCluster):
        queued = _Queued()
        for call in calls:
            await call(queued)
        results = await redis.on_one_connection(queued.commands, durability)
    else:
        async with redis.pipeline(transaction=False) as pipe:
            for call in calls:
                await call(pipe)
            if durability.replicas:
                pipe.execute_command("WAIT", durability.replicas, durability.timeout_ms)
            results = list(await pipe.execute())
    if durability.replicas:
        confirmed = int(results.pop())
        if confirmed < durability.replicas:
            raise NotReplicated(
                f"{', '.join(keys)}: {confirmed} of {durability.replicas} replicas confirmed "
                f"in {durability.timeout_ms} ms"
            )
    return results


__all__ = [
    "CLUSTER_SCHEMES",
    "FAILOVER_RETRIES",
    "FAILOVER_SECONDS",
    "SCHEMES",
    "SENTINEL_SCHEMES",
    "Durability",
    "NotReplicated",
    "RedisPoolSettings",
    "connect_redis",
    "dedicated_client",
    "durability_of",
    "is_cluster_url",
    "keys_for",
    "replicated",
]
