"""The dashboard's settings: the context file, the login token, and the read token the
services are read with (the context's, or else the login token: the chart's context
carries no token)."""

from __future__ import annotations

from pathlib import Path

import pytest

from apexmesh.ops.settings import SettingsError
from apexmesh.ops.targets import Context, Target, write_context
from services.dashboard.settings import DashboardSettings

pytestmark = pytest.mark.unit

TOKEN = "r" * 32
SERVICES = (Target("apex-relay-internal", "relay", "example.com", "http://relay:8401"),)


def settings(tmp_path: Path, context: Context, **env: str) -> DashboardSettings:
    path = tmp_path / "apexctl.yaml"
    write_context(path, context)
    return DashboardSettings.from_env({"APEXMESH_DASHBOARD_CONTEXT": str(path), **env})


def test_a_context_without_tokens_reads_with_the_login_token(tmp_path: Path) -> None:
    loaded = settings(
        tmp_path, Context(name="apex", services=SERVICES), APEXMESH_DASHBOARD_TOKEN=TOKEN
    )
    assert loaded.token == TOKEN
    assert loaded.context.token(write=False) == TOKEN
    assert loaded.context.services == SERVICES


def test_the_contexts_own_read_token_wins(tmp_path: Path) -> None:
    context = Context(name="local", services=SERVICES, read_token="c" * 32)
    loaded = settings(tmp_path, context, APEXMESH_DASHBOARD_TOKEN=TOKEN)
    assert loaded.context.token(write=False) == "c" * 32


def test_a_short_token_is_refused_outside_development(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="at least 22"):
        settings(tmp_path, Context(name="apex", services=SERVICES), APEXMESH_DASHBOARD_TOKEN="x")
