"""Where the relays of an administrative domain are (RFC 3340 section 3.1), sans-I/O.

A domain named by a FQDN publishes SRV records (RFC 2782) for ``_apex-edge._tcp.DOMAIN``
(endpoint-relay) and ``_apex-mesh._tcp.DOMAIN`` (relay-relay). :func:`order_targets` puts
the records in the order a client tries them: lowest priority first; within a priority,
a weighted random order (RFC 2782's selection, repeated until every target is placed), so
that load spreads as the weights say and a client falls back to the next target when one
cannot be reached. A target of ``.`` means the service is decidedly not available.

A domain-literal (``[10.0.0.1]``) has no SRV records: its address is taken from the
literal and the port is the one IANA registered for the service (section 3.1; 912 for
apex-mesh, 913 for apex-edge).

No randomness is drawn here: the caller passes ``draw(n)``, a uniform integer in
``0..n`` (``random.randint(0, n)`` in production, a fixed sequence in tests).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

#: Service names of RFC 3340 section 3.1 (the ``_service`` label of the SRV owner).
EDGE_SERVICE: Final = "apex-edge"
MESH_SERVICE: Final = "apex-mesh"

#: TCP ports IANA registered for the services (RFC 3340 sections 8.2 and 8.3).
REGISTERED_PORTS: Final = {MESH_SERVICE: 912, EDGE_SERVICE: 913}

#: ``draw(n)``: a uniformly chosen integer between 0 and n inclusive.
Draw = Callable[[int], int]


@dataclass(frozen=True, slots=True)
class SrvTarget:
    """One SRV record's data (RFC 2782)."""

    priority: int
    weight: int
    port: int
    #: Host name, without the trailing dot.
    target: str


def srv_name(service: str, domain: str) -> str:
    """The SRV owner name of ``service`` for ``domain``: ``_apex-edge._tcp.DOMAIN.``."""
    return f"_{service}._tcp.{domain}."


def literal_address(domain: str) -> str | None:
    """The IP address of a domain-literal (``[10.0.0.1]``, ``[IPv6:::1]``), else None."""
    if not (domain.startswith("[") and domain.endswith("]")):
        return None
    inner = domain[1:-1]
    if inner[:5].lower() == "ipv6:":
        inner = inner[5:]
    try:
        return str(ipaddress.ip_address(inner))
    except ValueError:
        return None


def order_targets(records: Iterable[SrvTarget], draw: Draw) -> list[SrvTarget]:
    """Every usable record in the order to try them (RFC 2782, "Usage rules")."""
    usable = [r for r in records if r.target not in ("", ".")]
    ordered: list[SrvTarget] = []
    for priority in sorted({r.priority for r in usable}):
        # RFC 2782: zero-weight records first in the list, so they are rarely picked
        # while others are there, yet are picked when they are the only ones left.
        pending = sorted((r for r in usable if r.priority == priority), key=lambda r: r.weight != 0)
        while pending:
            total = sum(r.weight for r in pending)
            chosen = draw(total)
            running = 0
            for index, record in enumerate(pending):
                running += record.weight
                if running >= chosen:
                    ordered.append(pending.pop(index))
                    break
    return ordered


__all__ = [
    "EDGE_SERVICE",
    "MESH_SERVICE",
    "REGISTERED_PORTS",
    "Draw",
    "SrvTarget",
    "literal_address",
    "order_targets",
    "srv_name",
]
