"""Contributions (XEP-0040 5.2): allowed by the source's access entries, throttled per
contributor with a token bucket."""

from __future__ import annotations

import pytest

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.robust.contribution import ContributionGate, take
from apexmesh.pubsub.robust.settings import ContributionRate

pytestmark = pytest.mark.unit

SOURCE = Endpoint.parse("publisher@fromaplace.net")
FRED = Endpoint.parse("fred@example.com")
WILMA = Endpoint.parse("wilma@example.com")
RATE = ContributionRate(per_second=2, burst=3)


def _check(
    gate: ContributionGate,
    who: Endpoint,
    now: int,
    *,
    allowed: bool = True,
    rate: ContributionRate | None = RATE,
) -> ApexReplyCode | None:
    try:
        gate.check(
            topic="t.a", source=SOURCE, contributor=who, rate=rate, allowed=allowed, now_ms=now
        )
    except ApexError as exc:
        return exc.code
    return None


def test_not_allowed_or_no_contributions_is_537() -> None:
    gate = ContributionGate()
    assert _check(gate, FRED, 0, allowed=False) is ApexReplyCode.NOT_AUTHORIZED
    assert _check(gate, FRED, 0, rate=None) is ApexReplyCode.NOT_AUTHORIZED


def test_burst_then_rate_per_contributor_then_450() -> None:
    gate = ContributionGate()
    assert [_check(gate, FRED, 0) for _ in range(3)] == [None, None, None]
    assert _check(gate, FRED, 0) is ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT
    # Another contributor has its own bucket.
    assert _check(gate, WILMA, 0) is None
    # 2 per second: one more after 500 ms, not before.
    assert _check(gate, FRED, 400) is ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT
    assert _check(gate, FRED, 1000) is None


def test_the_bucket_never_exceeds_its_burst_and_ignores_a_clock_going_back() -> None:
    ok, bucket = take(None, RATE, 0)
    assert ok
    assert bucket.tokens == 2.0
    ok, bucket = take(bucket, RATE, 1_000_000)
    assert bucket.tokens == 2.0
    ok, later = take(bucket, RATE, 10)
    assert ok
    assert later.tokens == 1.0


def test_buckets_are_bounded() -> None:
    gate = ContributionGate(limit=2)
    for n in range(5):
        assert _check(gate, Endpoint.parse(f"c{n}@example.com"), 0) is None
    assert len(gate._buckets) == 2  # the bound is the point
