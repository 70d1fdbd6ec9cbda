"""The README's run command as a running mesh for tests: ``scripts/demo.py`` started
in the background (the whole mesh as processes, TLS and SASL on, the demo run, the
dashboard up), stopped with SIGINT at the end.

Its printed ``apexctl:`` line and context file are what an operator gets, so tests
drive apexctl, the admin APIs and the dashboard exactly as a newcomer would.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from apexmesh.ops.targets import Context, read_context

ROOT: Final = Path(__file__).resolve().parents[2]
#: Seconds the mesh and its demo may take to come up on a busy two-core machine.
START_SECONDS: Final = 150.0


@dataclass
class DemoMesh:
    """A running ``scripts/demo.py``."""

    process: subprocess.Popen[str]
    workdir: Path
    output: list[str]
    #: The printed line that points apexctl at the mesh.
    apexctl_line: str
    dashboard_login: str

    @property
    def context_file(self) -> Path:
        return self.workdir / "apexctl.yaml"

    def context(self) -> Context:
        return read_context(self.context_file)

    def env(self) -> dict[str, str]:
        """The environment of a shell that ran the printed line."""
        bin_dir = str(Path(sys.executable).parent)
        return {
            **os.environ,
            "APEXCTL_CONTEXT": str(self.context_file),
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "COLUMNS": "200",
        }

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode


def start_demo(workdir: Path, *, log_level: str = "DEBUG") -> DemoMesh:
    """Start ``scripts/demo.py`` and return once it printed its apexctl line."""
    process = subprocess.Popen(
        [sys.executable, "scripts/demo.py", "--workdir", str(workdir), "--log-level", log_level],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + START_SECONDS
    login = ""
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "| dashboard: " in line:
            login = line.split("| dashboard: ", 1)[1].strip()
        match = re.search(r"\| apexctl: (export .+)$", line)
        if match:
            return DemoMesh(process, workdir, lines, match.group(1).strip(), login)
    process.kill()
    process.wait()
    process.stdout.close()
    raise RuntimeError("scripts/demo.py printed no apexctl line:\n" + "".join(lines))


__all__ = ["DemoMesh", "start_demo"]
