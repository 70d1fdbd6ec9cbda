"""Who may use a topic: the access statement of a createtopic and its default, sans I/O.

draft-schwartz-apex-pubsub-02 sections 5.1 and 7 leave who may subscribe to and publish
on a topic to the access entries of ``apex=pubsub/TOPIC@DOMAIN``; left there, a topic
is usable by its creator alone until someone writes entries for it, and the basic
program (one endpoint creates and publishes, another subscribes) fails with 537. So a
createtopic states its access, and a createtopic that states none gets a default:

- ``<createtopic topic='t' transID='1'><access actor='*@example.com'
  actions='pubsub:subscribe pubsub:cancel' /></createtopic>``: the ``access`` children
  (RFC 3341's element without ``owner``, the topic being the owner) are written as the
  topic's entries, through the access service as any other entry, by the pubsub
  service; the creator's own entry (:data:`apexmesh.pubsub.changes.OWNER_TOKENS`) comes
  first and is never replaced by the statement. ``<access actor='*@*' actions='' />``
  alone is "the owner only".
- No ``access`` child: :func:`default_access`, the defaults of XEP-0060 (pubsub's
  ``open`` access model, ``publishers`` publish model) kept to the topic's domain:
  anyone of the domain may subscribe (and cancel), only the owner publishes. It is
  written only when the topic has no entry yet (an operator's entries made before the
  topic existed, as a seed file does, are left as they are).

:meth:`TopicAccess.stating` builds a statement from roles (who subscribes, who
publishes) the way applications say it: :class:`Audience` or actor patterns. Within
one statement a narrower pattern keeps the roles of a broader one covering it (RFC 3341
section 3.1 selects only the most specific entry, so ``*@example.com`` subscribing and
``fred@example.com`` publishing would otherwise leave fred unable to subscribe).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from apexmesh.apex.access import (
    AccessError,
    ActorPattern,
    DomainKind,
    LocalKind,
    TokenRegistry,
)
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import SERVICE_PREFIX
from apexmesh.beep.xml import Element, escape_attr

#: What a subscriber needs on the topic (draft-schwartz 4.5, 4.6).
SUBSCRIBE_TOKENS: Final = ("pubsub:subscribe", "pubsub:cancel")
#: What a publisher needs on the topic (4.7.1: ``core:data`` to ``apex=pubsub/TOPIC``).
PUBLISH_TOKENS: Final = ("core:data",)

#: Role names the SDK and apexctl accept beside tokens.
ROLES: Final = {"subscribe": SUBSCRIBE_TOKENS, "publish": PUBLISH_TOKENS}

#: Largest statement taken (entries), so that a createtopic cannot make the service
#: write without bound.
MAX_STATEMENT_ENTRIES: Final = 64

_REGISTRY: Final = TokenRegistry()


class Audience(enum.Enum):
    """Who, in words: the owner alone, anyone of the topic's domain, anyone at all."""

    OWNER = "owner"
    DOMAIN = "domain"
    ANYONE = "anyone"


#: Who holds a role: an :class:`Audience`, one actor pattern, or several.
Who = Audience | str | Iterable[str]


def tokens_of(names: Iterable[str]) -> frozenset[str]:
    """Roles (``subscribe``, ``publish``) and tokens (``core:data``) as tokens."""
    out: set[str] = set()
    for name in names:
        out.update(ROLES.get(name, (name,)))
    return frozenset(_REGISTRY.validate(token) for token in out)


def patterns_of(who: Who, domain: str) -> tuple[ActorPattern, ...]:
    """The actor patterns ``who`` stands for in ``domain`` (none for the owner)."""
    if who is Audience.OWNER:
        return ()
    if who is Audience.DOMAIN:
        return (ActorPattern(LocalKind.ANY, "", DomainKind.EXACT, domain),)
    if who is Audience.ANYONE:
        return (ActorPattern(LocalKind.ANY, "", DomainKind.ANY, ""),)
    texts = [who] if isinstance(who, str) else list(who)
    return tuple(ActorPattern.parse(text) for text in texts)


def covers(broad: ActorPattern, narrow: ActorPattern) -> bool:
    """True when every endpoint ``narrow`` matches is matched by ``broad`` too."""
    return _domain_covers(broad, narrow) and _local_covers(broad, narrow)


def _domain_covers(broad: ActorPattern, narrow: ActorPattern) -> bool:
    if broad.domain_kind is DomainKind.ANY:
        return True
    if narrow.domain_kind is DomainKind.ANY:
        return False
    if broad.domain_kind is DomainKind.EXACT:
        return narrow.domain_kind is DomainKind.EXACT and narrow.domain == broad.domain
    return narrow.domain == broad.domain or narrow.domain.endswith("." + broad.domain)


def _local_covers(broad: ActorPattern, narrow: ActorPattern) -> bool:
    kind, local = narrow.local_kind, narrow.local
    address = local.partition("/")[0]
    service = address.startswith(SERVICE_PREFIX)
    if broad.local_kind is LocalKind.ANY:
        return kind is LocalKind.ANY or (kind is not LocalKind.SERVICES and not service)
    if broad.local_kind is LocalKind.SERVICES:
        return kind is LocalKind.SERVICES or (kind is not LocalKind.ANY and service)
    if broad.local_kind is LocalKind.SUBADDRESS:
        if kind is LocalKind.SUBADDRESS:
            return local == broad.local
        return kind is LocalKind.EXACT and "/" in local and address == broad.local
    return kind is LocalKind.EXACT and local == broad.local


@dataclass(frozen=True, slots=True)
class Grant:
    """One entry of a statement: ``actor`` may do ``actions`` (empty: nothing)."""

    actor: ActorPattern
    actions: frozenset[str]

    def to_xml(self) -> str:
        actions = " ".join(sorted(self.actions))
        return f"<access actor='{escape_attr(str(self.actor))}' actions='{actions}' />"


@dataclass(frozen=True, slots=True)
class TopicAccess:
    """A createtopic's access statement: the entries the topic gets besides its
    creator's. Empty grants nothing (written as ``*@*`` denied everything)."""

    grants: tuple[Grant, ...]

    @classmethod
    def stating(
        cls, domain: str, *, subscribers: Who = Audience.DOMAIN, publishers: Who = Audience.OWNER
    ) -> TopicAccess:
        """The statement "``subscribers`` may subscribe, ``publishers`` may publish" for
        a topic of ``domain``; a narrower pattern keeps the roles of broader ones."""
        roles = {
            SUBSCRIBE_TOKENS: patterns_of(subscribers, domain),
            PUBLISH_TOKENS: patterns_of(publishers, domain),
        }
        every = list(dict.fromkeys(p for patterns in roles.values() for p in patterns))
        grants = []
        for pattern in every:
            actions: set[str] = set()
            for tokens, patterns in roles.items():
                if any(covers(broad, pattern) for broad in patterns):
                    actions.update(tokens)
            grants.append(Grant(pattern, frozenset(actions)))
        return cls(tuple(grants))

    @property
    def entries(self) -> tuple[Grant, ...]:
        """What is written: the grants, or for "the owner only" ``*@*`` denied."""
        if self.grants:
            return self.grants
        return (Grant(ActorPattern(LocalKind.ANY, "", DomainKind.ANY, ""), frozenset()),)

    def to_xml(self) -> bytes:
        """The ``access`` children of a createtopic."""
        return "".join(grant.to_xml() for grant in self.entries).encode()

    def to_json(self) -> str:
        """The journal's form (``[[actor, "token token"], ...]``)."""
        return json.dumps([[str(g.actor), " ".join(sorted(g.actions))] for g in self.entries])

    @classmethod
    def from_json(cls, text: str) -> TopicAccess:
        return cls(
            tuple(
                Grant(ActorPattern.parse(actor), frozenset(actions.split()))
                for actor, actions in json.loads(text)
            )
        )


def default_access(domain: str) -> TopicAccess:
    """The statement of a createtopic that states none (see the module docstring)."""
    return TopicAccess.stating(domain, subscribers=Audience.DOMAIN, publishers=Audience.OWNER)


def access_from(children: Iterable[Element]) -> TopicAccess | None:
    """The ``access`` children of a createtopic (None when it has none). An actor that
    is no pattern or an unknown token is 553, ``owner`` or ``lastUpdate`` (the topic is
    the owner, the service stamps) or more than :data:`MAX_STATEMENT_ENTRIES` 501
    (:class:`apexmesh.apex.access.AccessError`, an ApexError)."""
    grants: list[Grant] = []
    for child in children:
        extra = set(child.attrib) - {"actor", "actions"}
        if extra or "actor" not in child.attrib or "actions" not in child.attrib:
            raise AccessError(
                ApexReplyCode.PARAMETER_SYNTAX_ERROR,
                "createtopic: access takes actor and actions only",
            )
        actor = ActorPattern.parse(str(child.get("actor")))
        grants.append(Grant(actor, _REGISTRY.parse_actions(str(child.get("actions")))))
    if not grants:
        return None
    if len(grants) > MAX_STATEMENT_ENTRIES:
        raise AccessError(
            ApexReplyCode.PARAMETER_SYNTAX_ERROR,
            f"createtopic: more than {MAX_STATEMENT_ENTRIES} access entries",
        )
    every_denied = all(not g.actions for g in grants) and len(grants) == 1
    if every_denied and grants[0].actor.key == TopicAccess(()).entries[0].actor.key:
        return TopicAccess(())
    return TopicAccess(tuple(grants))


__all__ = [
    "MAX_STATEMENT_ENTRIES",
    "PUBLISH_TOKENS",
    "ROLES",
    "SUBSCRIBE_TOKENS",
    "Audience",
    "Grant",
    "TopicAccess",
    "Who",
    "access_from",
    "covers",
    "default_access",
    "patterns_of",
    "tokens_of",
]
