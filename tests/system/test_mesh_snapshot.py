"""``scripts/run --snapshot``: after the demo the Spark snapshot job runs once per domain
against the mesh's Redis (``python -m spark.snapshot``, as the chart's CronJob) and the
run prints what it wrote: the Parquet snapshot with its manifest and ``_SUCCESS``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.polling import scaled

pytestmark = [pytest.mark.system, pytest.mark.spark, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def test_run_command_snapshot(tmp_path: Path) -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "scripts/demo.py",
            "--exit-after-demo",
            "--snapshot",
            "--workdir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(840),
        check=False,
    )
    out = completed.stdout
    assert completed.returncode == 0, out + completed.stderr
    assert "snapshot | example.com: snapshot file://" in out, out
    manifests = sorted((tmp_path / "snapshots" / "example.com").glob("snapshots/*/manifest.json"))
    assert len(manifests) == 1
    manifest = json.loads(manifests[0].read_text())
    # the demo's topic and the two well-known topics (draft-wyman 6.2, 6.3); the demo's
    # two subscriptions unless their 60 s leases ran out before the job's clock (a Spark
    # start on a loaded machine)
    assert (manifest["topics"], manifest["schema"]) == (3, 1)
    assert manifest["subscriptions"] in (0, 2)
    assert f"3 topics, {manifest['subscriptions']} subscriptions" in out, out
    assert (manifests[0].parent / "_SUCCESS").exists()
    assert f"snapshot |   {manifests[0].relative_to(tmp_path)}" in out
    assert "snapshot | rubble.com: snapshot file://" in out
