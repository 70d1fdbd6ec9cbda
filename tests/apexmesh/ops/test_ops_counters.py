"""Loop counters (apexmesh/ops/counters.py) expose what a Prometheus counter would."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from apexmesh.ops.counters import LoopCounter

pytestmark = pytest.mark.unit


def test_a_loop_counter_scrapes_like_a_counter_without_created() -> None:
    fast, slow = CollectorRegistry(), CollectorRegistry()
    loop = LoopCounter("x_events", "Events.", ["kind"], fast)
    counter = Counter("x_events", "Events.", ["kind"], registry=slow)
    for kind, amount in (("a", 1), ("b", 5), ("a", 2)):
        loop.labels(kind).inc(amount)
        counter.labels(kind).inc(amount)
    expected = [line for line in generate_latest(slow).splitlines() if b"_created" not in line]
    assert generate_latest(fast).splitlines() == expected
    assert fast.get_sample_value("x_events_total", {"kind": "a"}) == 3


def test_children_are_kept_and_never_go_down() -> None:
    loop = LoopCounter("y", "Y.", ["kind"], None)
    assert loop.labels("a") is loop.labels("a")
    with pytest.raises(ValueError, match="only increase"):
        loop.labels("a").inc(-1)
    with pytest.raises(ValueError, match="takes labels"):
        loop.labels("a", "b")
