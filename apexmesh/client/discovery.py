"""Finding and reaching a domain's relay (RFC 3340 section 3.1) for the endpoint SDK.

:func:`connect_domain` is :func:`~apexmesh.client.client.connect_endpoint` by domain
name: it resolves ``_apex-edge._tcp.DOMAIN`` SRV records (dnspython), orders them as RFC
2782 says (:mod:`apexmesh.apex.discovery`) and connects to the first target that
answers, falling back to the next one when a target cannot be reached. A domain-literal
(``[10.0.0.1]``) is connected to directly, on the port IANA registered for apex-edge.

TLS checks the certificate against the SRV target's host name (the host actually
dialled; RFC 2782 targets are the relays' own names), unless ``server_hostname`` says
otherwise. A domain with no records is 550; every target unreachable is 421.
"""

from __future__ import annotations

import random
import ssl

import dns.asyncresolver
import dns.exception
import dns.resolver

from apexmesh.aio import ConnectionClosedError
from apexmesh.apex.discovery import (
    EDGE_SERVICE,
    REGISTERED_PORTS,
    Draw,
    SrvTarget,
    literal_address,
    order_targets,
    srv_name,
)
from apexmesh.beep.session import SessionConfig
from apexmesh.client.attachment import DEFAULT_QUEUE_LIMIT
from apexmesh.client.client import ApexClient, connect_endpoint
from apexmesh.client.errors import ApexClientError

#: Seconds one SRV lookup may take.
LOOKUP_SECONDS = 3.0

_random = random.SystemRandom()


def _draw(limit: int) -> int:
    return _random.randint(0, limit)


async def locate_relays(
    domain: str,
    *,
    service: str = EDGE_SERVICE,
    resolver: dns.asyncresolver.Resolver | None = None,
    draw: Draw = _draw,
) -> list[tuple[str, int]]:
    """The (host, port) of every relay of ``domain`` for ``service``, in the order to
    try them. Raises ApexClientError 550 when DNS knows none."""
    address = literal_address(domain)
    if address is not None:
        return [(address, REGISTERED_PORTS[service])]
    resolver = resolver or dns.asyncresolver.get_default_resolver()
    try:
        answer = await resolver.resolve(srv_name(service, domain), "SRV", lifetime=LOOKUP_SECONDS)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        raise ApexClientError(550, f"no relay serves {domain} ({service})") from None
    except (dns.exception.DNSException, OSError) as exc:
        raise ApexClientError(421, f"cannot look up the relays of {domain}: {exc}") from None
    records = [
        SrvTarget(int(r.priority), int(r.weight), int(r.port), str(r.target).rstrip("."))
        for r in answer
    ]
    ordered = order_targets(records, draw)
    if not ordered:
        raise ApexClientError(550, f"{domain} says it has no {service} service")
    return [(record.target, record.port) for record in ordered]


async def connect_domain(
    domain: str,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    sasl: tuple[str, str, str] | None = None,
    config: SessionConfig | None = None,
    queue_limit: int = DEFAULT_QUEUE_LIMIT,
    timeout: float = 10.0,  # noqa: ASYNC109  (per target: connect, tuning and SASL)
    resolver: dns.asyncresolver.Resolver | None = None,
) -> ApexClient:
    """Open a BEEP session to a relay of ``domain`` (see the module docstring); the
    arguments after ``domain`` are :func:`connect_endpoint`'s."""
    failures: list[str] = []
    for host, port in await locate_relays(domain, resolver=resolver):
        try:
            return await connect_endpoint(
                host,
                port,
                ssl_context=ssl_context,
                server_hostname=server_hostname or host,
                sasl=sasl,
                config=config,
                queue_limit=queue_limit,
                timeout=timeout,
            )
        except (OSError, TimeoutError, ConnectionClosedError) as exc:
            # unreachable, refused at the greeting, or TLS failed: the next target
            failures.append(f"{host}:{port}: {exc or type(exc).__name__}")
    raise ApexClientError(421, f"no relay of {domain} could be reached ({'; '.join(failures)})")


__all__ = ["LOOKUP_SECONDS", "connect_domain", "locate_relays"]
