"""The README's newcomer path: the run command, the line it prints, then
``apexctl topics ls`` and ``apexctl trace fred@example.com barney@example.com`` work in
a shell with nothing else set up."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.demo_mesh import DemoMesh
from tests.support.polling import scaled

pytestmark = pytest.mark.system


def test_the_printed_line_then_topics_ls_and_trace(demo_mesh: DemoMesh) -> None:
    line = demo_mesh.apexctl_line
    assert line.startswith("export APEXCTL_CONTEXT=")
    script = f"{line}\napexctl topics ls\napexctl trace fred@example.com barney@example.com\n"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(demo_mesh.workdir), "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "demo.news" in done.stdout
    # the trace: fred's pod sent it to barney's pod, which delivered it; report 250
    assert "relay-example.com-1" in done.stdout
    assert "pod relay-example.com-2" in done.stdout
    assert "barney@example.com │ 250" in done.stdout
