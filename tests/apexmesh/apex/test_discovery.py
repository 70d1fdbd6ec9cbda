"""RFC 2782 ordering of SRV records and RFC 3340 section 3.1 domain-literals."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from apexmesh.apex.discovery import (
    REGISTERED_PORTS,
    SrvTarget,
    literal_address,
    order_targets,
    srv_name,
)

pytestmark = pytest.mark.unit


def target(priority: int, weight: int, name: str) -> SrvTarget:
    return SrvTarget(priority=priority, weight=weight, port=10288, target=name)


RECORDS = [
    target(20, 5, "backup"),
    target(10, 1, "small"),
    target(10, 9, "big"),
    target(10, 0, "zero"),
]


def test_lower_priority_first_and_every_target_placed() -> None:
    order = [t.target for t in order_targets(RECORDS, lambda n: 0)]
    assert order[-1] == "backup"
    assert sorted(order[:3]) == ["big", "small", "zero"]


def test_the_draw_picks_by_weight() -> None:
    # draw 0 picks the zero-weight record (RFC 2782 puts it first), then 1 the next, ...
    assert [t.target for t in order_targets(RECORDS, lambda n: 0)][:1] == ["zero"]
    assert [t.target for t in order_targets(RECORDS, lambda n: n)][:1] == ["big"]


def test_weights_spread_the_first_choice() -> None:
    rng = random.Random(7)
    firsts = Counter(
        order_targets(RECORDS, lambda n: rng.randint(0, n))[0].target for _ in range(5000)
    )
    # weight 9 against 1 (and 0): about nine times as often first
    assert 7 < firsts["big"] / firsts["small"] < 11
    assert firsts["zero"] < firsts["small"]


def test_a_dot_target_means_no_service() -> None:
    assert order_targets([target(0, 0, ".")], lambda n: 0) == []


@pytest.mark.parametrize(
    ("domain", "address"),
    [("[10.0.0.1]", "10.0.0.1"), ("[IPv6:::1]", "::1"), ("example.com", None), ("[x]", None)],
)
def test_literals(domain: str, address: str | None) -> None:
    assert literal_address(domain) == address


def test_names_and_ports() -> None:
    assert srv_name("apex-edge", "example.com") == "_apex-edge._tcp.example.com."
    assert REGISTERED_PORTS == {"apex-mesh": 912, "apex-edge": 913}
