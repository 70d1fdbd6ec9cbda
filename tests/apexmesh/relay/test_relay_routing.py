"""The routing decision (apexmesh/relay/routing.py), table-driven, without a mesh.

Every branch the integration tests exercise through running relays is here as a row:
the plan of one recipient, the facts the relay knows, and the route it must take.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from apexmesh.apex.access import ALLOWED, DENIED, Decision
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.data import Data, Originator, Recipient
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.hops import RecipientPlan, plan_data
from apexmesh.apex.options import Option, OptionRegistry, TargetHop
from apexmesh.apex.party import DATA_HOPPING, data_hopping_option
from apexmesh.apex.timing import DATA_TIMING, DataTiming, data_timing_option
from apexmesh.relay.outcomes import UNKNOWN_ENDPOINT, Outcome, Reason
from apexmesh.relay.routing import MISSING, Missing, Route, RouteKind, partition, route

pytestmark = pytest.mark.unit

DOMAINS = frozenset({"example.com"})
FRED = Endpoint.parse("fred@example.com")
BARNEY = Endpoint.parse("barney@example.com")
WILMA = Endpoint.parse("wilma@example.com")
BETTY = Endpoint.parse("betty@rubble.com")
PUBSUB = Endpoint.parse("apex=pubsub/news@example.com")
UNAVAILABLE = Decision(False, ApexReplyCode.SERVICE_NOT_AVAILABLE, "access service not available")
REGISTRY = OptionRegistry(internal=frozenset({DATA_HOPPING, DATA_TIMING, "statusRequest"}))


@dataclass
class Known:
    """Facts as a table: what a relay would have in memory."""

    decisions: dict[str, Decision] = field(default_factory=dict)
    channels: dict[Endpoint, str] = field(default_factory=dict)
    locations: dict[Endpoint, str | None] = field(default_factory=dict)

    def access(self, owner: str, actor: str) -> Decision | None:
        del actor
        return self.decisions.get(owner)

    def local_channel(self, endpoint: Endpoint) -> str | None:
        return self.channels.get(endpoint)

    def location(self, endpoint: Endpoint) -> str | Missing | None:
        return self.locations.get(endpoint, MISSING)


def data_to(*recipients: Endpoint, options: tuple[Option, ...] = ()) -> Data:
    return Data(
        content="cid:1@example.com",
        originator=Originator(identity=FRED),
        recipients=tuple(Recipient(identity=r) for r in recipients),
        options=options,
    )


def plans(data: Data) -> tuple[RecipientPlan, ...]:
    return plan_data(data, REGISTRY, is_final=lambda e: e.domain in DOMAINS).recipients


def only_plan(data: Data) -> RecipientPlan:
    (plan,) = plans(data)
    return plan


# recipient, facts, expected kind, expected target (channel or address), expected outcome
CASES = [
    pytest.param(
        BARNEY,
        Known(decisions={str(BARNEY): ALLOWED}, channels={BARNEY: "ch-1"}),
        RouteKind.LOCAL,
        "ch-1",
        None,
        id="attached-here",
    ),
    pytest.param(
        BARNEY,
        Known(decisions={str(BARNEY): ALLOWED}, locations={BARNEY: "10.0.0.2:7411"}),
        RouteKind.POD,
        "10.0.0.2:7411",
        None,
        id="attached-to-another-pod",
    ),
    pytest.param(
        BARNEY,
        Known(decisions={str(BARNEY): ALLOWED}, locations={BARNEY: None}),
        RouteKind.DONE,
        None,
        UNKNOWN_ENDPOINT,
        id="attached-nowhere-550",
    ),
    pytest.param(
        BARNEY,
        Known(decisions={str(BARNEY): ALLOWED}),
        RouteKind.NEED_LOCATION,
        None,
        None,
        id="location-not-known",
    ),
    pytest.param(
        BARNEY,
        Known(channels={BARNEY: "ch-1"}),
        RouteKind.NEED_ACCESS,
        None,
        None,
        id="access-not-known",
    ),
    pytest.param(
        BARNEY,
        Known(decisions={str(BARNEY): DENIED}, channels={BARNEY: "ch-1"}),
        RouteKind.DONE,
        None,
        Outcome(537, "action not authorized"),
        id="core-data-denied-537",
    ),
    pytest.param(
        BARNEY,
        Known(decisions={str(BARNEY): UNAVAILABLE}, channels={BARNEY: "ch-1"}),
        RouteKind.DONE,
        None,
        Outcome(421, "access service not available"),
        id="access-unreachable-fails-closed-421",
    ),
    pytest.param(
        PUBSUB,
        Known(),
        RouteKind.SERVICE,
        None,
        None,
        id="well-known-service-no-access-check",
    ),
    pytest.param(
        BETTY,
        Known(),
        RouteKind.DOMAIN,
        "rubble.com",
        None,
        id="other-domain",
    ),
]


@pytest.mark.parametrize(("recipient", "facts", "kind", "target", "outcome"), CASES)
def test_route_of_one_recipient(
    recipient: Endpoint,
    facts: Known,
    kind: RouteKind,
    target: str | None,
    outcome: Outcome | None,
) -> None:
    routed = route(only_plan(data_to(recipient)), FRED, facts, domains=DOMAINS)
    assert routed.kind is kind
    assert routed.endpoint == recipient
    if kind is RouteKind.LOCAL:
        assert routed.channel == target
    elif kind in (RouteKind.POD, RouteKind.DOMAIN):
        assert routed.address == target
    assert routed.outcome == outcome


def test_a_failed_plan_is_done_with_its_code() -> None:
    unknown = Option(external="urn:x-unknown", must_understand=True, trans_id=7)
    data = Data(
        content="cid:1@example.com",
        originator=Originator(identity=FRED),
        recipients=(Recipient(identity=BARNEY, options=(unknown,)),),
    )
    routed = route(only_plan(data), FRED, Known(), domains=DOMAINS)
    assert routed.kind is RouteKind.DONE
    assert routed.outcome is not None
    assert routed.outcome.code == ApexReplyCode.PARAMETER_NOT_IMPLEMENTED


def test_data_hopping_reduces_the_count_for_the_next_relay() -> None:
    routed = route(
        only_plan(data_to(BETTY, options=(data_hopping_option(9, 3),))),
        FRED,
        Known(),
        domains=DOMAINS,
    )
    assert routed.kind is RouteKind.DOMAIN
    assert routed.plan.forward is not None
    (hopping,) = routed.plan.forward.options
    assert b'noMoreThan="2"' in hopping.content


@pytest.mark.parametrize(("report", "expected_reports"), [(True, 1), (False, 0)])
def test_data_hopping_exhausted_is_done_with_550_and_a_report_when_asked(
    report: bool, expected_reports: int
) -> None:
    option = data_hopping_option(9, 1, report_errors=report)
    routed = route(only_plan(data_to(BETTY, options=(option,))), FRED, Known(), domains=DOMAINS)
    assert routed.kind is RouteKind.DONE
    assert routed.outcome is not None
    assert routed.outcome.code == ApexReplyCode.ACTION_NOT_TAKEN
    assert (routed.report is not None) == bool(expected_reports)
    if routed.report is not None:
        assert routed.report.trans_id == 9
        assert routed.report.recipients == (BETTY,)
        assert routed.report.originator == FRED


def test_malformed_data_hopping_is_done_with_501() -> None:
    broken = Option(
        internal=DATA_HOPPING,
        target_hop=TargetHop.ALL,
        must_understand=True,
        trans_id=4,
        content=b"<dataHopping noMoreThan='many' />",
    )
    routed = route(only_plan(data_to(BETTY, options=(broken,))), FRED, Known(), domains=DOMAINS)
    assert routed.kind is RouteKind.DONE
    assert routed.outcome is not None
    assert routed.outcome.code == ApexReplyCode.PARAMETER_SYNTAX_ERROR


def test_the_same_decision_gives_the_same_route_whatever_facts_are_missing_first() -> None:
    """Deciding again once a missing fact is known reaches the route the fully informed
    decision takes: the fast path is not a copy of the slow one."""
    plan = only_plan(data_to(BARNEY))
    full = Known(decisions={str(BARNEY): ALLOWED}, locations={BARNEY: "10.0.0.2:7411"})
    partial = Known(locations={BARNEY: "10.0.0.2:7411"})
    assert route(plan, FRED, partial, domains=DOMAINS).kind is RouteKind.NEED_ACCESS
    partial.decisions[str(BARNEY)] = ALLOWED
    assert route(plan, FRED, partial, domains=DOMAINS) == route(plan, FRED, full, domains=DOMAINS)


def routes_for(data: Data, facts: Known) -> list[Route[str]]:
    return [route(plan, FRED, facts, domains=DOMAINS) for plan in plans(data)]


def test_partition_groups_by_channel_and_pod_and_domain() -> None:
    facts = Known(
        decisions={str(e): ALLOWED for e in (BARNEY, WILMA, FRED)},
        channels={BARNEY: "ch-1", WILMA: "ch-1"},
        locations={FRED: "10.0.0.2:7411"},
    )
    betty2 = Endpoint.parse("pebbles@rubble.com")
    parts = partition(routes_for(data_to(BARNEY, WILMA, FRED, BETTY, betty2, PUBSUB), facts))
    assert [(c, [r.endpoint for r in m]) for c, m in parts.local_groups] == [
        ("ch-1", [BARNEY, WILMA])
    ]
    assert [(a, [r.endpoint for r in m]) for a, m in parts.pod_groups] == [
        ("10.0.0.2:7411", [FRED])
    ]
    assert [(d, [r.endpoint for r in m]) for d, m in parts.domains] == [
        ("rubble.com", [BETTY, betty2])
    ]
    assert [r.endpoint for r in parts.single] == [PUBSUB]


def test_a_lone_recipient_is_never_grouped() -> None:
    facts = Known(decisions={str(BARNEY): ALLOWED}, channels={BARNEY: "ch-1"})
    parts = partition(routes_for(data_to(BARNEY), facts))
    assert parts.local_groups == ()
    assert [r.endpoint for r in parts.single] == [BARNEY]


def test_recipients_with_party_steps_travel_alone() -> None:
    """dataTiming makes each recipient's delivery its own (its timers)."""
    facts = Known(
        decisions={str(BARNEY): ALLOWED, str(WILMA): ALLOWED},
        channels={BARNEY: "ch-1", WILMA: "ch-1"},
    )
    timing = data_timing_option(5, DataTiming(no_later_than=10_000))
    parts = partition(routes_for(data_to(BARNEY, WILMA, options=(timing,)), facts))
    assert parts.local_groups == ()
    assert [r.endpoint for r in parts.single] == [BARNEY, WILMA]


def test_outcome_reasons_drive_retries_not_text() -> None:
    """The retry policy asks the reason: the same text with another reason is no stale
    location, and a stale location needs no particular text."""
    stale = Outcome(550, "anything at all", Reason.NOT_HERE)
    lookalike = Outcome(550, "endpoint not attached to this relay pod")
    assert stale.stale_location
    assert not lookalike.stale_location
    assert Outcome(421, "", Reason.UNAVAILABLE).stale_location
    assert UNKNOWN_ENDPOINT.not_attached
    assert not Outcome(550, "unknown endpoint identity").not_attached


def test_an_apex_error_in_a_plan_keeps_its_code() -> None:
    plan = only_plan(data_to(BARNEY))
    failed = RecipientPlan(
        recipient=plan.recipient, final=True, failure=ApexError(ApexReplyCode.NOT_AUTHORIZED, "x")
    )
    routed = route(failed, FRED, Known(), domains=DOMAINS)
    assert routed.kind is RouteKind.DONE
    assert routed.outcome == Outcome(537, "x")
