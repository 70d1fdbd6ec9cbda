"""Relay-relay links (RFC 3340 sections 2.1, 3.1 and 4.4.2): data for another domain.

For each foreign administrative domain the relay keeps one BEEP session to a relay of
that domain (connection reused), found from static configuration
(``APEXMESH_RELAY_ROUTES``, an operator's explicit choice wins) or else the DNS SRV record
``_apex-mesh._tcp.DOMAIN`` (dnspython). On a new session it tunes TLS when both sides can,
authenticates with SASL when it has credentials for its own domain, and starts one APEX
channel with a ``bind`` for its own domain piggybacked (section 4.2). Failures map to the
RFC's codes: 550 for a domain no relay serves, 421 when the relay cannot be reached, the
bind's own error code (537 ...) when the bind is refused.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import dns.asyncresolver
import dns.exception
import dns.resolver

from apexmesh.aio import BeepConnection, Channel, ChannelStartError, ConnectionClosedError, connect
from apexmesh.aio.tasks import stop_tasks, within
from apexmesh.apex.associations import Binding
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.discovery import (
    MESH_SERVICE,
    REGISTERED_PORTS,
    SrvTarget,
    literal_address,
    order_targets,
    srv_name,
)
from apexmesh.apex.elements import Bind, Error, parse_message
from apexmesh.apex.errors import ApexError
from apexmesh.beep.errors import BeepError
from apexmesh.beep.management import ProfileOffer
from apexmesh.beep.sasl import SaslClientExchange
from apexmesh.beep.tuning import TLS_PROFILE, sasl_profile
from apexmesh.relay.outcomes import Outcome, outcome_from_reply
from services.relay.edge import APEX_PROFILE

_log = logging.getLogger(__name__)

#: Seconds to find, reach and bind to a relay of another domain.
CONNECT_TIMEOUT_SECONDS = 10.0
#: Data in flight (sent, not answered) to one other domain's relay; more wait.
MAX_IN_FLIGHT_PER_DOMAIN = 1024

#: Seconds a DNS answer that a domain has no apex-mesh relay is believed.
NEGATIVE_TTL_SECONDS = 60.0


#: Serves the APEX channel of a new link: (connection, channel, this relay's binding,
#: the peer's domain when the peer is known to serve it, what to call once unbound).
LinkServer = Callable[
    [BeepConnection, Channel, Binding, str | None, Callable[[], None]], Awaitable[None]
]


_random = random.SystemRandom()


def _draw(limit: int) -> int:
    """RFC 2782's uniform choice between 0 and ``limit``."""
    return _random.randint(0, limit)


class MeshError(Exception):
    """No link to a domain; ``outcome`` says what to report."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.text)
        self.outcome = outcome


@dataclass
class _Link:
    conn: BeepConnection
    channel: Channel
    binding: Binding
    #: The peer's domain, when a certificate checked for it or a static route says the
    #: peer serves it (data from its originators is then accepted over the link).
    peer_domain: str | None


class MeshPool:
    """Links to the relays of other domains, one per domain, created on first use."""

    def __init__(
        self,
        *,
        domain: str,
        routes: dict[str, str],
        ssl_context: ssl.SSLContext | None,
        credentials: dict[str, str],
        use_dns: bool = True,
        resolver: dns.asyncresolver.Resolver | None = None,
        max_in_flight: int = MAX_IN_FLIGHT_PER_DOMAIN,
    ) -> None:
        self.domain = domain
        self.routes = routes
        self.ssl_context = ssl_context
        self.credentials = credentials
        self.use_dns = use_dns
        #: The DNS resolver for SRV lookups (None: the system's, from /etc/resolv.conf).
        self.resolver = resolver
        self._links: dict[str, _Link] = {}
        self._connecting: dict[str, asyncio.Task[_Link]] = {}
        self._no_relay: dict[str, float] = {}
        #: Data in flight to each domain (sent, not answered): bounded, others wait.
        self._in_flight: dict[str, asyncio.Semaphore] = {}
        self.max_in_flight = max_in_flight
        #: Reads what the peer relay sends back over each link (set by the relay once its
        #: router exists; RFC 3340 section 2.1). Without it a link is one-way.
        self.serve_link: LinkServer | None = None
        self._serving: set[asyncio.Task[None]] = set()

    def send(
        self, domain: str, payload: bytes, taken: Callable[[], None] | None = None
    ) -> asyncio.Future[Outcome]:
        """Send data (already rewritten for this hop) to a relay of ``domain``; ``taken``
        is called once it is on the link (within :attr:`max_in_flight` per domain): this
        relay answers its sender then, not when the other domain's relay answers, so
        that data crossing a link twice (a forwarding loop) never waits for itself
        behind the link's in-order replies (RFC 3080 2.6.1)."""
        return asyncio.ensure_future(self._send(domain, payload, taken))

    async def _send(self, domain: str, payload: bytes, taken: Callable[[], None] | None) -> Outcome:
        slots = self._in_flight.get(domain)
        if slots is None:
            slots = self._in_flight[domain] = asyncio.Semaphore(self.max_in_flight)
        async with slots:
            return await self._send_on_link(domain, payload, taken)

    async def _send_on_link(
        self, domain: str, payload: bytes, taken: Callable[[], None] | None
    ) -> Outcome:
        try:
            link = await self._link(domain)
            request = link.channel.send(payload)
            if taken is not None:
                taken()
            reply = await request
        except MeshError as exc:
            return exc.outcome
        except (ConnectionClosedError, OSError) as exc:
            self._links.pop(domain, None)
            return Outcome(ApexReplyCode.SERVICE_NOT_AVAILABLE, f"relay of {domain} lost: {exc}")
        return outcome_from_reply(reply)

    async def _link(self, domain: str) -> _Link:
        link = self._links.get(domain)
        if link is not None and link.conn.closed.done():
            self._links.pop(domain, None)
            link = None
        if link is not None:
            return link
        task = self._connecting.get(domain)
        if task is None:
            task = self._connecting[domain] = asyncio.ensure_future(self._open(domain))
            task.add_done_callback(lambda _t: self._connecting.pop(domain, None))
        link = await asyncio.shield(task)
        if domain not in self._links or self._links[domain] is not link:
            self._links[domain] = link
            self._serve(domain, link)
        return link

    def _serve(self, domain: str, link: _Link) -> None:
        """Read the link's channel: the listening relay may send data and terminate."""
        if self.serve_link is None:
            return

        def unbound() -> None:
            _log.info("the relay of %s terminated our binding", domain)
            if self._links.get(domain) is link:
                del self._links[domain]
            closing = asyncio.ensure_future(link.conn.close())
            self._serving.add(closing)
            closing.add_done_callback(self._serving.discard)

        task = asyncio.ensure_future(
            self.serve_link(link.conn, link.channel, link.binding, link.peer_domain, unbound)
        )
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _open(self, domain: str) -> _Link:
        targets, static = await self._locate(domain)
        failures: list[str] = []
        for host, port in targets:  # RFC 2782: the next target when one cannot be reached
            try:
                conn = await connect(
                    host,
                    port,
                    ssl_context=self.ssl_context,
                    server_hostname=domain,
                    timeout=CONNECT_TIMEOUT_SECONDS,
                )
            except (OSError, TimeoutError, BeepError) as exc:
                failures.append(f"{host}:{port}: {exc or type(exc).__name__}")
                continue
            break
        else:
            raise MeshError(
                Outcome(
                    ApexReplyCode.SERVICE_NOT_AVAILABLE,
                    f"cannot reach a relay of {domain}: {'; '.join(failures)}",
                )
            )
        try:
            return await within(self._bind(conn, domain, static=static), CONNECT_TIMEOUT_SECONDS)
        except (MeshError, BeepError, TimeoutError, OSError) as exc:
            await conn.close()
            if isinstance(exc, MeshError):
                raise
            raise MeshError(
                Outcome(ApexReplyCode.SERVICE_NOT_AVAILABLE, f"relay of {domain} failed: {exc}")
            ) from None

    async def _bind(self, conn: BeepConnection, domain: str, *, static: bool) -> _Link:
        offered = conn.greeting.result().profiles
        verified = False
        if self.ssl_context is not None and TLS_PROFILE in offered:
            await conn.start_tls()  # the certificate is checked for ``domain``
            verified = self.ssl_context.verify_mode != ssl.CERT_NONE
            offered = conn.greeting.result().profiles
        password = self.credentials.get(self.domain)
        if password is not None:
            for mechanism in ("SCRAM-SHA-256", "DIGEST-MD5"):
                if sasl_profile(mechanism) in offered:
                    exchange = SaslClientExchange(
                        mechanism, authcid=self.domain, password=password, host=domain
                    )
                    await conn.authenticate(mechanism, exchange)
                    break
        bind = Bind(relay=self.domain, trans_id=1 + secrets.randbelow(2**31 - 2))
        try:
            channel = await conn.open_channel(
                ProfileOffer(uri=APEX_PROFILE, content=bind.to_xml().decode())
            )
        except ChannelStartError as exc:
            raise MeshError(Outcome(exc.code or ApexReplyCode.ACTION_NOT_TAKEN, str(exc))) from None
        try:
            answer = parse_message(channel.reply_content or "")
        except ApexError:
            raise MeshError(
                Outcome(ApexReplyCode.GENERAL_SYNTAX_ERROR, "poorly-formed answer to bind")
            ) from None
        if isinstance(answer, Error):
            raise MeshError(Outcome(int(answer.code), answer.text or "bind refused"))
        _log.info("bound as %s to a relay of %s", self.domain, domain)
        return _Link(
            conn,
            channel,
            Binding(bind.trans_id, self.domain),
            domain if verified or static else None,
        )

    async def _locate(self, domain: str) -> tuple[list[tuple[str, int]], bool]:
        """The relays of ``domain`` in the order to try them, and True when they come
        from an operator's static route."""
        route = self.routes.get(domain)
        if route is not None:
            host, _, port = route.rpartition(":")
            return [(host, int(port))], True
        address = literal_address(domain)
        if address is not None:  # section 3.1: the literal, on the registered port
            return [(address, REGISTERED_PORTS[MESH_SERVICE])], False
        if self.use_dns:
            now = asyncio.get_running_loop().time()
            if self._no_relay.get(domain, 0.0) < now:
                resolver = self.resolver or dns.asyncresolver.get_default_resolver()
                try:
                    answer = await resolver.resolve(
                        srv_name(MESH_SERVICE, domain), "SRV", lifetime=3.0
                    )
                except (dns.exception.DNSException, OSError):
                    self._no_relay[domain] = now + NEGATIVE_TTL_SECONDS
                else:
                    records = [
                        SrvTarget(
                            int(r.priority), int(r.weight), int(r.port), str(r.target).rstrip(".")
                        )
                        for r in answer
                    ]
                    ordered = order_targets(records, _draw)
                    if ordered:
                        return [(r.target, r.port) for r in ordered], False
        raise MeshError(
            Outcome(ApexReplyCode.ACTION_NOT_TAKEN, f"no relay accepts data for {domain}")
        )

    async def close(self) -> None:
        links, self._links = self._links, {}
        for link in links.values():
            await link.conn.close()
        await stop_tasks(list(self._serving))
