"""Access service settings: refuse unsafe values unless APEXMESH_DEV=1."""

from __future__ import annotations

from pathlib import Path

import pytest

from apexmesh.ops.settings import SettingsError
from services.access.settings import AccessSettings

pytestmark = pytest.mark.unit

BASE = {"APEXMESH_DOMAINS": "example.com"}


def test_defaults_in_development() -> None:
    settings = AccessSettings.from_env({**BASE, "APEXMESH_DEV": "1"})
    assert settings.domains == ("example.com",)
    assert settings.grpc_port == 7411
    assert settings.seed_file is None


@pytest.mark.parametrize(
    "url", ["redis://:secret@redis:6379/0", "rediss://redis:6380/0", "rediss://u:p@r/0"]
)
def test_safe_redis_urls_outside_development(url: str) -> None:
    assert AccessSettings.from_env({**BASE, "APEXMESH_REDIS_URL": url}).redis_url == url


@pytest.mark.parametrize(
    "env",
    [
        {**BASE, "APEXMESH_REDIS_URL": "redis://redis:6379/0"},
        {**BASE, "APEXMESH_DEV": "1", "APEXMESH_REDIS_URL": "http://redis"},
        {"APEXMESH_DEV": "1"},
        {**BASE, "APEXMESH_DEV": "1", "APEXMESH_ACCESS_GRPC_PORT": "99999"},
        {**BASE, "APEXMESH_DEV": "1", "APEXMESH_ACCESS_GRPC_PORT": "x"},
        {**BASE, "APEXMESH_DEV": "maybe"},
        {**BASE, "APEXMESH_DEV": "1", "APEXMESH_ACCESS_OPERATORS": "not-an-endpoint"},
        {**BASE, "APEXMESH_DEV": "1", "APEXMESH_ACCESS_EXTRA_TOKENS": "nocolon"},
        {**BASE, "APEXMESH_DEV": "1", "APEXMESH_DOMAINS": "bad_domain"},
        {**BASE, "APEXMESH_DEV": "1", "APEXMESH_ACCESS_RESYNC_SECONDS": "0"},
    ],
)
def test_refused(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError):
        AccessSettings.from_env(env)


def test_the_endpoint_directory_is_read(tmp_path: Path) -> None:
    listed = tmp_path / "endpoints"
    listed.write_text("# the cast\nfred@example.com\n\nbarney@Example.COM  # domain folded\n")
    settings = AccessSettings.from_env(
        {**BASE, "APEXMESH_DEV": "1", "APEXMESH_ACCESS_ENDPOINTS_FILE": str(listed)}
    )
    assert [str(e) for e in settings.endpoints or ()] == ["fred@example.com", "barney@example.com"]


@pytest.mark.parametrize("content", ["not an endpoint\n", "wilma@rubble.com\n"])
def test_a_bad_endpoint_directory_is_refused(tmp_path: Path, content: str) -> None:
    listed = tmp_path / "endpoints"
    listed.write_text(content)
    with pytest.raises(SettingsError, match="endpoints"):
        AccessSettings.from_env(
            {**BASE, "APEXMESH_DEV": "1", "APEXMESH_ACCESS_ENDPOINTS_FILE": str(listed)}
        )
