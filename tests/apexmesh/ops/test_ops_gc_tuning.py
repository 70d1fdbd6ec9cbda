"""The collector's thresholds per service and the timing of its pauses."""

from __future__ import annotations

import gc

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from apexmesh.ops.gc_tuning import (
    DEFAULT_THRESHOLDS,
    ENV,
    PYTHON_THRESHOLDS,
    GcPauses,
    thresholds,
)
from apexmesh.ops.settings import SettingsError

pytestmark = pytest.mark.unit


def test_each_service_gets_its_measured_thresholds_or_the_setting() -> None:
    assert thresholds("relay", {}) == DEFAULT_THRESHOLDS.get("relay", PYTHON_THRESHOLDS)
    assert thresholds("access", {}) == PYTHON_THRESHOLDS
    assert thresholds("relay", {ENV: "700,10,10"}) == (700, 10, 10)
    assert thresholds("report", {ENV: " 2000, 5, 5 "}) == (2000, 5, 5)


@pytest.mark.parametrize("text", ["700,10", "a,b,c", "0,10,10", "700,0,10", "1,2,3,4"])
def test_bad_thresholds_are_refused_naming_the_variable(text: str) -> None:
    with pytest.raises(SettingsError, match=ENV):
        thresholds("relay", {ENV: text})


def test_pauses_are_timed_per_generation_and_exported() -> None:
    pauses = GcPauses().install()
    try:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    finally:
        pauses.uninstall()
    assert pauses.collections[0] >= 1
    assert pauses.collections[2] >= 2
    assert pauses.seconds[2] > 0
    assert 0 < pauses.longest[2] <= pauses.seconds[2]
    registry = CollectorRegistry()
    registry.register(pauses)
    text = generate_latest(registry).decode()
    assert 'apexmesh_gc_pause_seconds_total{generation="2"}' in text
    assert 'apexmesh_gc_longest_pause_seconds{generation="0"}' in text
    before = pauses.collections[2]
    gc.collect(2)  # uninstalled: no longer counted
    assert pauses.collections[2] == before
