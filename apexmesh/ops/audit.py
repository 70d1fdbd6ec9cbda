"""Authentication failures: one counter and one log line each, the same in every service.

Every failed authentication (a SASL exchange refused at a relay's BEEP listener, a
missing or wrong bearer token at an admin API) goes through :meth:`AuthFailures.record`:

* the counter ``apexmesh_auth_failures_total{mechanism, service}`` grows by one
  (``mechanism`` is the SASL mechanism name, ``bearer`` for the admin API; both sets
  are bounded, so the label is safe), for a Prometheus alert on a burst;
* a WARNING line says which peer address failed with which mechanism, and why (the
  reply code or the reason). The secret, and anything derived from it, is never
  logged: callers pass the mechanism, the peer and the reason only.
"""

from __future__ import annotations

import logging
from typing import Final

from prometheus_client import CollectorRegistry, Counter

#: The metric every service counts authentication failures in.
AUTH_FAILURES: Final = "apexmesh_auth_failures"

_log = logging.getLogger("apexmesh.audit")


def peer_text(peer: object) -> str:
    """``host:port`` of a peer address tuple (``peername``), or its text."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return "" if peer is None else str(peer)


class AuthFailures:
    """The authentication failures of one service (see the module docstring)."""

    def __init__(self, service: str, registry: CollectorRegistry) -> None:
        self.service = service
        self._counter = Counter(
            AUTH_FAILURES,
            "Failed authentications, by mechanism (a SASL mechanism, or bearer for the admin API).",
            ["mechanism", "service"],
            registry=registry,
        )

    def record(self, mechanism: str, peer: object, reason: str) -> None:
        """Count one failure and log it with the peer's address and the mechanism."""
        mechanism = mechanism.upper() if mechanism != "bearer" else mechanism
        self._counter.labels(mechanism, self.service).inc()
        _log.warning(
            "authentication failed: %s from %s (%s)",
            mechanism,
            peer_text(peer),
            reason,
            extra={"peer": peer_text(peer), "mechanism": mechanism, "event": "auth_failed"},
        )


__all__ = ["AUTH_FAILURES", "AuthFailures", "peer_text"]
