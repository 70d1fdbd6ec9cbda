"""Deciding where a recipient goes when the cache lacks a fact (RFC 3340 4.4.4.1 steps
5.1 to 5.3): the pure decision (apexmesh/relay/routing.py) asked again with the access
decision or the location fetched, and a fan-out's cold access decisions fetched ahead in
one ``CheckMany`` (issue #33) rather than one call per recipient in series.

Kept apart from the executor, which carries decisions out, so that each of the two reads
on its own: this one only fetches facts and decides.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from apexmesh.apex.access import CORE_DATA, Decision
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.hops import RecipientPlan
from apexmesh.relay.routing import Route, RouteKind, route
from services.relay.facts import Fetched, RelayFacts

if TYPE_CHECKING:
    from apexmesh.store.access_cache import CachedAccessChecker
    from services.relay.attachments import AttachmentTable
    from services.relay.edge import ApexChannel
    from services.relay.locations import Locations

_log = logging.getLogger(__name__)

#: Unreachable access service: the operation is refused, never let through (421).
ACCESS_UNAVAILABLE: Final = Decision(
    allowed=False,
    code=ApexReplyCode.SERVICE_NOT_AVAILABLE,
    text="access service not available",
)


class Decider:
    """The routing decision with the facts it lacks fetched (see the module docstring)."""

    def __init__(
        self,
        *,
        domains: frozenset[str],
        access: CachedAccessChecker,
        table: AttachmentTable,
        locations: Locations,
    ) -> None:
        self.domains = domains
        self.access = access
        self.locations = locations
        #: What the decision knows from memory (no I/O): the fast path reads it too.
        self.facts = RelayFacts(access, table, locations)

    async def decide(
        self,
        plan: RecipientPlan,
        originator: Endpoint,
        known: Mapping[str, Decision] | None = None,
        routed: Route[ApexChannel] | None = None,
    ) -> Route[ApexChannel]:
        """The decision for one recipient, fetching the facts it lacks (``known``:
        access decisions fetched ahead for this data's recipients, by owner; ``routed``:
        the decision already made from what is cached)."""
        facts: RelayFacts | Fetched = self.facts
        if routed is None:
            routed = route(plan, originator, facts, domains=self.domains)
        if routed.kind is RouteKind.NEED_ACCESS:
            owner = str(routed.endpoint)
            decision = None if known is None else known.get(owner)
            if decision is None:
                decision = await self.decide_access(owner, str(originator), CORE_DATA)
            facts = Fetched(self.facts, decision=decision)
            routed = route(plan, originator, facts, domains=self.domains)
        if routed.kind is RouteKind.NEED_LOCATION:
            located = await self.locations.lookup(routed.endpoint)
            decided = facts.access(str(routed.endpoint), str(originator))
            facts = Fetched(self.facts, decision=decided, located=located)
            routed = route(plan, originator, facts, domains=self.domains)
        return routed

    async def decide_ahead(
        self, plans: Sequence[RecipientPlan], originator: Endpoint, skip: frozenset[Endpoint]
    ) -> dict[str, Decision]:
        """The access decisions ``plans`` still lack, fetched in one call (a fan-out's
        recipients: one ``CheckMany``, not one call per recipient in series); an
        unreachable access service fails each closed (421)."""
        facts = self.facts
        owners = [
            str(routed.endpoint)
            for plan in plans
            if plan.recipient.identity not in skip
            and (routed := route(plan, originator, facts, domains=self.domains)).kind
            is RouteKind.NEED_ACCESS
        ]
        if len(owners) < 2:
            return {}
        actor = str(originator)
        try:
            decisions = await self.access.check_many([(o, actor, CORE_DATA) for o in owners])
        except Exception as exc:  # noqa: BLE001  (gRPC, Redis, timeouts: all fail closed)
            _log.warning("access checks of %d recipients failed: %s", len(owners), exc)
            return dict.fromkeys(owners, ACCESS_UNAVAILABLE)
        return dict(zip(owners, decisions, strict=True))

    async def decide_access(self, owner: str, actor: str, token: str) -> Decision:
        """An access decision, from the cache when possible; an unreachable access
        service fails closed as 421 (the operation is refused, never let through)."""
        decision = self.access.lookup(owner, actor, token)
        if decision is not None:
            return decision
        try:
            return await self.access.check(owner, actor, token)
        except Exception as exc:  # noqa: BLE001  (gRPC, Redis, timeouts: all fail closed)
            _log.warning("access check %s %s %s failed: %s", owner, actor, token, exc)
            return ACCESS_UNAVAILABLE
