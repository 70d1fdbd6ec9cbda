"""Settings of the pubsub service: defaults, validation with the variable's name, and
exit code 2 for bad settings."""

from __future__ import annotations

import subprocess
import sys

import pytest

from apexmesh.ops.settings import SettingsError
from services.pubsub.settings import PubsubSettings, Upstream
from tests.support.polling import scaled
from tests.support.processes import ROOT

BASE = {
    "APEXMESH_DEV": "1",
    "APEXMESH_PUBSUB_DOMAINS": "example.com",
    "APEXMESH_ACCESS_ADDRESS": "127.0.0.1:7411",
    "APEXMESH_RELAY_ADDRESSES": "127.0.0.1:7410,127.0.0.1:7420",
}


@pytest.mark.unit
def test_defaults() -> None:
    settings = PubsubSettings.from_env(BASE)
    assert settings.domains == ("example.com",)
    assert settings.relay_addresses == ("127.0.0.1:7410", "127.0.0.1:7420")
    assert settings.lease_ms == 3000
    assert settings.hops == 8
    assert settings.leader_election == "auto"
    assert not settings.grant_data
    assert settings.upstreams == ()
    upstream = PubsubSettings.from_env(
        {
            **BASE,
            "APEXMESH_PUBSUB_UPSTREAMS": "music.jazz@example.com=Other.COM",
            "APEXMESH_PUBSUB_GRANT_DATA": "1",
        }
    )
    assert upstream.upstreams == (Upstream("music.jazz", "example.com", "other.com"),)
    assert upstream.grant_data


@pytest.mark.unit
@pytest.mark.parametrize(
    ("change", "variable"),
    [
        ({"APEXMESH_PUBSUB_DOMAINS": ""}, "APEXMESH_PUBSUB_DOMAINS"),
        ({"APEXMESH_ACCESS_ADDRESS": ""}, "APEXMESH_ACCESS_ADDRESS"),
        ({"APEXMESH_RELAY_ADDRESSES": "nohost"}, "APEXMESH_RELAY_ADDRESSES"),
        ({"APEXMESH_PUBSUB_TICK_SECONDS": "5"}, "APEXMESH_PUBSUB_TICK_SECONDS"),
        ({"APEXMESH_PUBSUB_LEASE_MS": "10"}, "APEXMESH_PUBSUB_LEASE_MS"),
        ({"APEXMESH_PUBSUB_HOPS": "0"}, "APEXMESH_PUBSUB_HOPS"),
        ({"APEXMESH_PUBSUB_UPSTREAMS": "Bad@example.com=x.com"}, "APEXMESH_PUBSUB_UPSTREAMS"),
        ({"APEXMESH_PUBSUB_UPSTREAMS": "a@elsewhere.com=x.com"}, "APEXMESH_PUBSUB_UPSTREAMS"),
        ({"APEXMESH_PUBSUB_UPSTREAMS": "a@example.com=example.com"}, "APEXMESH_PUBSUB_UPSTREAMS"),
        ({"APEXMESH_PUBSUB_LEADER_ELECTION": "zk"}, "APEXMESH_PUBSUB_LEADER_ELECTION"),
        (
            {
                "APEXMESH_DEV": "0",
                "APEXMESH_REDIS_URL": "rediss://:secret@127.0.0.1:6379/0",
                "APEXMESH_PUBSUB_GRPC_HOST": "0.0.0.0",
            },
            "APEXMESH_PUBSUB_GRPC_HOST",
        ),
    ],
)
def test_bad_settings_name_their_variable(change: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        PubsubSettings.from_env({**BASE, **change})


@pytest.mark.integration
def test_bad_settings_exit_2() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "services.pubsub"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "APEXMESH_PUBSUB_DOMAINS": ""},
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert completed.returncode == 2, completed.stderr
    assert "APEXMESH_PUBSUB_DOMAINS" in completed.stderr


@pytest.mark.unit
def test_catalogue_loading() -> None:
    assert PubsubSettings.from_env(BASE).catalogue == "eager"
    lazy = PubsubSettings.from_env({**BASE, "APEXMESH_PUBSUB_CATALOGUE": "lazy"})
    assert lazy.catalogue == "lazy"
    with pytest.raises(SettingsError, match="APEXMESH_PUBSUB_CATALOGUE"):
        PubsubSettings.from_env({**BASE, "APEXMESH_PUBSUB_CATALOGUE": "sometimes"})
