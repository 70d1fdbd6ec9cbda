"""Open BEEP sessions over TCP: ``connect`` (initiating role) and ``listen`` (listening role).

RFC 3081 section 2: the peer that accepts the TCP connection listens, the other initiates.
Both helpers return only once the transport exists; ``connect`` also waits for the
listener's greeting (or raises with the listener's refusal code).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Final

from apexmesh.aio.connection import BeepConnection, StartHandler
from apexmesh.beep.session import Role, SessionConfig

#: Connections the kernel queues before the listener accepts them. asyncio's default of
#: 100 dropped SYNs when a thousand endpoints attached at once (each then waits for a
#: TCP retransmission, a second or more); the kernel caps it at net.core.somaxconn.
LISTEN_BACKLOG: Final = 4096


async def connect(
    host: str,
    port: int,
    config: SessionConfig | None = None,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    on_start: StartHandler | None = None,
    timeout: float = 10.0,  # noqa: ASYNC109  (covers connect and greeting together)
    local_host: str | None = None,
) -> BeepConnection:
    """Connect to a BEEP listener and wait for its greeting.

    ``ssl_context`` is used for TLS tuning (``await conn.start_tls()``), not for the
    initial connection: BEEP starts in plaintext and tunes (RFC 3080 section 3).
    ``local_host`` picks the source address (a host with several), any port.
    """
    loop = asyncio.get_running_loop()

    def factory() -> BeepConnection:
        return BeepConnection(
            Role.INITIATOR,
            config,
            ssl_context=ssl_context,
            server_hostname=server_hostname or host,
            on_start=on_start,
        )

    local = None if local_host is None else (local_host, 0)
    # asyncio.timeout, not wait_for: on Python 3.11 a wait_for whose deadline passes as
    # the connection completes drops the connected transport unclosed (a ResourceWarning
    # on a loaded machine); a cancelled create_connection closes its own.
    async with asyncio.timeout(timeout):
        _, conn = await loop.create_connection(factory, host, port, local_addr=local)
    try:
        async with asyncio.timeout(timeout):
            await conn.wait_ready()
    except BaseException:
        conn.abort()  # no greeting in time, or the peer went away: close the transport
        raise
    return conn


async def listen(
    host: str,
    port: int,
    config: SessionConfig | Callable[[], SessionConfig] | None = None,
    *,
    ssl_context: ssl.SSLContext | None = None,
    on_start: StartHandler | None = None,
    on_connection: Callable[[BeepConnection], None] | None = None,
) -> asyncio.Server:
    """Listen for BEEP sessions; each connection gets its own session.

    ``config`` may be a factory so each session gets fresh SASL state. ``on_connection``
    sees every new connection (for registries, metrics and shutdown).
    """
    loop = asyncio.get_running_loop()

    def factory() -> BeepConnection:
        session_config = config() if callable(config) else config
        conn = BeepConnection(
            Role.LISTENER, session_config, ssl_context=ssl_context, on_start=on_start
        )
        if on_connection is not None:
            on_connection(conn)
        return conn

    return await loop.create_server(factory, host, port, backlog=LISTEN_BACKLOG)
