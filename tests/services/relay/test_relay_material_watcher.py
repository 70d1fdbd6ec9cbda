"""The relay's material watcher (services/relay/reloading.py) on its own: a change is
applied once, a bad change keeps what is loaded and is logged and counted once per
content (not at every look), and the next good change is applied."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from apexmesh.ops.settings import SettingsError
from services.relay.reloading import Material, MaterialWatcher, Watched

pytestmark = pytest.mark.integration


def build_from(path: Path) -> dict[str, str]:
    text = path.read_text(encoding="utf-8")
    if "bad" in text:
        raise SettingsError(f"{path}:1: expected identity:password")
    return {"content": text}


async def test_bad_changes_keep_the_loaded_material_and_are_counted_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "services.relay.reloading")
    path = tmp_path / "passwords"
    path.write_text("fred:1\n", encoding="utf-8")
    applied: list[dict[str, str]] = []
    registry = CollectorRegistry()
    watcher = MaterialWatcher(
        [
            Watched(
                Material.SASL,
                (path,),
                lambda: build_from(path),
                applied.append,
                lambda built: f"{len(built)} entries",
            )
        ],
        registry,
        interval=0,
    )

    def count(result: str) -> float:
        value = registry.get_sample_value(
            "apexmesh_relay_material_reloads_total", {"material": "sasl", "result": result}
        )
        return value or 0.0

    assert await watcher.check() == {"sasl": "unchanged"}
    path.write_text("fred:2\n", encoding="utf-8")
    assert await watcher.check() == {"sasl": "reloaded"}
    assert applied == [{"content": "fred:2\n"}]
    path.write_text("bad line\n", encoding="utf-8")
    for _ in range(3):  # looked at three times: one failure, one ERROR line
        assert (await watcher.check())["sasl"].startswith("failed: ")
    assert applied == [{"content": "fred:2\n"}]
    assert count("failed") == 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "keeping the sasl loaded at" in errors[0].getMessage()
    assert watcher.state()["sasl"]["error"].endswith("expected identity:password")
    path.unlink()  # a missing file is a change too: failed, kept
    assert (await watcher.check())["sasl"].startswith("failed: ")
    path.write_text("fred:3\n", encoding="utf-8")
    assert await watcher.check() == {"sasl": "reloaded"}
    assert applied[-1] == {"content": "fred:3\n"}
    assert (count("ok"), count("failed")) == (2, 2)
    assert watcher.state()["sasl"]["error"] == ""
