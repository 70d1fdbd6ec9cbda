"""The README's run command as a test: every service its own process, TLS and SASL on,
two domains, the demo's exchanges and reports, and a clean stop of every process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from tests.support.polling import scaled

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]


#: What the demo prints (scripts/demo.py ``demo``) on any Redis: one server here, a
#: cluster in test_mesh_cluster.py.
DEMO_LINES: Final = (
    "barney@example.com | received b'yabba dabba doo' (text/plain) from fred@example.com",
    "wilma@rubble.com | received b'yabba dabba doo' (text/plain) from fred@example.com",
    ": barney@example.com -> 250",
    ": wilma@rubble.com -> 250",
    "dino@example.com -> 550 unknown endpoint identity",
    "barney@example.com | presence: fred@example.com attached",
    "barney@example.com | presence: fred@example.com left",
    "ended the subscription: <reply code='250' transID='1' />",
    # pubsub (issue #7): two subscribers on different relay pods, one publisher.
    "barney@example.com | createtopic demo.news: <reply code='250' transID='1' />",
    "fred@example.com | subscribe demo.news: <reply code='250' transID='1' />",
    "fred@example.com | listtopics: demo.news",
    (
        "fred@example.com | pubsub demo.news: received b'bedrock quarry closes early' "
        "from apex=pubsub/demo.news@example.com"
    ),
    (
        "barney@example.com | pubsub demo.news: received b'bedrock quarry closes early' "
        "from apex=pubsub/demo.news@example.com"
    ),
    # party pack (issue #5): held for dino, delivered on attach, final hop report.
    "dino@example.com | received held b'pick me up at five', noLaterThan now",
    "fred@example.com | final hop report: dino@example.com -> 250",
)


def test_run_command_demo(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "scripts/demo.py", "--exit-after-demo", "--workdir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(180),
        check=False,
    )
    out = completed.stdout
    assert completed.returncode == 0, out + completed.stderr
    for line in DEMO_LINES:
        assert line in out, out
    assert "relay-example.com-2 ready" in out
    assert "presence-example.com ready" in out
    assert "pubsub-example.com-2 ready" in out
    assert "'relay-rubble.com-1': 0" in out
