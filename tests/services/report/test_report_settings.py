"""Report service settings: required domains, relay addresses, wildcard binds refused
unless APEXMESH_DEV=1."""

from __future__ import annotations

import pytest

from apexmesh.ops.settings import SettingsError
from services.report.settings import ReportSettings

pytestmark = pytest.mark.unit

BASE = {"APEXMESH_REPORT_DOMAINS": "Example.com, example.org"}


def test_defaults() -> None:
    settings = ReportSettings.from_env(BASE)
    assert settings.domains == ("example.com", "example.org")
    assert settings.relay_addresses == ()
    assert (settings.grpc_host, settings.grpc_port) == ("127.0.0.1", 7412)
    assert (settings.http_host, settings.http_port) == ("127.0.0.1", 8412)
    assert settings.relay_timeout == 2.0
    assert not settings.dev


def test_relay_addresses_keep_order_without_duplicates() -> None:
    settings = ReportSettings.from_env(
        {**BASE, "APEXMESH_RELAY_ADDRESSES": "relay-0:7410, [::1]:7410,relay-0:7410,10.0.0.2:1"}
    )
    assert settings.relay_addresses == ("relay-0:7410", "[::1]:7410", "10.0.0.2:1")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]", ""])
def test_wildcard_bind_only_in_development(host: str) -> None:
    for name in ("APEXMESH_REPORT_GRPC_HOST", "APEXMESH_REPORT_HTTP_HOST"):
        with pytest.raises(SettingsError, match=name):
            ReportSettings.from_env({**BASE, name: host})
        settings = ReportSettings.from_env({**BASE, name: host, "APEXMESH_DEV": "1"})
        assert host in (settings.grpc_host, settings.http_host)


def test_pod_address_bind_outside_development() -> None:
    settings = ReportSettings.from_env({**BASE, "APEXMESH_REPORT_GRPC_HOST": "10.1.2.3"})
    assert settings.grpc_host == "10.1.2.3"


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"APEXMESH_REPORT_DOMAINS": " , "},
        {"APEXMESH_REPORT_DOMAINS": "bad_domain"},
        {**BASE, "APEXMESH_RELAY_ADDRESSES": "relay-0"},
        {**BASE, "APEXMESH_RELAY_ADDRESSES": "relay-0:"},
        {**BASE, "APEXMESH_RELAY_ADDRESSES": ":7410"},
        {**BASE, "APEXMESH_RELAY_ADDRESSES": "relay-0:0"},
        {**BASE, "APEXMESH_RELAY_ADDRESSES": "relay-0:65536"},
        {**BASE, "APEXMESH_RELAY_ADDRESSES": "relay-0:x"},
        {**BASE, "APEXMESH_RELAY_ADDRESSES": "::1:7410"},
        {**BASE, "APEXMESH_RELAY_ADDRESSES": "[zz]:7410"},
        {**BASE, "APEXMESH_RELAY_ADDRESSES": "a b:7410"},
        {**BASE, "APEXMESH_RELAY_TIMEOUT_SECONDS": "0"},
        {**BASE, "APEXMESH_REPORT_GRPC_PORT": "99999"},
        {**BASE, "APEXMESH_REPORT_HTTP_PORT": "x"},
        {**BASE, "APEXMESH_DEV": "maybe"},
    ],
)
def test_bad_settings_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError):
        ReportSettings.from_env(env)


def test_the_retry_bound_of_owed_reports() -> None:
    assert ReportSettings.from_env(BASE).retry_seconds == 20.0
    assert (
        ReportSettings.from_env({**BASE, "APEXMESH_REPORT_RETRY_SECONDS": "0"}).retry_seconds == 0
    )
    for bad in ("-1", "601", "soon"):
        with pytest.raises(SettingsError, match="APEXMESH_REPORT_RETRY_SECONDS"):
            ReportSettings.from_env({**BASE, "APEXMESH_REPORT_RETRY_SECONDS": bad})
