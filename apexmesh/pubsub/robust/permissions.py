"""Permission tokens: grant and deny lists per token, deny wins (XEP-0040 section 5.1).

A publication may carry a ``permtoken``: a compact, abstract label for a set of data
("tokenised permissioning allows sets of data to be treated en masse"). The topic owner
keeps, per token, a list of actors who CAN see it (grant) and a list who CANNOT (deny);
an actor is an endpoint, ``*@DOMAIN`` or ``*``. A subscriber gets a copy of a publication
carrying a token only when a grant matches it and no deny does; a publication without a
token goes to every subscriber ("nor should the permtoken be compulsory").

Changes are made in-band and sequenced with the publications (docs/robust.md): the table
is immutable, :meth:`PermissionTable.changed` returns the next one, and the sequencer
applies each change at its position in the topic's stream, so "applied from the next
publication on" holds on every pod.

**Who changes a token** (5.1: "individual publishers can manage access both broadly and
down to very fine granularity"): the topic's creator changes any token; a publisher of
the topic changes the tokens it owns. The first to change a token owns it (its
``owner``, kept while the token lives, also with empty lists), so one publisher never
opens or closes another's data. A publisher may still put any token on its own
publications: that only subjects them to that token's lists.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError

#: A permission token: an NMTOKEN of at most 64 characters (the XEP's are numbers).
_TOKEN: Final = re.compile(r"[A-Za-z0-9._:-]{1,64}")
#: Most actors per list of one token, and tokens per topic: bounds the table every
#: publication consults and every change copies.
MAX_ACTORS_PER_LIST: Final = 10_000
MAX_TOKENS: Final = 10_000


def check_token(text: str, *, trans_id: int | None = None) -> str:
    """A permission token; 553 otherwise."""
    if not _TOKEN.fullmatch(text):
        _dtd.fail(
            f"permtoken {text[:32]!r} is not a token",
            ApexReplyCode.PARAMETER_INVALID,
            trans_id=trans_id,
        )
    return text


@dataclass(frozen=True, slots=True)
class Actor:
    """Who a grant or deny names: one endpoint, every endpoint of a domain, or all."""

    #: The endpoint text, ``*@domain`` or ``*``.
    pattern: str

    def matches(self, endpoint: Endpoint) -> bool:
        if self.pattern == "*":
            return True
        if self.pattern.startswith("*@"):
            return endpoint.domain == self.pattern[2:]
        return str(endpoint) == self.pattern


def actor_of(text: str, *, trans_id: int | None = None) -> Actor:
    """Parse an actor (an endpoint is normalised; 553 when malformed)."""
    if text == "*":
        return Actor("*")
    if text.startswith("*@"):
        return Actor("*@" + _dtd.domain(text[2:], "actor", trans_id=trans_id))
    return Actor(str(_dtd.endpoint(text, "actor", trans_id=trans_id)))


class ChangeKind(enum.Enum):
    GRANT = "grant"
    DENY = "deny"
    #: Remove the actor from both lists of the token.
    REVOKE = "revoke"


@dataclass(frozen=True, slots=True)
class PermissionChange:
    kind: ChangeKind
    token: str
    actor: Actor


@dataclass(frozen=True, slots=True)
class TokenLists:
    grant: frozenset[Actor] = frozenset()
    deny: frozenset[Actor] = frozenset()

    def allows(self, endpoint: Endpoint) -> bool:
        """Deny wins; otherwise a grant must match."""
        if any(actor.matches(endpoint) for actor in self.deny):
            return False
        return any(actor.matches(endpoint) for actor in self.grant)


@dataclass(frozen=True, slots=True)
class PermissionTable:
    """Grant and deny lists per token of one topic, and who owns each token."""

    tokens: Mapping[str, TokenLists] = field(default_factory=dict)
    #: token -> the endpoint that owns it (absent: the topic creator's, from before
    #: publishers managed tokens).
    owners: Mapping[str, str] = field(default_factory=dict)

    def allows(self, endpoint: Endpoint, token: str | None) -> bool:
        """Whether ``endpoint`` may receive a publication carrying ``token``."""
        if token is None:
            return True
        lists = self.tokens.get(token)
        return lists is not None and lists.allows(endpoint)

    def changed(
        self,
        changes: Iterable[PermissionChange],
        *,
        by: str | None = None,
        creator: bool = True,
    ) -> PermissionTable:
        """The table after ``changes`` (in order) made by ``by`` (the topic's creator
        when ``creator``; a token ``by`` makes is its own); 537 for a token that is not
        a publisher's (another's, or the creator's), 554 when a list or the table would
        pass its bound."""
        tokens = dict(self.tokens)
        owners = dict(self.owners)
        for change in changes:
            owner = owners.get(change.token)
            if not creator and owner != by and (owner is not None or change.token in tokens):
                raise ApexError(
                    ApexReplyCode.NOT_AUTHORIZED,
                    f"permtoken {change.token} belongs to another publisher",
                )
            if by is not None and owner is None and change.token not in tokens:
                owners[change.token] = by
            lists = tokens.get(change.token, TokenLists())
            grant, deny = set(lists.grant), set(lists.deny)
            if change.kind is ChangeKind.GRANT:
                grant.add(change.actor)
            elif change.kind is ChangeKind.DENY:
                deny.add(change.actor)
            else:
                grant.discard(change.actor)
                deny.discard(change.actor)
            if max(len(grant), len(deny)) > MAX_ACTORS_PER_LIST:
                _dtd.fail(
                    f"permtoken {change.token}: too many actors", ApexReplyCode.TRANSACTION_FAILED
                )
            if grant or deny:
                tokens[change.token] = TokenLists(frozenset(grant), frozenset(deny))
            else:
                tokens.pop(change.token, None)  # its owner stays: still not another's
        if len(owners.keys() | tokens.keys()) > MAX_TOKENS:
            _dtd.fail("too many permission tokens", ApexReplyCode.TRANSACTION_FAILED)
        return PermissionTable(tokens, owners)

    def names(self) -> list[str]:
        """Every token the table knows (with lists, or only an owner), sorted."""
        return sorted(self.tokens.keys() | self.owners.keys())

    def to_json(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for token in self.names():
            lists = self.tokens.get(token, TokenLists())
            entry: dict[str, Any] = {
                "grant": sorted(a.pattern for a in lists.grant),
                "deny": sorted(a.pattern for a in lists.deny),
            }
            if token in self.owners:
                entry["owner"] = self.owners[token]
            out[token] = entry
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Mapping[str, Any]]) -> PermissionTable:
        tokens = {
            token: TokenLists(
                frozenset(Actor(p) for p in lists.get("grant", ())),
                frozenset(Actor(p) for p in lists.get("deny", ())),
            )
            for token, lists in value.items()
            if lists.get("grant") or lists.get("deny")
        }
        owners = {token: str(lists["owner"]) for token, lists in value.items() if "owner" in lists}
        return cls(tokens, owners)


__all__ = [
    "MAX_ACTORS_PER_LIST",
    "MAX_TOKENS",
    "Actor",
    "ChangeKind",
    "PermissionChange",
    "PermissionTable",
    "TokenLists",
    "actor_of",
    "check_token",
]
