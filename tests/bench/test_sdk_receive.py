"""bench/sdk_receive.py runs end to end (a few deliveries), so that it cannot rot: real
feeder processes, a real ApexClient and a real redis-py subscriber over loopback TCP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.polling import scaled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def test_the_sdk_receive_bench_delivers_everything_and_prints_its_figures() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "sdk_receive.py"), "--quick"],
        capture_output=True,
        text=True,
        env=env,
        timeout=scaled(280),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for system in ("redis-py", "apex-mesh fanout", "apex-mesh p2p"):
        assert any(f"{system}: delivered 2,000 / expected 2,000" in line for line in lines), (
            done.stdout
        )
    assert sum("ok replies 2,000, errors 0" in line for line in lines) >= 2
    figures = {entry["name"]: entry for entry in json.loads(lines[-1])}
    assert set(figures) == {
        "redis_py_cpu_per_message",
        "sdk_fanout_cpu_per_delivery",
        "sdk_fanout_deliveries",
        "sdk_p2p_cpu_per_delivery",
        "sdk_p2p_deliveries",
    }
    cpu = figures["sdk_fanout_cpu_per_delivery"]
    assert cpu["unit"] == "us"
    assert cpu["value"] > 0
    assert cpu["baseline"] > 0
    assert "ratio" in cpu
