"""redis-py connections whose writes keep a cancellation, on Python 3.11.

redis-py bounds a write with ``asyncio.wait_for`` when its connection has a
``socket_timeout`` (the Sentinel and Cluster clients here: :data:`SOCKET_TIMEOUT
<apexmesh.store.connection.SOCKET_TIMEOUT>`). Python 3.11's ``wait_for`` returns the
write's result when its task is cancelled just as the write finishes, and so loses the
cancellation (python/cpython#86296; 3.12 rebuilt ``wait_for`` on ``asyncio.timeout``):
the cancelled task goes on with its next command, and whoever awaits it after
``cancel()`` (a pod's stop, a writer's end) waits forever. Measured with three cluster
primaries: of 300 writer tasks cancelled at a random moment, 197 went on; with the write
bounded by ``asyncio.timeout`` (below), none. tests/apexmesh/store/cluster/
test_cancellable.py cancels 200 writers one loop turn apart (it fails without this).

The write here is redis-py 8.1's ``send_packed_command`` with that one change, and one
more: a connection that another task closed between the connect check and the write
(its writer gone) raises :class:`~redis.exceptions.ConnectionError`, which the cluster
client retries, instead of ``AttributeError: 'NoneType' object has no attribute
'writelines'`` (redis/redis-py#4287, fixed after 8.1), which nothing retries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Final

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection
from redis.asyncio.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError


class _WriteKeepsCancellation(AbstractConnection):
    """The write of every connection class below (module docstring)."""

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        if not self.is_connected:
            await self._reconnect()
        if check_health:
            await self.check_health()  # type: ignore[no-untyped-call, unused-ignore]
        parts = [command.encode()] if isinstance(command, str) else command
        parts = [parts] if isinstance(parts, bytes) else parts
        writer = self._writer  # no await from here to the write
        if writer is None:
            raise RedisConnectionError("the connection was closed before the write")
        try:
            async with asyncio.timeout(self.socket_timeout or None):
                writer.writelines(parts)
                await writer.drain()
        except TimeoutError:  # before OSError: on 3.11 it is one
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as exc:
            await self.disconnect(nowait=True)
            raise RedisConnectionError(f"Error while writing to socket: {exc}") from exc
        except BaseException:
            # As redis-py: a write cut short (a cancellation) leaves the stream unusable.
            await self.disconnect(nowait=True)
            raise

    async def _reconnect(self) -> None:
        """Connect again before a write (as redis-py's write does)."""
        await self.connect_check_health(check_health=False)


class _AsksTheSentinels(_WriteKeepsCancellation):
    """A Sentinel connection that asks the sentinels for the primary when it connects
    again before a write. redis-py 8's write reconnects to the address it had (the
    base class's ``connect_check_health``), which only a pool's fresh connections
    avoid: a client that keeps one connection (a follower's blocked XREAD,
    :func:`~apexmesh.store.connection.dedicated_client`) dialled the killed primary
    for as long as the mesh ran after a failover (issue #30; found by
    tests/system/test_mesh_sentinel_failover.py)."""

    async def _reconnect(self) -> None:
        # SentinelManagedConnection.connect (next in the concrete classes' MRO): it asks
        # the sentinels for the primary, then connects.
        await self.connect()  # type: ignore[no-untyped-call, unused-ignore]


class KeepingConnection(_WriteKeepsCancellation, Connection):
    """A TCP connection of a cluster node."""


class KeepingSSLConnection(_WriteKeepsCancellation, SSLConnection):
    """A TLS connection of a cluster node (``rediss+cluster://``)."""


class KeepingSentinelConnection(_AsksTheSentinels, SentinelManagedConnection):
    """A connection to the primary the sentinels name."""


class KeepingSentinelSSLConnection(_AsksTheSentinels, SentinelManagedSSLConnection):
    """The same over TLS (``rediss+sentinel://``)."""


#: redis-py's classes and the ones that replace them.
_KEEPING: Final[dict[type[Any], type[Any]]] = {
    Connection: KeepingConnection,
    SSLConnection: KeepingSSLConnection,
    SentinelManagedConnection: KeepingSentinelConnection,
    SentinelManagedSSLConnection: KeepingSentinelSSLConnection,
}


def sentinel_connection_class(tls: bool) -> type[SentinelManagedConnection]:
    """The class a Sentinel pool makes its connections of."""
    return KeepingSentinelSSLConnection if tls else KeepingSentinelConnection


def keep_cancellations(cluster: RedisCluster) -> RedisCluster:
    """``cluster`` (not yet initialised), its nodes making connections of the classes
    above. redis-py's cluster takes no connection class: it picks ``Connection`` or
    ``SSLConnection`` into the keyword arguments its startup nodes were made with and
    every node found later is made with, so both are changed here."""
    kwargs = cluster.nodes_manager.connection_kwargs
    made = kwargs["connection_class"]
    kwargs["connection_class"] = _KEEPING.get(made, made)
    for node in cluster.nodes_manager.startup_nodes.values():
        node.connection_class = _KEEPING.get(node.connection_class, node.connection_class)
    return cluster
