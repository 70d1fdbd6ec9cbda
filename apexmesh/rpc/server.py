"""grpc.aio server factory and graceful stop (the grpc ``examples/python`` shape).

``create_server`` returns ``(server, port)`` with the server already started, as the
grpc examples' ``create_server`` helpers do; port 0 lets the kernel choose, which is how
tests run many servers side by side. ``graceful_stop`` follows uvicorn's shutdown order:
stop accepting, let in-flight calls finish within a grace period, then cancel the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import grpc
from prometheus_client import CollectorRegistry

from apexmesh.rpc.observe import ServerObserver

#: Largest gRPC message accepted. APEX operations are small XML elements; batched
#: checks of a data element with many recipients stay far below this.
MAX_MESSAGE_BYTES: Final = 4 * 1024 * 1024

#: Seconds in-flight calls get to finish on shutdown (SIGTERM) before cancellation.
DEFAULT_GRACE: Final = 5.0

#: The shortest interval between keepalive pings a server accepts on a connection that
#: carries no data (gRPC core's default is five minutes, after which the third early
#: ping is answered with GOAWAY "too_many_pings"). The mesh's clients ping every 20 s
#: (apexmesh/rpc/channels.py) and keep long-lived streams open between processes
#: (apexmesh/rpc/batched.py, the relay's DeliverStream) that go quiet between bursts: a
#: server must accept those pings or it cuts the idle streams every minute.
ACCEPTED_PING_INTERVAL_MS: Final = 10_000

#: A function adding one servicer to a server (``add_XServicer_to_server`` bound to a
#: servicer instance).
Registration = Callable[[grpc.aio.Server], None]


async def create_server(
    registrations: Sequence[Registration],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    options: Sequence[tuple[str, int]] = (),
    registry: CollectorRegistry | None = None,
    accepted_ping_interval_ms: int = ACCEPTED_PING_INTERVAL_MS,
) -> tuple[grpc.aio.Server, int]:
    """Build, bind and start a grpc.aio server; return it with the port it listens on.

    ``max_message_bytes`` bounds one message either way (a relay carrying whole APEX
    messages between its pods raises it to its BEEP message limit and some); ``options``
    adds gRPC channel arguments (``grpc.max_connection_age_ms`` ...). With a
    ``registry`` every call is counted and timed there and runs with its caller's
    correlation id (:mod:`apexmesh.rpc.observe`)."""
    observers = [] if registry is None else [ServerObserver(registry)]
    server = grpc.aio.server(
        interceptors=[*observers, *interceptors],
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.so_reuseport", 0),
            ("grpc.http2.min_ping_interval_without_data_ms", accepted_ping_interval_ms),
            *options,
        ],
    )
    for register in registrations:
        register(server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind gRPC server to {host}:{port}")
    await server.start()
    return server, bound


async def graceful_stop(server: grpc.aio.Server, grace: float = DEFAULT_GRACE) -> None:
    """Stop accepting calls, give running ones ``grace`` seconds, then cancel them."""
    await server.stop(grace)


__all__ = [
    "ACCEPTED_PING_INTERVAL_MS",
    "DEFAULT_GRACE",
    "MAX_MESSAGE_BYTES",
    "Registration",
    "create_server",
    "graceful_stop",
]
