"""The test-only kill-point hook (spark/pause.py): inert without its two variables,
holds only at the named point and arrival, names its variable when the value is wrong,
and lets the run go on once the test removes its file. The hold until a kill is
exercised by tests/spark/test_snapshot_kill.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from spark import pause
from spark.pause import PAUSE_AT_ENV, PAUSE_FILE_ENV
from tests.support.polling import block_until, scaled

pytestmark = pytest.mark.unit


def test_parse_points_and_counts() -> None:
    assert pause.parse("fold") == ("fold", 1)
    assert pause.parse("export.publish:3") == ("export.publish", 3)
    for bad in ("folding", "fold:0", "fold:x", "export.publish:-1"):
        with pytest.raises(ValueError, match=PAUSE_AT_ENV):
            pause.parse(bad)


def test_inert_unless_both_variables_are_set() -> None:
    assert pause.wanted("fold", {}) is None
    assert pause.wanted("fold", {PAUSE_AT_ENV: "fold"}) is None
    assert pause.wanted("fold", {PAUSE_FILE_ENV: "/tmp/x"}) is None  # noqa: S108
    pause.reached("switch")  # no variables in the test's environment: returns


def test_holds_only_at_the_named_arrival(tmp_path: Path) -> None:
    env = {PAUSE_AT_ENV: "export.publish:2", PAUSE_FILE_ENV: f"{tmp_path}/held"}
    pause._reached.clear()
    assert pause.wanted("export.publish", env) is None  # the first arrival
    assert pause.wanted("fold", env) is None  # another point
    held = pause.wanted("export.publish", env)
    assert held is not None
    assert held.name == "held"
    assert pause.wanted("export.publish", env) is None  # the third


def test_a_hold_ends_when_the_file_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = tmp_path / "held"
    monkeypatch.setenv(PAUSE_AT_ENV, "spark")
    monkeypatch.setenv(PAUSE_FILE_ENV, str(held))
    pause._reached.clear()
    seen: list[str] = []

    def release() -> None:
        block_until(held.exists, 30, every=0.01, what=f"the hold file {held}")
        seen.append(json.loads(held.read_text())["point"])
        held.unlink()

    releaser = threading.Thread(target=release)
    releaser.start()
    pause.reached("spark")  # returns once the file is gone
    releaser.join(timeout=scaled(30))
    assert seen == ["spark"]
