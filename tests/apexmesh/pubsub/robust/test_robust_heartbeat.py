"""The heartbeat schedule (XEP-0040 2.5): idle links only, one entry per link."""

from __future__ import annotations

import pytest

from apexmesh.pubsub.robust.heartbeat import HeartbeatSchedule

pytestmark = pytest.mark.unit


def test_an_idle_link_is_due_after_one_interval_and_is_rearmed() -> None:
    schedule: HeartbeatSchedule[str] = HeartbeatSchedule()
    schedule.touch("a", 0, 100)
    assert schedule.next_deadline() == 100
    assert schedule.due(99) == []
    assert schedule.due(100) == ["a"]
    assert schedule.deadline("a") == 200


def test_deliveries_push_the_heartbeat_back_so_a_busy_link_gets_none() -> None:
    schedule: HeartbeatSchedule[str] = HeartbeatSchedule()
    schedule.touch("busy", 0, 100)
    schedule.touch("idle", 0, 100)
    for now in range(10, 1000, 10):
        schedule.touch("busy", now)
        due = schedule.due(now)
        assert "busy" not in due
    assert schedule.deadline("busy") == 1090
    # One heap entry per link however many deliveries (bounded memory).
    assert len(schedule._heap) <= 2  # the bound is the point


def test_links_with_different_intervals_come_due_in_order_and_removed_links_never() -> None:
    schedule: HeartbeatSchedule[str] = HeartbeatSchedule()
    schedule.touch("slow", 0, 500)
    schedule.touch("fast", 0, 100)
    schedule.touch("gone", 0, 50)
    schedule.remove("gone")
    assert "gone" not in schedule
    assert schedule.next_deadline() == 100
    assert schedule.due(500) == ["fast", "slow"]
    assert len(schedule) == 2
