"""A publication's fan-out plan: grouped by relay pod, sorted, chunked, and the same
submission ids on every pod for one delivery."""

from __future__ import annotations

import pytest

from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.fanout import plan_fanout

pytestmark = pytest.mark.unit


def _endpoints(count: int, domain: str = "example.com") -> list[Endpoint]:
    return [Endpoint.parse(f"s{index}@{domain}") for index in range(count)]


def test_plan_fanout_groups_by_relay_pod_sorts_and_chunks() -> None:
    members = _endpoints(2_500)
    placement = dict.fromkeys(members[:2100], "10.0.0.1:7001")
    chunks = plan_fanout(reversed(members), placement, "delivery-1", chunk=1_000)
    assert [(c.address, len(c.recipients)) for c in chunks] == [
        ("", 400),
        ("10.0.0.1:7001", 1_000),
        ("10.0.0.1:7001", 1_000),
        ("10.0.0.1:7001", 100),
    ]
    placed = [r for c in chunks if c.address for r in c.recipients]
    assert placed == sorted(members[:2_100], key=str)
    assert len({c.submission_id for c in chunks}) == 4
    assert all(len(c.submission_id) <= 64 and 0 < c.trans_id < 2**31 for c in chunks)


def test_plan_fanout_ids_are_the_same_on_every_pod_for_one_delivery() -> None:
    """What makes a retried publication (same delivery id, another pubsub pod, the
    recipients in any order) submit the same ids, which the relays relay once."""
    members = _endpoints(1_200)
    placement = dict.fromkeys(members[::2], "10.0.0.1:7001")
    first = plan_fanout(members, placement, "delivery-1")
    again = plan_fanout(list(reversed(members)), dict(placement), "delivery-1")
    assert first == again
    other = plan_fanout(members, placement, "delivery-2")
    assert {c.submission_id for c in first}.isdisjoint(c.submission_id for c in other)


def test_the_hopping_trans_id_depends_on_the_topic_not_the_publication() -> None:
    """Successive publications of a topic differ in their content reference only, so
    that relays and subscribers answer them from an earlier parse (ParseMemo)."""
    members = [Endpoint.parse(f"s{n}@example.com") for n in range(3)]
    first = plan_fanout(members, {}, "delivery-1", topic="news@example.com")
    second = plan_fanout(members, {}, "delivery-2", topic="news@example.com")
    other = plan_fanout(members, {}, "delivery-1", topic="sport@example.com")
    assert [c.trans_id for c in first] == [c.trans_id for c in second]
    assert [c.submission_id for c in first] != [c.submission_id for c in second]
    assert [c.trans_id for c in first] != [c.trans_id for c in other]
