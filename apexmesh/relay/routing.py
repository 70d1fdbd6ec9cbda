"""Where each recipient of an accepted data goes (RFC 3340 4.4.4.1 steps 5.1 to 5.3), as
a decision.

:func:`route` is a pure function (no I/O, no clock, no event loop) from one recipient's
plan (apexmesh/apex/hops.py), the data's originator and the facts this relay knows, to a
:class:`Route`:

* a recipient whose plan failed (504), whose dataHopping count ran out here, or whose
  ``core:data`` decision is a refusal is ``DONE``, with its outcome;
* another administrative domain: ``DOMAIN`` (step 5.2), with dataHopping applied;
* a well-known endpoint of this domain: ``SERVICE``;
* an endpoint of this domain attached over a channel of this pod: ``LOCAL``; attached to
  another pod: ``POD`` with that pod's address; attached nowhere: ``DONE`` with 550.

When a fact the decision needs is not known here yet (the access decision is not
cached, the endpoint's location is not cached), the route says which one (``NEED_ACCESS``,
``NEED_LOCATION``); the executor (services/relay/executor.py) fetches it and decides
again. The fast path of the relay is this same decision with every fact cached.

:func:`partition` decides which routed recipients share one data element (the grouping
the last paragraph of 4.4.4.1 allows): recipients with no party-pack step, bound for the
same channel of this pod or the same other pod, whose data differ in the recipient only.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeVar

from apexmesh.apex.access import Decision
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.holding import HOLD_FOR_ENDPOINT
from apexmesh.apex.hops import RecipientPlan
from apexmesh.apex.party import HOPS_EXHAUSTED, HOPS_EXHAUSTED_TEXT, next_relay
from apexmesh.apex.report import PendingReport
from apexmesh.apex.timing import DATA_TIMING
from apexmesh.relay.outcomes import UNKNOWN_ENDPOINT, Outcome

#: The channel type of LOCAL routes (services/relay/edge.py ApexChannel; any hashable
#: object to this module).
C = TypeVar("C", bound=Hashable)
C_co = TypeVar("C_co", bound=Hashable, covariant=True)


class Missing(enum.Enum):
    """A fact not known here (yet)."""

    MISSING = "missing"


MISSING: Final = Missing.MISSING


class RouteKind(enum.Enum):
    """What the executor does with a recipient."""

    DONE = "done"
    LOCAL = "local"
    POD = "pod"
    SERVICE = "service"
    DOMAIN = "domain"
    NEED_ACCESS = "need-access"
    NEED_LOCATION = "need-location"


@dataclass(frozen=True, slots=True)
class Route(Generic[C]):
    """The decision for one recipient."""

    kind: RouteKind
    plan: RecipientPlan
    #: LOCAL: the channel the endpoint is attached over.
    channel: C | None = None
    #: POD: the address of the pod holding the endpoint; DOMAIN: the recipient's domain.
    address: str = ""
    #: DONE: the recipient's outcome.
    outcome: Outcome | None = None
    #: DONE by dataHopping with reportErrors: the report owed to the originator.
    report: PendingReport | None = None

    @property
    def endpoint(self) -> Endpoint:
        return self.plan.recipient.identity


class Facts(Protocol[C_co]):
    """What the relay knows when it decides (each answer from memory, never I/O)."""

    def access(self, owner: str, actor: str) -> Decision | None:
        """The cached ``core:data`` decision for ``actor`` on ``owner``, None if unknown."""

    def local_channel(self, endpoint: Endpoint) -> C_co | None:
        """The channel of this pod ``endpoint`` is attached over, None if none."""

    def location(self, endpoint: Endpoint) -> str | Missing | None:
        """The address of the other pod holding ``endpoint``; None when it is attached
        nowhere (or here); MISSING when not known here."""


def route(
    plan: RecipientPlan, originator: Endpoint, facts: Facts[C], *, domains: frozenset[str]
) -> Route[C]:
    """The decision for one recipient (see the module docstring)."""
    endpoint = plan.recipient.identity
    if plan.failure is not None:
        return Route(RouteKind.DONE, plan, outcome=_failed(plan.failure))
    if not plan.final:
        try:
            step = next_relay(plan)
        except ApexError as exc:
            return Route(RouteKind.DONE, plan, outcome=_failed(exc))
        if step.forward is None:
            report = None
            if step.report and step.stopped is not None:
                report = PendingReport(
                    trans_id=step.stopped.trans_id, originator=originator, recipients=(endpoint,)
                )
            return Route(RouteKind.DONE, plan, outcome=_HOPPED_OUT, report=report)
        if step.forward is not plan.forward:
            plan = dataclasses.replace(plan, forward=step.forward)
        return Route(RouteKind.DOMAIN, plan, address=endpoint.domain)
    if endpoint.is_service and endpoint.domain in domains:
        return Route(RouteKind.SERVICE, plan)
    decision = facts.access(str(endpoint), str(originator))
    if decision is None:
        return Route(RouteKind.NEED_ACCESS, plan)
    if not decision.allowed:
        refused = Outcome(int(decision.code), decision.text or "access denied")
        return Route(RouteKind.DONE, plan, outcome=refused)
    channel = facts.local_channel(endpoint)
    if channel is not None:
        return Route(RouteKind.LOCAL, plan, channel=channel)
    location = facts.location(endpoint)
    if location is MISSING:
        return Route(RouteKind.NEED_LOCATION, plan)
    if location is None:
        return Route(RouteKind.DONE, plan, outcome=UNKNOWN_ENDPOINT)
    return Route(RouteKind.POD, plan, address=location)


_HOPPED_OUT: Final = Outcome(HOPS_EXHAUSTED, HOPS_EXHAUSTED_TEXT)


def _failed(exc: ApexError) -> Outcome:
    return Outcome(int(exc.code), str(exc))


#: Options whose steps run around a final delivery (dataTiming deadlines, hold4Endpoint
#: holds): such a recipient's delivery is its own, never part of a group.
PARTY_STEPS: Final = frozenset({DATA_TIMING, HOLD_FOR_ENDPOINT})


def party_steps(plan: RecipientPlan) -> bool:
    """dataTiming or hold4Endpoint applies to the recipient (see :data:`PARTY_STEPS`)."""
    return any(placed.option.internal in PARTY_STEPS for placed in plan.process)


@dataclass(frozen=True, slots=True)
class Partition(Generic[C]):
    """The routed recipients of a data, by how they travel."""

    #: Recipients sharing one data element, per channel of this pod (and template).
    local_groups: tuple[tuple[C, tuple[Route[C], ...]], ...]
    #: Recipients sharing one request, per other pod (and template).
    pod_groups: tuple[tuple[str, tuple[Route[C], ...]], ...]
    #: Everything else, one delivery each (services, other domains are by domain).
    single: tuple[Route[C], ...]
    #: Recipients of other domains, per domain: one data per domain (step 5.2).
    domains: tuple[tuple[str, tuple[Route[C], ...]], ...]


def partition(routes: Sequence[Route[C]], *, group_from: int = 2) -> Partition[C]:
    """Which recipients share a data element (see the module docstring).

    Recipients share one when their data differ in the recipient only: the plans of one
    data share those parts as objects (apexmesh/apex/hops.py), so identities are compared,
    not the parts hashed per recipient. With fewer than ``group_from`` recipients nothing
    is grouped.
    """
    groupable = len(routes) >= group_from
    local: dict[tuple[C, tuple[int, int, int]], list[Route[C]]] = {}
    pods: dict[tuple[str, tuple[int, int, int]], list[Route[C]]] = {}
    domains: dict[str, list[Route[C]]] = {}
    single: list[Route[C]] = []
    for routed in routes:
        kind = routed.kind
        if kind is RouteKind.DOMAIN:
            domains.setdefault(routed.address, []).append(routed)
            continue
        forward = routed.plan.forward
        if (
            not groupable
            or forward is None
            or party_steps(routed.plan)
            or kind not in (RouteKind.LOCAL, RouteKind.POD)
        ):
            single.append(routed)
            continue
        key = (id(forward.originator), id(forward.options), id(forward.data_content))
        if kind is RouteKind.LOCAL:
            assert routed.channel is not None  # noqa: S101  (LOCAL routes name one)
            local.setdefault((routed.channel, key), []).append(routed)
        else:
            pods.setdefault((routed.address, key), []).append(routed)
    return Partition(
        local_groups=tuple((channel, tuple(members)) for (channel, _), members in local.items()),
        pod_groups=tuple((address, tuple(members)) for (address, _), members in pods.items()),
        single=tuple(single),
        domains=tuple((domain, tuple(members)) for domain, members in domains.items()),
    )


__all__ = [
    "MISSING",
    "PARTY_STEPS",
    "Facts",
    "Missing",
    "Partition",
    "Route",
    "RouteKind",
    "partition",
    "party_steps",
    "route",
]
