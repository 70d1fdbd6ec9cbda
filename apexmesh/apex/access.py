"""The APEX access service, sans I/O (RFC 3341).

This module holds everything about access entries that needs no storage and no network:

* the element model of the access service DTD (RFC 3341 section 6): ``query``, ``get``,
  ``set``, ``allow``, ``deny``, ``access`` and the ``reply`` of RFC 3340 section 6.1.2,
  parsed through the one hardened parser (:func:`apexmesh.beep.xml.parse_xml`) and
  serialized by string building with its escape helpers;
* action tokens (RFC 3341 section 3): ``service:operation`` pairs with the reserved
  ``all`` service and the reserved ``all`` / ``none`` operations, checked against a
  registry of the tokens the APEX documents register (RFC 3340 ``core:data``, RFC 3341
  ``access:*``, RFC 3343 ``presence:*``, draft-schwartz-apex-pubsub ``pubsub:*``);
* actor patterns with the limited wildcards and the ``\\*`` / ``\\\\`` escapes of RFC 3341
  section 3, and the selection rule of section 3.1 (domain exactness first, local
  exactness second, shorter wildcard match wins) together with the four default entries
  of section 3, compiled per owner into :class:`OwnerRules` so that a decision costs a
  handful of dictionary probes whatever the number of entries;
* the per-step checks of the query, get and set operations (RFC 3341 sections 4.2-4.4)
  that do not touch storage, each failing with :class:`AccessError` carrying the reply
  code the RFC names.

An entry whose ``actions`` attribute is present but empty grants nothing: this is how
draft-schwartz-apex-pubsub section 7 excludes ``mr.slate@example.com`` from a topic that
``*@*`` may publish to. An ``access`` element *without* ``actions`` in a ``set`` deletes
the entry (RFC 3341 section 4.4 step 8); stored entries therefore always have actions.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import (
    SERVICE_PREFIX,
    Endpoint,
    EndpointError,
    is_token,
    normalize_domain,
)
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import XmlError, escape_attr, escape_text, parse_xml

#: The well-known endpoint of this service (RFC 3341 section 5).
SERVICE_NAME: Final = "access"

#: Largest operation accepted. An access operation is one small element; 16 KiB leaves
#: room for long actor lists while keeping a hostile payload cheap to refuse.
MAX_OPERATION_OCTETS: Final = 16 * 1024

#: Highest transaction identifier (RFC 3340 section 9, UNIQID is 1..2147483647).
MAX_TRANS_ID: Final = 2_147_483_647

#: The reserved service and operation values (RFC 3341 section 3).
ALL: Final = "all"
NONE: Final = "none"

#: The token the relaying mesh consults (RFC 3340 section 4.4.4.1 step 5.3).
CORE_DATA: Final = "core:data"
#: apex-mesh's token for attach authorization (RFC 3340 section 4.5.1, local provisioning).
CORE_ATTACH: Final = "core:attach"
ACCESS_QUERY: Final = "access:query"
ACCESS_GET: Final = "access:get"
ACCESS_SET: Final = "access:set"

#: Operations per service, as registered by each APEX document.
REGISTERED_OPERATIONS: Final[Mapping[str, frozenset[str]]] = {
    # RFC 3340 section 4.4.4.1 step 5.3 ("data"); "attach" is apex-mesh's token for the
    # local provisioning of RFC 3340 section 4.5.1 (which BEEP peer identities may attach
    # as an owner's endpoint): the default entry "local@domain all:all" makes the identity
    # function the default, and an owner may grant core:attach to other identities.
    "core": frozenset({"data", "attach"}),
    # RFC 3341 section 5
    "access": frozenset({"query", "get", "set"}),
    # RFC 3343 section 5
    "presence": frozenset({"publish", "subscribe", "watch"}),
    # draft-schwartz-apex-pubsub-02 section 5.1; "contribute" is apex-mesh's token for a
    # source letting a subscriber publish for it (XEP-0040 5.2, docs/robust.md)
    "pubsub": frozenset(
        {"createtopic", "deletetopic", "listtopics", "subscribe", "cancel", "contribute"}
    ),
}

#: Service names whose ``apex=NAME`` endpoints exist in every domain (RFC 3340 section 8,
#: RFC 3341, RFC 3343, draft-schwartz-apex-pubsub); used for RFC 3341 step 2 ("valid
#: address") when the owner is an APEX service.
REGISTERED_SERVICES: Final = frozenset({"access", "presence", "pubsub", "report"})

_NMTOKEN_PART: Final = re.compile(r"[A-Za-z0-9._\-]+")
_TIMESTAMP: Final = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})"
)


class AccessError(ApexError):
    """An access operation cannot proceed; ``code`` is the reply code to send.

    ``trans_id`` is the transaction identifier of the offending operation when one could
    be read, so the ``reply`` can carry it (RFC 3341 section 4.2: "the transID attribute
    is identical to the value found in the ... element sent by the originator"). An
    :class:`ApexError` like every refusal of the APEX layer: one error model, turned into
    a reply once, where the answer is sent."""


# --------------------------------------------------------------------------- tokens


@dataclass(frozen=True, slots=True)
class TokenRegistry:
    """The action tokens this service accepts in entries and queries."""

    #: Operations per service name; ``all`` and ``none`` are always accepted as well.
    operations: Mapping[str, frozenset[str]] = field(
        default_factory=lambda: dict(REGISTERED_OPERATIONS)
    )

    def with_tokens(self, tokens: Iterable[str]) -> TokenRegistry:
        """A registry that also accepts ``tokens`` (``service:operation`` each)."""
        merged = {name: set(ops) for name, ops in self.operations.items()}
        for token in tokens:
            service, operation = split_token(token)
            merged.setdefault(service, set()).add(operation)
        return TokenRegistry({name: frozenset(ops) for name, ops in merged.items()})

    def validate(self, token: str) -> str:
        """Return ``token`` if registered; 501 for bad syntax, 553 for unknown tokens."""
        service, operation = split_token(token)
        reserved = operation in (ALL, NONE)
        if service == ALL:
            known = reserved or any(operation in ops for ops in self.operations.values())
        else:
            ops = self.operations.get(service)
            known = ops is not None and (reserved or operation in ops)
        if not known:
            raise AccessError(ApexReplyCode.PARAMETER_INVALID, f"unknown action {token!r}")
        return token

    def parse_actions(self, text: str) -> frozenset[str]:
        """Parse an NMTOKENS ``actions`` attribute; the empty string is the empty set."""
        return frozenset(self.validate(token) for token in text.split())


def split_token(token: str) -> tuple[str, str]:
    """Split ``service:operation``; raise :class:`AccessError` 501 if it is not one."""
    service, colon, operation = token.partition(":")
    if not (colon and _NMTOKEN_PART.fullmatch(service) and _NMTOKEN_PART.fullmatch(operation)):
        raise AccessError(
            ApexReplyCode.PARAMETER_SYNTAX_ERROR, f"action {token!r} is not service:operation"
        )
    return service, operation


@dataclass(frozen=True, slots=True)
class ActionSet:
    """The permitted actions of one entry (RFC 3341 section 3)."""

    tokens: frozenset[str]

    @classmethod
    def of(cls, *tokens: str) -> ActionSet:
        return cls(frozenset(tokens))

    def grants(self, token: str) -> bool:
        """True when ``token`` is granted: named, or covered by ``svc:all``, ``all:op`` or
        ``all:all``. ``none`` operations grant nothing."""
        tokens = self.tokens
        if token in tokens or "all:all" in tokens:
            return True
        service, _, operation = token.partition(":")
        return f"{service}:all" in tokens or f"all:{operation}" in tokens

    def grants_all(self, tokens: Iterable[str]) -> bool:
        return all(self.grants(token) for token in tokens)

    def __str__(self) -> str:
        return " ".join(sorted(self.tokens))


ALL_ACTIONS: Final = ActionSet.of("all:all")
NO_ACTIONS: Final = ActionSet.of("all:none")


# --------------------------------------------------------------------------- actors


class LocalKind(enum.IntEnum):
    """How an actor pattern's local part matches (RFC 3341 section 3)."""

    EXACT = 0  #: a literal local part, ``fred`` or ``fred/appl=wb``
    SUBADDRESS = 1  #: ``fred/*``: any subaddress of that address
    SERVICES = 2  #: ``apex=*``: any APEX service
    ANY = 3  #: ``*``: any address other than an APEX service


class DomainKind(enum.IntEnum):
    """How an actor pattern's domain part matches (RFC 3341 section 3)."""

    EXACT = 0  #: a FQDN or domain-literal
    SUFFIX = 1  #: ``*.example.com``: that domain and zero or more subdomains
    ANY = 2  #: ``*``: all administrative domains


#: Index key of a pattern: ((domain kind, domain), (local kind, local)).
PatternKey = tuple[tuple[DomainKind, str], tuple[LocalKind, str]]


def escape_actor_local(local: str) -> str:
    """Escape ``\\`` and ``*`` for an actor attribute (RFC 3341 section 3)."""
    return local.replace("\\", "\\\\").replace("*", "\\*")


@dataclass(frozen=True, slots=True)
class ActorPattern:
    """The ``actor`` of an access entry: an endpoint with limited wildcards."""

    local_kind: LocalKind
    #: The literal local part (EXACT) or address (SUBADDRESS); empty otherwise.
    local: str
    domain_kind: DomainKind
    #: The domain (EXACT) or the suffix after ``*.`` (SUFFIX); empty for ANY.
    domain: str

    @classmethod
    def parse(cls, text: str) -> ActorPattern:
        """Parse an actor attribute of ``get`` or ``access``; raise AccessError 553."""
        local_text, at, domain_text = text.rpartition("@")
        if not at:
            raise AccessError(ApexReplyCode.PARAMETER_INVALID, f"actor {text!r} has no '@'")
        try:
            domain_kind, domain = _parse_domain_pattern(domain_text)
            local_kind, local = _parse_local_pattern(local_text)
        except EndpointError as exc:
            raise AccessError(ApexReplyCode.PARAMETER_INVALID, f"actor {text!r}: {exc}") from None
        return cls(local_kind, local, domain_kind, domain)

    @classmethod
    def exactly(cls, endpoint: Endpoint) -> ActorPattern:
        """The pattern that matches ``endpoint`` and nothing else."""
        return cls(LocalKind.EXACT, endpoint.local, DomainKind.EXACT, endpoint.domain)

    @property
    def key(self) -> PatternKey:
        return ((self.domain_kind, self.domain), (self.local_kind, self.local))

    def rank(self, actor: Endpoint) -> tuple[int, int, int, int] | None:
        """Sort key of this pattern for ``actor`` (lower is better), None if no match.

        RFC 3341 section 3.1: domain exactness is the primary key and local exactness the
        secondary one; among wildcards, the shorter the text the wildcard stands for, the
        higher the priority. Every wildcard must stand for at least one character, except
        that ``*.example.com`` also matches ``example.com`` itself (section 3).
        """
        if self.domain_kind is DomainKind.EXACT:
            if actor.domain != self.domain:
                return None
            domain_rank = (0, 0)
        elif self.domain_kind is DomainKind.SUFFIX:
            if actor.domain == self.domain:
                domain_rank = (1, 0)
            elif actor.domain.endswith("." + self.domain):
                domain_rank = (1, len(actor.domain) - len(self.domain))
            else:
                return None
        else:
            domain_rank = (2, 0)
        local_rank = _local_rank(self.local_kind, self.local, actor)
        if local_rank is None:
            return None
        return (*domain_rank, *local_rank)

    def matches(self, actor: Endpoint) -> bool:
        return self.rank(actor) is not None

    def __str__(self) -> str:
        if self.local_kind is LocalKind.EXACT:
            local = escape_actor_local(self.local)
        elif self.local_kind is LocalKind.SUBADDRESS:
            local = escape_actor_local(self.local) + "/*"
        elif self.local_kind is LocalKind.SERVICES:
            local = SERVICE_PREFIX + "*"
        else:
            local = "*"
        if self.domain_kind is DomainKind.EXACT:
            domain = self.domain
        elif self.domain_kind is DomainKind.SUFFIX:
            domain = "*." + self.domain
        else:
            domain = "*"
        return f"{local}@{domain}"


def _parse_domain_pattern(text: str) -> tuple[DomainKind, str]:
    if text == "*":
        return DomainKind.ANY, ""
    if text.startswith("*."):
        suffix = normalize_domain(text[2:])
        if suffix.startswith("["):
            raise EndpointError("a domain wildcard cannot extend a domain-literal")
        return DomainKind.SUFFIX, suffix
    return DomainKind.EXACT, normalize_domain(text)


def _parse_local_pattern(text: str) -> tuple[LocalKind, str]:
    literal: list[str] = []
    wildcards: list[int] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            escaped = next(chars, "")
            if escaped not in ("\\", "*"):
                raise EndpointError("'\\' must be followed by '\\' or '*'")
            literal.append(escaped)
        elif char == "*":
            wildcards.append(len(literal))
            literal.append("*")
        else:
            literal.append(char)
    value = "".join(literal)
    if not wildcards:
        _check_local(value)
        return LocalKind.EXACT, value
    if len(wildcards) == 1 and wildcards[0] == len(value) - 1:
        stem = value[:-1]
        if stem == "":
            return LocalKind.ANY, ""
        if stem == SERVICE_PREFIX:
            return LocalKind.SERVICES, ""
        if stem.endswith("/") and "/" not in stem[:-1] and is_token(stem[:-1]):
            return LocalKind.SUBADDRESS, stem[:-1]
    raise EndpointError("wildcards are allowed only as '*', 'apex=*' or 'address/*'")


def _check_local(local: str) -> None:
    address, slash, subaddress = local.partition("/")
    if not is_token(address) or (slash and not is_token(subaddress)):
        raise EndpointError(f"invalid local part {local!r}")


def _local_rank(kind: LocalKind, value: str, actor: Endpoint) -> tuple[int, int] | None:
    if kind is LocalKind.EXACT:
        return (0, 0) if actor.local == value else None
    if kind is LocalKind.SUBADDRESS:
        if actor.subaddress is not None and actor.address == value:
            return (1, len(actor.subaddress))
        return None
    local = actor.local
    if kind is LocalKind.SERVICES:
        if local.startswith(SERVICE_PREFIX) and len(local) > len(SERVICE_PREFIX):
            return (1, len(local) - len(SERVICE_PREFIX))
        return None
    if actor.is_service:
        return None
    return (1, len(local))


def _local_candidates(actor: Endpoint) -> list[tuple[LocalKind, str]]:
    """Local pattern keys that can match ``actor``, best first (RFC 3341 section 3.1)."""
    local = actor.local
    wild: list[tuple[int, tuple[LocalKind, str]]] = []
    if actor.subaddress is not None:
        wild.append((len(actor.subaddress), (LocalKind.SUBADDRESS, actor.address)))
    if actor.is_service:
        if len(local) > len(SERVICE_PREFIX):
            wild.append((len(local) - len(SERVICE_PREFIX), (LocalKind.SERVICES, "")))
    else:
        wild.append((len(local), (LocalKind.ANY, "")))
    wild.sort(key=lambda item: item[0])
    return [(LocalKind.EXACT, local), *(key for _, key in wild)]


def _domain_candidates(domain: str) -> list[tuple[DomainKind, str]]:
    """Domain pattern keys that can match ``domain``, best first (RFC 3341 section 3.1)."""
    found: list[tuple[DomainKind, str]] = [(DomainKind.EXACT, domain)]
    if not domain.startswith("["):
        suffix = domain
        while True:
            found.append((DomainKind.SUFFIX, suffix))
            _, dot, rest = suffix.partition(".")
            if not dot:
                break
            suffix = rest
    found.append((DomainKind.ANY, ""))
    return found


# --------------------------------------------------------------------------- entries


def parse_timestamp(text: str) -> datetime:
    """Parse an RFC 3339 ``date-time`` (the TIMESTAMP of RFC 3340 section 9); 501 if bad.

    ``-00:00`` (RFC 3341 section 7) is read as UTC. Fractions beyond microseconds are cut.
    """
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, f"bad timestamp {text!r}")
    date, time, fraction, offset = match.groups()
    micro = f".{(fraction or '0')[:6].ljust(6, '0')}"
    zone = "+00:00" if offset in ("Z", "z", "-00:00") else offset
    try:
        return datetime.fromisoformat(f"{date}T{time}{micro}{zone}")
    except ValueError:
        raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, f"bad timestamp {text!r}") from None


def format_timestamp(when: datetime) -> str:
    """RFC 3339 text in UTC with microseconds, so successive updates stay distinct."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class AccessEntry:
    """One access entry or ``access`` element (RFC 3341 sections 3 and 6)."""

    owner: Endpoint
    actor: ActorPattern
    #: None only in a ``set`` that deletes (and in the notification of a deletion).
    actions: ActionSet | None
    last_update: datetime | None = None

    def to_xml(self) -> str:
        parts = [
            f"<access owner='{escape_attr(str(self.owner))}'",
            f" actor='{escape_attr(str(self.actor))}'",
        ]
        if self.actions is not None:
            parts.append(f" actions='{escape_attr(str(self.actions))}'")
        if self.last_update is not None:
            parts.append(f" lastUpdate='{format_timestamp(self.last_update)}'")
        parts.append(" />")
        return "".join(parts)


def default_entries(owner: Endpoint) -> list[AccessEntry]:
    """The four default entries every owner has (RFC 3341 section 3)."""
    domain = owner.domain
    return [
        AccessEntry(owner, ActorPattern.exactly(owner), ALL_ACTIONS),
        AccessEntry(
            owner, ActorPattern(LocalKind.SERVICES, "", DomainKind.EXACT, domain), ALL_ACTIONS
        ),
        AccessEntry(
            owner, ActorPattern(LocalKind.SERVICES, "", DomainKind.ANY, ""), ActionSet.of(CORE_DATA)
        ),
        AccessEntry(owner, ActorPattern(LocalKind.ANY, "", DomainKind.ANY, ""), NO_ACTIONS),
    ]


@dataclass(frozen=True, slots=True)
class OwnerRules:
    """All entries of one owner, explicit over default, indexed for RFC 3341 section 3.1.

    ``select`` probes the index with the few pattern keys that could match the actor, in
    priority order, so its cost depends on the number of labels in the actor's domain,
    not on the number of entries.
    """

    owner: Endpoint
    #: Explicit entries by pattern key (what get and set address, "identically").
    explicit: Mapping[PatternKey, AccessEntry]
    _index: Mapping[PatternKey, AccessEntry] = field(repr=False)

    @classmethod
    def build(cls, owner: Endpoint, entries: Iterable[AccessEntry]) -> OwnerRules:
        explicit = {entry.actor.key: entry for entry in entries if entry.owner == owner}
        index = {entry.actor.key: entry for entry in default_entries(owner)}
        index.update(explicit)
        return cls(owner, explicit, index)

    def select(self, actor: Endpoint) -> AccessEntry:
        """The entry that applies to ``actor`` (always one: the defaults cover all)."""
        index = self._index
        locals_ = _local_candidates(actor)
        for domain_key in _domain_candidates(actor.domain):
            for local_key in locals_:
                entry = index.get((domain_key, local_key))
                if entry is not None:
                    return entry
        # Unreachable while the defaults are in the index; kept as a closed door.
        return AccessEntry(self.owner, ActorPattern.exactly(actor), NO_ACTIONS)

    def allows(self, actor: Endpoint, tokens: Iterable[str]) -> bool:
        actions = self.select(actor).actions
        return actions is not None and actions.grants_all(tokens)

    def entry_for(self, pattern: ActorPattern) -> AccessEntry | None:
        """The explicit entry whose actor is identical to ``pattern`` (sections 3.2, 4.3)."""
        return self.explicit.get(pattern.key)


# --------------------------------------------------------------------------- elements


@dataclass(frozen=True, slots=True)
class Query:
    """``query`` (RFC 3341 section 4.2): are all ``actions`` allowed for owner/actor?"""

    trans_id: int
    owner: str
    actor: Endpoint
    actions: frozenset[str]

    required_token = ACCESS_QUERY


@dataclass(frozen=True, slots=True)
class Get:
    """``get`` (RFC 3341 section 4.3): retrieve the entry for owner/actor."""

    trans_id: int
    owner: str
    actor: ActorPattern

    required_token = ACCESS_GET


@dataclass(frozen=True, slots=True)
class Set:
    """``set`` (RFC 3341 section 4.4): create, replace or delete an entry.

    ``entry.owner`` may be unchecked text until :func:`check_subject`; it is kept raw in
    ``owner`` for that reason.
    """

    trans_id: int
    owner: str
    actor: ActorPattern
    actions: ActionSet | None
    last_update: datetime | None

    required_token = ACCESS_SET

    def entry(self, owner: Endpoint, last_update: datetime | None) -> AccessEntry:
        return AccessEntry(owner, self.actor, self.actions, last_update)


@dataclass(frozen=True, slots=True)
class List:
    """``list`` (apex-mesh's extension beside RFC 3341 section 4.3): every explicit entry
    of ``owner``, answered with :class:`Entries`. RFC 3341 can only ``get`` the entry of
    an actor one already knows; an owner managing who may use its topic needs to read
    them all back. It reads what ``get`` reads, so it needs ``access:get``."""

    trans_id: int
    owner: str

    required_token = ACCESS_GET


Operation = Query | Get | Set | List


@dataclass(frozen=True, slots=True)
class Allow:
    trans_id: int

    def to_xml(self) -> str:
        return f"<allow transID='{self.trans_id}' />"


@dataclass(frozen=True, slots=True)
class Deny:
    trans_id: int

    def to_xml(self) -> str:
        return f"<deny transID='{self.trans_id}' />"


@dataclass(frozen=True, slots=True)
class Reply:
    """``reply`` (RFC 3340 sections 6.1.2 and 9.1)."""

    code: ApexReplyCode
    #: 0 when the operation carried no readable transaction identifier.
    trans_id: int
    diagnostic: str = ""

    def to_xml(self) -> str:
        head = f"<reply code='{int(self.code)}' transID='{self.trans_id}'"
        if not self.diagnostic:
            return head + " />"
        return f"{head}>{escape_text(self.diagnostic)}</reply>"


@dataclass(frozen=True, slots=True)
class SetNotice:
    """A ``set`` sent by the service: a get answer or a change notification (4.3, 4.4)."""

    trans_id: int
    entry: AccessEntry

    def to_xml(self) -> str:
        return f"<set transID='{self.trans_id}'>{self.entry.to_xml()}</set>"


@dataclass(frozen=True, slots=True)
class Entries:
    """The answer to :class:`List`: ``<entries transID='N'>`` holding an ``access``
    element (with ``lastUpdate``) per explicit entry, in actor order."""

    trans_id: int
    entries: tuple[AccessEntry, ...]

    def to_xml(self) -> str:
        body = "".join(entry.to_xml() for entry in self.entries)
        return f"<entries transID='{self.trans_id}'>{body}</entries>"


_ATTRIBUTES: Final[Mapping[str, frozenset[str]]] = {
    "query": frozenset({"owner", "actor", "actions", "transID"}),
    "get": frozenset({"owner", "actor", "transID"}),
    "set": frozenset({"transID"}),
    "list": frozenset({"owner", "transID"}),
    "access": frozenset({"owner", "actor", "actions", "lastUpdate"}),
}


def parse_operation(content: bytes | str, registry: TokenRegistry) -> Operation:
    """Parse the data-content of a request to ``apex=access``; raise :class:`AccessError`.

    500 for poorly-formed XML, 501 for XML that does not follow the DTD (unknown element,
    missing or unexpected attribute, bad transID, bad token syntax), 553 for an invalid
    actor (query or pattern) and for unknown action tokens.
    """
    try:
        root = parse_xml(content, max_octets=MAX_OPERATION_OCTETS)
    except XmlError as exc:
        raise AccessError(_xml_code(exc), str(exc)) from None
    tag = root.tag
    if not isinstance(tag, str) or tag not in ("query", "get", "set", "list"):
        raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, f"unknown operation {tag!r}")
    trans_id = _trans_id(root.get("transID"))
    attrs = {str(name): str(value) for name, value in root.attrib.items()}
    access: dict[str, str] | None = None
    if tag == "set":
        children = list(root)
        if (root.text or "").strip() or len(children) != 1:
            raise AccessError(
                ApexReplyCode.PARAMETER_SYNTAX_ERROR, "set holds one access", trans_id=trans_id
            )
        child = children[0]
        if child.tag != "access" or (child.tail or "").strip() or len(child) or child.text:
            raise AccessError(
                ApexReplyCode.PARAMETER_SYNTAX_ERROR,
                "set holds one empty access",
                trans_id=trans_id,
            )
        access = {str(name): str(value) for name, value in child.attrib.items()}
    try:
        return _build_operation(tag, trans_id, attrs, access, registry)
    except AccessError as exc:
        exc.trans_id = trans_id
        raise


def _xml_code(exc: XmlError) -> ApexReplyCode:
    if exc.code == ApexReplyCode.GENERAL_SYNTAX_ERROR:
        return ApexReplyCode.GENERAL_SYNTAX_ERROR
    return ApexReplyCode.PARAMETER_SYNTAX_ERROR


def _build_operation(
    tag: str,
    trans_id: int,
    attrs: dict[str, str],
    access: dict[str, str] | None,
    registry: TokenRegistry,
) -> Operation:
    attrs = _attributes(tag, attrs)
    if tag == "list":
        return List(trans_id, attrs["owner"])
    if tag == "query":
        return _parse_query(trans_id, attrs, registry)
    if tag == "get" or access is None:
        return Get(trans_id, attrs["owner"], ActorPattern.parse(attrs["actor"]))
    access = _attributes("access", access)
    actions_text = access.get("actions")
    stamp = access.get("lastUpdate")
    return Set(
        trans_id,
        access["owner"],
        ActorPattern.parse(access["actor"]),
        None if actions_text is None else ActionSet(registry.parse_actions(actions_text)),
        None if stamp is None else parse_timestamp(stamp),
    )


def _trans_id(text: str | None) -> int:
    if text is None or not text.isascii() or not text.isdigit():
        raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "transID missing or invalid")
    value = int(text)
    if not 1 <= value <= MAX_TRANS_ID:
        raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "transID out of range")
    return value


def _attributes(tag: str, attrs: dict[str, str]) -> dict[str, str]:
    allowed = _ATTRIBUTES[tag]
    extra = set(attrs) - allowed
    if extra:
        raise AccessError(
            ApexReplyCode.PARAMETER_SYNTAX_ERROR, f"{tag}: unexpected attributes {sorted(extra)}"
        )
    required = {"owner", "actor"} | ({"actions"} if tag == "query" else set())
    if tag == "list":
        required = {"owner"}
    if tag == "set":
        required = set()
    missing = required - set(attrs)
    if missing:
        raise AccessError(
            ApexReplyCode.PARAMETER_SYNTAX_ERROR, f"{tag}: missing attributes {sorted(missing)}"
        )
    return attrs


def _parse_query(trans_id: int, attrs: dict[str, str], registry: TokenRegistry) -> Query:
    actions = registry.parse_actions(attrs["actions"])
    if not actions:
        raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "query: empty actions")
    try:
        actor = Endpoint.parse(attrs["actor"])
    except EndpointError as exc:
        raise AccessError(exc.code, f"query actor: {exc}") from None
    return Query(trans_id, attrs["owner"], actor, actions)


def parse_entries(content: bytes | str, registry: TokenRegistry) -> list[AccessEntry]:
    """Parse a seed document: ``<access-entries>`` holding ``access`` elements with
    ``owner``, ``actor`` and ``actions`` (see docs/access.md)."""
    try:
        root = parse_xml(content)
    except XmlError as exc:
        raise AccessError(_xml_code(exc), str(exc)) from None
    if root.tag != "access-entries":
        raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "root must be access-entries")
    entries: list[AccessEntry] = []
    for child in root:
        if child.tag != "access":
            raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, f"unexpected {child.tag!r}")
        attrs = _attributes(
            "access", {str(name): str(value) for name, value in child.attrib.items()}
        )
        if "actions" not in attrs or "lastUpdate" in attrs:
            raise AccessError(
                ApexReplyCode.PARAMETER_SYNTAX_ERROR, "seed entries carry actions, no lastUpdate"
            )
        try:
            owner = Endpoint.parse(attrs["owner"])
        except EndpointError as exc:
            raise AccessError(exc.code, f"owner: {exc}") from None
        entries.append(
            AccessEntry(
                owner,
                ActorPattern.parse(attrs["actor"]),
                ActionSet(registry.parse_actions(attrs["actions"])),
            )
        )
    return entries


# --------------------------------------------------------------------------- steps


def is_valid_owner(endpoint: Endpoint) -> bool:
    """An owner refers to a valid address unless it names an unregistered APEX service."""
    if not endpoint.is_service:
        return True
    return endpoint.address[len(SERVICE_PREFIX) :] in REGISTERED_SERVICES


def known_addresses(known: Iterable[Endpoint]) -> Callable[[Endpoint], bool]:
    """RFC 3341 step 2 for a domain that knows its endpoints: an owner is a valid
    address when it is a registered service (or a subaddress of one, a topic), or when
    its endpoint without subaddress is one of ``known`` (or a subaddress of one)."""
    bases = frozenset(endpoint.base for endpoint in known)

    def valid(owner: Endpoint) -> bool:
        if owner.is_service:
            return is_valid_owner(owner)
        return owner.base in bases

    return valid


@dataclass(frozen=True, slots=True)
class Domains:
    """The administrative domains this service answers for (RFC 3341 step 1)."""

    names: frozenset[str]
    #: Whether an address in these domains exists (RFC 3341 step 2). The default accepts
    #: every endpoint except an ``apex=`` service that is not registered; with a
    #: directory of the domain's endpoints (:func:`known_addresses`) other endpoints
    #: must be in it.
    valid: Callable[[Endpoint], bool] = field(default=is_valid_owner)

    @classmethod
    def of(cls, *names: str, known: Iterable[Endpoint] | None = None) -> Domains:
        domains = frozenset(normalize_domain(name) for name in names)
        if known is None:
            return cls(domains)
        return cls(domains, known_addresses(known))


def check_subject(owner: str, domains: Domains) -> Endpoint:
    """Steps 1 and 2 of RFC 3341 sections 4.2-4.4 for the subject (the owner).

    An owner that is not an endpoint at all is a "parameter invalid" (553), as is one
    outside ``domains`` (step 1); one that is syntactically fine but names no valid
    address is "requested action not taken" (550, step 2).
    """
    try:
        subject = Endpoint.parse(owner)
    except EndpointError as exc:
        raise AccessError(exc.code, f"owner: {exc}") from None
    if subject.domain not in domains.names:
        raise AccessError(
            ApexReplyCode.PARAMETER_INVALID, f"{subject} is outside this administrative domain"
        )
    if not domains.valid(subject):
        raise AccessError(ApexReplyCode.ACTION_NOT_TAKEN, f"{subject} is not a valid address")
    return subject


def authorize(rules: OwnerRules, originator: Endpoint, token: str) -> None:
    """Step 3: the subject's entry matching the originator must hold ``token`` (537)."""
    if not rules.allows(originator, (token,)):
        raise AccessError(
            ApexReplyCode.NOT_AUTHORIZED, f"{originator} lacks {token} for {rules.owner}"
        )


def answer_query(query: Query, rules: OwnerRules) -> Allow | Deny:
    """Steps 4-6 of RFC 3341 section 4.2."""
    if rules.allows(query.actor, query.actions):
        return Allow(query.trans_id)
    return Deny(query.trans_id)


def answer_list(operation: List, rules: OwnerRules) -> Entries:
    """Every explicit entry of the owner (the defaults of section 3 are not listed)."""
    entries = sorted(rules.explicit.values(), key=lambda entry: str(entry.actor))
    return Entries(operation.trans_id, tuple(entries))


def answer_get(get: Get, rules: OwnerRules) -> SetNotice:
    """Steps 4-6 of RFC 3341 section 4.3 (551 when no identical entry exists)."""
    entry = rules.entry_for(get.actor)
    if entry is None:
        raise AccessError(
            ApexReplyCode.NO_SUCH_ENTRY, f"no entry for actor {get.actor}", trans_id=get.trans_id
        )
    return SetNotice(get.trans_id, entry)


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to "may ``actor`` do ``token`` to ``owner``?" with the code to send."""

    allowed: bool
    #: 250 when allowed, 537 when denied, else the code of the bad input (501, 553, 550).
    code: ApexReplyCode
    text: str = ""


ALLOWED: Final = Decision(True, ApexReplyCode.SUCCESS)
DENIED: Final = Decision(False, ApexReplyCode.NOT_AUTHORIZED, "action not authorized")


def check_inputs(
    owner: str, actor: str, token: str, domains: Domains, registry: TokenRegistry
) -> tuple[Endpoint, Endpoint, str]:
    """Validate one ``Check(owner, actor, token)``: steps 1-2 for the owner, the actor as a
    plain endpoint (553) and the token (501/553)."""
    subject = check_subject(owner, domains)
    try:
        actor_endpoint = Endpoint.parse(actor)
    except EndpointError as exc:
        raise AccessError(exc.code, f"actor: {exc}") from None
    return subject, actor_endpoint, registry.validate(token)


def decide(rules: OwnerRules, actor: Endpoint, token: str) -> Decision:
    """RFC 3341 section 3.1 selection, then "does the entry contain the token"."""
    return ALLOWED if rules.allows(actor, (token,)) else DENIED


@dataclass(frozen=True, slots=True)
class Outbound:
    """Content the service sends to one recipient, as ``apex=access@DOMAIN``."""

    recipient: str
    content: bytes


@dataclass(frozen=True, slots=True)
class OperationResult:
    """What handling one operation produces (RFC 3341 sections 4.2-4.4)."""

    #: The allow, deny, set or reply element for the originator.
    reply: Outbound
    #: ``set`` notifications to the owner after a successful change (section 4.4).
    notifications: tuple[Outbound, ...]
    #: The outcome's code: 250 for allow, deny, set and successful changes.
    code: ApexReplyCode


def next_timestamp(now: datetime, previous: datetime | None) -> datetime:
    """The service's "current date and time", strictly after ``previous`` (step 9.2)."""
    stamp = now.astimezone(UTC)
    if previous is not None and stamp <= previous:
        stamp = previous.astimezone(UTC) + timedelta(microseconds=1)
    return stamp


__all__ = [
    "ACCESS_GET",
    "ACCESS_QUERY",
    "ACCESS_SET",
    "ALLOWED",
    "ALL_ACTIONS",
    "DENIED",
    "CORE_DATA",
    "NO_ACTIONS",
    "REGISTERED_OPERATIONS",
    "REGISTERED_SERVICES",
    "SERVICE_NAME",
    "AccessEntry",
    "AccessError",
    "ActionSet",
    "ActorPattern",
    "Allow",
    "Decision",
    "Deny",
    "DomainKind",
    "Domains",
    "Entries",
    "Get",
    "List",
    "LocalKind",
    "Operation",
    "OperationResult",
    "Outbound",
    "OwnerRules",
    "Query",
    "Reply",
    "Set",
    "SetNotice",
    "TokenRegistry",
    "answer_get",
    "answer_list",
    "answer_query",
    "authorize",
    "check_inputs",
    "check_subject",
    "decide",
    "default_entries",
    "escape_actor_local",
    "format_timestamp",
    "is_valid_owner",
    "next_timestamp",
    "parse_entries",
    "parse_operation",
    "parse_timestamp",
]
