"""The SASL server side of one listener: which mechanisms it offers, and the exchange of
each SASL start, sans-I/O.

A listener offers the mechanisms its operator chose (:class:`SaslServers`
``mechanisms``, in the greeting's order), never simply every one this package
implements: CRAM-MD5 (RFC 2195) and PLAIN are offered only where configured. Each SASL
start gets a fresh :class:`~apexmesh.beep.sasl.profile.SaslServerExchange` with the
listener's credentials, realm and host names.

DIGEST-MD5's digest-uri is ``beep/<host>`` (RFC 2831 section 2.1.2), ``host`` being
"the DNS host name or IP address for the service requested": what the client dialled.
Beside the names the operator and the certificate give, an exchange therefore accepts
the address its own connection was made to (:meth:`SaslServers.exchange`
``local_host``), which is one of the addresses the listener is bound to, or, for a
wildcard bind, whichever local address the client reached: a client that dialled
``10.0.0.7`` and sends ``beep/10.0.0.7`` is accepted without anyone listing that
address. An IPv6 address is accepted bare and in brackets (``beep/[::1]``, the URI
form); an IPv4-mapped IPv6 address also as its IPv4 address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from apexmesh.beep.sasl.credentials import CredentialStore
from apexmesh.beep.sasl.profile import SUPPORTED_MECHANISMS, SaslServerExchange


def address_names(address: str) -> tuple[str, ...]:
    """The forms a digest-uri may give a local IP address in; () for no IP address."""
    text = address.split("%", 1)[0]  # no zone index
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return ()
    if isinstance(ip, ipaddress.IPv4Address):
        return (str(ip),)
    # as the socket wrote it and canonical (they differ for ::ffff:10.0.0.7 = ::ffff:a00:7)
    spellings = dict.fromkeys((text.lower(), str(ip)))
    names = tuple(spellings) + tuple(f"[{name}]" for name in spellings)
    if ip.ipv4_mapped is not None:
        names += (str(ip.ipv4_mapped),)
    return names


class SaslServers:
    """The mechanisms one listener offers and the exchange of each start."""

    def __init__(
        self,
        credentials: CredentialStore,
        *,
        mechanisms: Sequence[str],
        realm: str,
        hosts: Sequence[str],
        allow_plaintext_without_tls: bool = False,
    ) -> None:
        """Raises ValueError for a mechanism this package does not implement, or for no
        host name (DIGEST-MD5 needs one)."""
        unknown = [name for name in mechanisms if name not in SUPPORTED_MECHANISMS]
        if unknown:
            raise ValueError(f"unsupported SASL mechanisms: {', '.join(unknown)}")
        if not hosts:
            raise ValueError("a SASL listener needs at least one host name")
        self.mechanisms = tuple(dict.fromkeys(mechanisms))
        self._credentials = credentials
        self._realm = realm
        self._hosts = tuple(hosts)
        self._allow_plaintext = allow_plaintext_without_tls

    def exchange(
        self, mechanism: str, tls_active: bool, *, local_host: str | None = None
    ) -> SaslServerExchange | None:
        """A fresh exchange for a start of ``mechanism``; None when it is not offered.
        ``local_host`` is the address the session's connection was made to."""
        if mechanism not in self.mechanisms:
            return None
        hosts = self._hosts
        if local_host:
            hosts = (*hosts, *(name for name in address_names(local_host) if name not in hosts))
        return SaslServerExchange(
            mechanism,
            self._credentials,
            tls_active=tls_active,
            allow_plaintext_without_tls=self._allow_plaintext,
            realm=self._realm,
            host=hosts,
        )

    def __call__(self, mechanism: str, tls_active: bool) -> SaslServerExchange | None:
        """The session config's factory (no connection known: names only)."""
        return self.exchange(mechanism, tls_active)


__all__ = ["SaslServers", "address_names"]
