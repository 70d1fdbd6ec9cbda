"""Relay settings: the flow-control bounds an operator sets (services/relay/settings.py)."""

from __future__ import annotations

import pytest

from apexmesh.ops.settings import SettingsError
from services.relay.flow import FlowLimits
from services.relay.settings import RelaySettings

pytestmark = pytest.mark.unit

BASE = {
    "APEXMESH_DEV": "1",
    "APEXMESH_DOMAINS": "example.com",
    "APEXMESH_ACCESS_ADDRESS": "127.0.0.1:7400",
}


def test_flow_defaults() -> None:
    settings = RelaySettings.from_env(BASE)
    assert settings.flow_limits == FlowLimits()
    assert settings.pod_stream_in_flight == 8192
    assert settings.service_calls == 256
    assert settings.domain_in_flight == 1024
    assert settings.retry_services == ("pubsub",)
    assert (settings.receive_window, settings.seq_step) == (1 << 20, 0.25)


def test_receive_window_and_seq_step_from_the_environment() -> None:
    settings = RelaySettings.from_env(
        {**BASE, "APEXMESH_RELAY_RECEIVE_WINDOW": "65536", "APEXMESH_RELAY_SEQ_STEP": "0.5"}
    )
    assert (settings.receive_window, settings.seq_step) == (65536, 0.5)


def test_access_timeout() -> None:
    assert RelaySettings.from_env(BASE).access_timeout == 2.0
    slow = RelaySettings.from_env({**BASE, "APEXMESH_RELAY_ACCESS_TIMEOUT": "4.5"})
    assert slow.access_timeout == 4.5


def test_flow_bounds_from_the_environment() -> None:
    settings = RelaySettings.from_env(
        {
            **BASE,
            "APEXMESH_RELAY_ENDPOINT_IN_FLIGHT": "64",
            "APEXMESH_RELAY_ENDPOINT_OCTETS": "1048576",
            "APEXMESH_RELAY_ENDPOINT_WAITING": "10",
            "APEXMESH_RELAY_SLOW_CONSUMER_SECONDS": "2.5",
            "APEXMESH_RELAY_POD_STREAM_IN_FLIGHT": "100",
            "APEXMESH_RELAY_RETRY_SERVICES": "pubsub,presence",
        }
    )
    assert settings.flow_limits == FlowLimits(
        max_in_flight=64, max_octets=1 << 20, max_waiting=10, slow_after_seconds=2.5
    )
    assert settings.pod_stream_in_flight == 100
    assert settings.retry_services == ("pubsub", "presence")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("APEXMESH_RELAY_ENDPOINT_IN_FLIGHT", "0"),
        ("APEXMESH_RELAY_SLOW_CONSUMER_SECONDS", "0"),
        ("APEXMESH_RELAY_SLOW_CONSUMER_SECONDS", "lots"),
        ("APEXMESH_RELAY_POD_STREAM_IN_FLIGHT", "-1"),
        ("APEXMESH_RELAY_RECEIVE_WINDOW", "1000"),
        ("APEXMESH_RELAY_RECEIVE_WINDOW", str((1 << 20) + 1)),
        ("APEXMESH_RELAY_SEQ_STEP", "0"),
        ("APEXMESH_RELAY_SEQ_STEP", "2"),
        ("APEXMESH_RELAY_ACCESS_TIMEOUT", "0"),
        ("APEXMESH_RELAY_ACCESS_TIMEOUT", "soon"),
    ],
)
def test_nonsense_bounds_are_refused_with_the_variable_named(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        RelaySettings.from_env({**BASE, name: value})


def test_reload_interval() -> None:
    """services/relay/reloading.py: 10 s by default, 0 = SIGHUP or request only."""
    assert RelaySettings.from_env(BASE).reload_seconds == 10.0
    off = RelaySettings.from_env({**BASE, "APEXMESH_RELAY_RELOAD_SECONDS": "0"})
    assert off.reload_seconds == 0
    for bad in ("0.01", "-1", "often", "7200"):
        with pytest.raises(SettingsError, match="APEXMESH_RELAY_RELOAD_SECONDS"):
            RelaySettings.from_env({**BASE, "APEXMESH_RELAY_RELOAD_SECONDS": bad})
