"""Context files: written private, read back the same; malformed ones refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from apexmesh.ops.targets import Context, ContextError, Target, read_context, write_context

pytestmark = pytest.mark.unit


def test_round_trip_and_mode(tmp_path: Path) -> None:
    context = Context(
        name="local",
        services=(
            Target("relay-1", "relay", "example.com", "http://127.0.0.1:1", "127.0.0.1:2"),
            Target("access-1", "access", "example.com", "http://127.0.0.1:3"),
        ),
        admin_token="a" * 30,
        read_token="r" * 30,
        credentials_file=str(tmp_path / "creds"),
    )
    path = tmp_path / "apexctl.yaml"
    write_context(path, context)
    assert path.stat().st_mode & 0o777 == 0o600
    again = read_context(path)
    assert again == context
    assert again.token(write=True) == "a" * 30
    assert again.token(write=False) == "r" * 30
    assert [t.name for t in again.of("relay", "example.com")] == ["relay-1"]
    (tmp_path / "creds").write_text("fred@example.com:pw:with:colons\nexample.com:x\n")
    assert again.passwords() == {"fred@example.com": "pw:with:colons"}


def test_malformed(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: apexctl/v1\nservices: [{name: x}]\n")
    with pytest.raises(ContextError, match="malformed"):
        read_context(path)
    path.write_text("apiVersion: other/v9\n")
    with pytest.raises(ContextError, match="apiVersion"):
        read_context(path)
    with pytest.raises(ContextError):
        read_context(tmp_path / "missing.yaml")
