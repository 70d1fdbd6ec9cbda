"""APEX endpoint identities (RFC 3340 section 2.2).

An endpoint is named ``local@Domain`` where ``local = address ["/" subaddress]`` and both
parts are *tokens*: one or more non-control characters other than ``/`` and ``@``
(``%x20-2E / %x30-3F / %x41-7E / UTF-8``). The domain is a FQDN or a domain-literal
(``[10.0.0.1]``, ``[IPv6:::1]``, the "Domain" of RFC 2821 that RFC 3340 cites).

Two conventions ride on this syntax: local parts starting with ``apex=`` are reserved for
IANA-registered APEX services (``apex=access``), and subaddresses starting with ``appl=``
for registered endpoint applications (``fred/appl=wb``).

Comparison (RFC 3340 section 2.2.1): the local part is compared octet for octet, so
``fred@example.com`` and ``Fred@example.com`` are different endpoints. Domain names are DNS
names and DNS compares them without regard to ASCII case, so :meth:`Endpoint.parse` folds
the domain to lower case once; after that, dataclass equality is exactly the RFC's
comparison and endpoints can be dictionary keys.

Syntax errors raise :class:`EndpointError`, which carries reply code 553 ("parameter
invalid", RFC 3340 section 10) so that any handler can answer with it directly.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import quote, unquote

from apexmesh.apex.codes import ApexReplyCode

#: Longest endpoint text accepted. RFC 3340 sets no limit; 1024 octets is four times the
#: SMTP path limit of RFC 2821 section 4.5.3.1 and keeps hostile identities cheap to reject.
MAX_ENDPOINT_OCTETS: Final = 1024

#: Longest FQDN (RFC 1035 section 2.3.4, 255 octets on the wire = 253 in text form).
MAX_DOMAIN_LENGTH: Final = 253

#: Local parts with this prefix name APEX services (RFC 3340 section 2.2).
SERVICE_PREFIX: Final = "apex="

#: Subaddresses with this prefix name endpoint applications (RFC 3340 section 2.2).
APPLICATION_PREFIX: Final = "appl="

_LABEL: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")

#: The URI scheme of an endpoint used as a URI (RFC 3343's tuple destinations).
URI_SCHEME: Final = "apex"
#: A ``%`` that does not start a two-hex-digit escape.
_BAD_ESCAPE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")
#: Characters an ``apex:`` URI carries as they are (RFC 3986 pchar without ``%``).
_URI_SAFE: Final = "/@=+-._~!$&'()*,;:"


class EndpointError(ValueError):
    """An endpoint (or domain) does not follow RFC 3340 section 2.2.

    ``code`` is the reply code a peer should receive: 553, "parameter invalid".
    """

    code: ApexReplyCode = ApexReplyCode.PARAMETER_INVALID


def is_token(text: str) -> bool:
    """True when ``text`` is an RFC 3340 section 2.2 ``token`` (non-empty, no controls,
    no ``/`` or ``@``)."""
    if not text:
        return False
    for char in text:
        point = ord(char)
        if point < 0x20 or point == 0x7F or char in "/@":
            return False
        if 0x80 <= point < 0xA0:  # C1 controls are control characters in UTF-8 too
            return False
    return True


def normalize_domain(text: str) -> str:
    """Validate a FQDN or domain-literal and return it in canonical (lower-case) form."""
    if not text:
        raise EndpointError("empty domain")
    if text.startswith("["):
        if not text.endswith("]"):
            raise EndpointError(f"unterminated domain-literal {text!r}")
        inner = text[1:-1]
        try:
            if inner[:5].lower() == "ipv6:":
                return "[IPv6:" + ipaddress.IPv6Address(inner[5:]).compressed + "]"
            return "[" + str(ipaddress.IPv4Address(inner)) + "]"
        except ValueError:
            raise EndpointError(f"invalid domain-literal {text!r}") from None
    domain = text.removesuffix(".")
    if len(domain) > MAX_DOMAIN_LENGTH:
        raise EndpointError("domain name too long")
    labels = domain.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        raise EndpointError(f"invalid domain name {text!r}")
    return domain.lower()


@dataclass(frozen=True, slots=True, eq=False)
class Endpoint:
    """An APEX endpoint identity: ``address[/subaddress]@domain``."""

    #: The address part of the local part (``fred``, ``apex=pubsub``).
    address: str
    #: The subaddress, or None (``appl=wb`` in ``fred/appl=wb@example.com``).
    subaddress: str | None
    #: The administrative domain, lower-cased FQDN or domain-literal.
    domain: str
    #: ``str(self)``, made on first use (every data names endpoints as text again).
    _text: str = field(default="", init=False, compare=False, repr=False)
    #: ``hash(self)``, made on first use (endpoints key most tables of a relay).
    _hash: int = field(default=0, init=False, compare=False, repr=False)

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """Parse ``text`` as an RFC 3340 section 2.2 ``entity``; raise :class:`EndpointError`.

        Results are cached: every data element names endpoints, mostly the same few, and
        an :class:`Endpoint` is immutable.
        """
        return _parse_endpoint(text)

    @classmethod
    def _parse(cls, text: str) -> Endpoint:
        if len(text.encode("utf-8", "surrogatepass")) > MAX_ENDPOINT_OCTETS:
            raise EndpointError("endpoint identity too long")
        local, at, domain = text.rpartition("@")
        if not at:
            raise EndpointError(f"endpoint {text!r} has no '@'")
        address, slash, subaddress = local.partition("/")
        if not is_token(address):
            raise EndpointError(f"invalid address part in {text!r}")
        if slash and not is_token(subaddress):
            raise EndpointError(f"invalid subaddress in {text!r}")
        return cls(address, subaddress if slash else None, normalize_domain(domain))

    @classmethod
    def from_uri(cls, uri: str) -> Endpoint:
        """The endpoint an ``apex:`` URI names, with its URL encoding reversed first
        (RFC 3340 section 2.2.1: ``apex:f%72ed@example.com`` is ``fred@example.com``).
        Raises :class:`EndpointError` for another scheme or a malformed escape."""
        scheme, colon, rest = uri.partition(":")
        if not colon or scheme.lower() != URI_SCHEME or not rest:
            raise EndpointError(f"{uri!r} is not an apex: URI")
        if _BAD_ESCAPE.search(rest):
            raise EndpointError(f"malformed %-escape in {uri!r}")
        try:
            text = unquote(rest, errors="strict")
        except UnicodeDecodeError:
            raise EndpointError(f"%-escapes in {uri!r} are not UTF-8") from None
        return _parse_endpoint(text)

    def to_uri(self) -> str:
        """This endpoint as an ``apex:`` URI (URL-encoded where a URI needs it)."""
        return f"{URI_SCHEME}:{quote(str(self), safe=_URI_SAFE)}"

    @property
    def local(self) -> str:
        """The local part, ``address`` or ``address/subaddress``."""
        if self.subaddress is None:
            return self.address
        return f"{self.address}/{self.subaddress}"

    @property
    def is_service(self) -> bool:
        """True for the reserved ``apex=`` local parts (APEX services)."""
        return self.address.startswith(SERVICE_PREFIX)

    @property
    def is_application(self) -> bool:
        """True when the subaddress uses the reserved ``appl=`` convention."""
        return self.subaddress is not None and self.subaddress.startswith(APPLICATION_PREFIX)

    @property
    def base(self) -> Endpoint:
        """The endpoint without its subaddress (``fred@example.com`` for ``fred/x@...``)."""
        if self.subaddress is None:
            return self
        return Endpoint(self.address, None, self.domain)

    def __eq__(self, other: object) -> bool:
        # Parsed endpoints are shared (the parse is cached): identity answers most.
        if self is other:
            return True
        if type(other) is not Endpoint:
            return NotImplemented
        return (
            self.address == other.address
            and self.domain == other.domain
            and self.subaddress == other.subaddress
        )

    def __hash__(self) -> int:
        # The text is canonical (equal endpoints have equal text) and, once made, cached
        # with its hash: endpoints are dictionary keys on every hop of every data.
        known = self._hash
        if not known:
            known = hash(str(self))
            object.__setattr__(self, "_hash", known)
        return known

    def __str__(self) -> str:
        text = self._text
        if not text:
            text = f"{self.local}@{self.domain}"
            object.__setattr__(self, "_text", text)
        return text


@functools.lru_cache(maxsize=65536)
def _parse_endpoint(text: str) -> Endpoint:
    return Endpoint._parse(text)


def well_known(service: str, domain: str) -> Endpoint:
    """The well-known endpoint ``apex=SERVICE@DOMAIN`` (RFC 3340 section 6)."""
    return Endpoint.parse(f"{SERVICE_PREFIX}{service}@{domain}")


__all__ = [
    "APPLICATION_PREFIX",
    "URI_SCHEME",
    "MAX_ENDPOINT_OCTETS",
    "SERVICE_PREFIX",
    "Endpoint",
    "EndpointError",
    "is_token",
    "normalize_domain",
    "well_known",
]
