"""RFC 3342 section 3 (hold4Endpoint) and the section 7 limits, as pure functions."""

from __future__ import annotations

import pytest

from apexmesh.apex.data import Data, Originator, Recipient
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.holding import (
    HOLD_FOR_ENDPOINT,
    TIMING_OPTIONS,
    HoldDecision,
    HoldLimits,
    hold_decision,
    wants_hold,
)
from apexmesh.apex.hops import RecipientPlan, plan_data
from apexmesh.apex.options import STATUS_REQUEST, Option, OptionRegistry
from apexmesh.apex.timing import (
    DATA_TIMING,
    DataTiming,
    RecipientTiming,
    data_timing_option,
    state_of,
)

pytestmark = pytest.mark.unit

REGISTRY = OptionRegistry(internal=frozenset({STATUS_REQUEST, *TIMING_OPTIONS}))
FRED = Endpoint.parse("fred@example.com")
BARNEY = Endpoint.parse("barney@example.com")
T0 = 1_700_000_000_000
HOLD = Option(internal=HOLD_FOR_ENDPOINT, trans_id=1)
NO_LIMITS = HoldLimits(
    max_hold_ms=None,
    max_bytes_per_endpoint=None,
    max_count_per_endpoint=None,
    max_bytes_per_domain=None,
    max_count_per_domain=None,
)


def data_with(*options: Option) -> Data:
    return Data(
        content="cid:1@example.com",
        originator=Originator(identity=FRED),
        recipients=(Recipient(identity=BARNEY),),
        options=options,
    )


def plan_of(data: Data) -> RecipientPlan:
    [plan] = plan_data(data, REGISTRY, is_final=lambda _e: True).recipients
    return plan


def decide(
    *options: Option, limits: HoldLimits = NO_LIMITS, now: int = T0, size: int = 256
) -> HoldDecision:
    data = data_with(*options)
    plan = plan_of(data)
    timing: RecipientTiming = state_of(plan, originator=FRED, received_at=T0)
    return hold_decision(plan, timing, limits, now=now, size=size)


def test_registry_names() -> None:
    assert {DATA_TIMING, HOLD_FOR_ENDPOINT} == TIMING_OPTIONS


def test_without_the_option_nothing_is_held() -> None:
    assert not wants_hold(plan_of(data_with()))
    assert decide() == HoldDecision(hold=False)


def test_held_indefinitely_without_bounds() -> None:
    assert wants_hold(plan_of(data_with(HOLD)))
    assert decide(HOLD) == HoldDecision(hold=True, deadline=None)


def test_deadline_is_the_earlier_of_data_timing_and_operator_maximum() -> None:
    timing = data_timing_option(86, DataTiming(no_later_than=60_000))
    assert decide(HOLD, timing).deadline == T0 + 60_000
    limits = HoldLimits(max_hold_ms=30_000)
    assert decide(HOLD, timing, limits=limits, now=T0 + 5).deadline == T0 + 5 + 30_000
    assert decide(HOLD, limits=limits).deadline == T0 + 30_000
    assert decide(HOLD, timing, limits=HoldLimits(max_hold_ms=10**9)).deadline == T0 + 60_000


def test_deadline_already_reached_is_550() -> None:
    timing = data_timing_option(86, DataTiming(no_later_than=1000))
    decision = decide(HOLD, timing, now=T0 + 1000)
    assert not decision.hold
    assert decision.code == 550


def test_policy_requires_short_lived_data_timing() -> None:
    limits = HoldLimits(require_timing=True, max_no_later_than=60_000)
    assert decide(HOLD, limits=limits).code == 554
    long_lived = data_timing_option(86, DataTiming(no_later_than=60_001))
    assert decide(HOLD, long_lived, limits=limits).code == 554
    short = data_timing_option(86, DataTiming(no_later_than=60_000))
    assert decide(HOLD, short, limits=limits).hold


def test_data_larger_than_a_quota_is_refused_by_policy() -> None:
    limits = HoldLimits(max_bytes_per_endpoint=1000)
    assert decide(HOLD, limits=limits, size=1000).hold
    assert decide(HOLD, limits=limits, size=1001).code == 554


def test_option_with_content_is_501() -> None:
    bad = Option(internal=HOLD_FOR_ENDPOINT, trans_id=9, content=b"<x/>")
    with pytest.raises(ApexError) as caught:
        wants_hold(plan_of(data_with(bad)))
    assert caught.value.code == 501
    assert caught.value.trans_id == 9


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_hold_ms"):
        HoldLimits(max_hold_ms=0)
