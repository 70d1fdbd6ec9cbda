"""Client channels between the mesh's services (DESIGN.md: gRPC inside).

Every grpc.aio channel the services open to one another is made here, so that all of them
recover the same way when a peer restarts. gRPC's defaults back reconnect attempts off
exponentially up to two minutes: after an access service or relay pod was down for a
while, callers kept failing with UNAVAILABLE ("421 not available") for tens of seconds
after it was back. Here the backoff starts at 100 ms and never exceeds one second, and
keepalive pings find a peer that vanished without closing its connections.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import grpc

#: Channel arguments of every internal channel (gRPC core's ``GRPC_ARG_*`` names).
RECOVERY_OPTIONS: Final[tuple[tuple[str, int], ...]] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 0),
)


def internal_channel(
    target: str,
    options: Sequence[tuple[str, str | int]] = (),
    *,
    interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
) -> grpc.aio.Channel:
    """An insecure channel to another service of the mesh (the cluster network is
    private; see docs), with :data:`RECOVERY_OPTIONS` and the caller's ``options``
    (which win)."""
    given = {name for name, _ in options}
    merged = [option for option in RECOVERY_OPTIONS if option[0] not in given]
    return grpc.aio.insecure_channel(
        target, options=[*merged, *options], interceptors=list(interceptors) or None
    )


__all__ = ["RECOVERY_OPTIONS", "internal_channel"]
