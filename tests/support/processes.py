"""Start a service as a real subprocess and wait until its /readyz says ready.

Services print one JSON line ``{"event": "listening", ...}`` with the ports they bound;
the harness reads it, then polls ``/readyz`` until it answers 200 or the deadline passes.
Failures carry the child's stderr.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

import httpx

from tests.support.polling import scaled

#: Seconds a service gets to print its listening line and become ready.
READY_TIMEOUT: Final = 20.0

ROOT: Final = Path(__file__).resolve().parents[2]


class ServiceProcess:
    """A service started with ``python -m <module>``."""

    def __init__(self, module: str, env: dict[str, str], log_path: Path) -> None:
        self.module = module
        self.env = env
        self.log_path = log_path
        self.info: dict[str, Any] = {}
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def process(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise RuntimeError("not started")
        return self._process

    def start(self, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", self.module],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + scaled(timeout)  # the one time factor (tests/README.md)
        self.info = self._read_listening(deadline)
        self._await_ready(deadline)
        return self.info

    def _read_listening(self, deadline: float) -> dict[str, Any]:
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.fail("no listening line")
            readable, _, _ = select.select([stdout], [], [], remaining)
            if not readable:
                continue
            line = stdout.readline()
            if not line:
                self.fail("exited before listening", exiting=True)
            try:
                info = json.loads(line)
            except ValueError:
                continue
            if isinstance(info, dict) and info.get("event") == "listening":
                return info

    def _await_ready(self, deadline: float) -> None:
        url = f"http://127.0.0.1:{self.info['http_port']}/readyz"
        with httpx.Client(timeout=scaled(1.0)) as client:
            while True:
                if self.process.poll() is not None:
                    self.fail("exited while starting")
                try:
                    if client.get(url).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self.fail("/readyz never answered 200")
                time.sleep(0.02)  # probe interval, not a readiness guess

    def fail(self, why: str, *, exiting: bool = False) -> None:
        if exiting:
            # stdout reached EOF: the child is exiting; wait for its code rather than
            # racing it with poll().
            try:
                code: int | None = self.process.wait(timeout=scaled(10))
            except subprocess.TimeoutExpired:
                code = None
        else:
            code = self.process.poll()
        self.stop()
        raise RuntimeError(f"{self.module}: {why} (exit {code}):\n{self.stderr()}")

    def stderr(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return "(no output)"

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait for a graceful exit; return the exit code (kill if it hangs)."""
        process, self._process = self._process, None
        if process is None:
            return 0
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=scaled(timeout))
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        if process.stdout is not None:
            process.stdout.close()
        return code
