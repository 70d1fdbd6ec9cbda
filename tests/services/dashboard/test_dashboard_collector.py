"""The dashboard's reading of counters from a /metrics text."""

from __future__ import annotations

import pytest

from services.dashboard.collector import RATES, counter_sums

pytestmark = pytest.mark.unit

TEXT = """\
# HELP apexmesh_relay_data_operations_total Data operations received, by result.
# TYPE apexmesh_relay_data_operations_total counter
apexmesh_relay_data_operations_total{result="accepted"} 120.0
apexmesh_relay_data_operations_total{result="refused"} 3.0
# HELP apexmesh_relay_deliveries_total Deliveries dispatched, by route.
# TYPE apexmesh_relay_deliveries_total counter
apexmesh_relay_deliveries_total{route="local"} 100.0
apexmesh_relay_deliveries_total{route="pod"} 20.0
"""


def test_counter_sums_filter_labels() -> None:
    sums = counter_sums(TEXT, RATES["relay"])
    assert sums == {"data_per_s": 120.0, "deliveries_per_s": 120.0}
