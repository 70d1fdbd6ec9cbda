"""A real redis-server on a free loopback port, for tests (never the system one on 6379).

Started with ``--save '' --appendonly yes --dir <tmp>`` so that a restart of the same
instance (same dir, same port) finds its data again, as in production (Redis with AOF).
Readiness is a PING probe with a deadline; if the child dies or the deadline passes, the
error carries the child's output.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Final

from tests.support.polling import scaled
from tests.support.ports import reserved_port

#: Seconds redis-server gets to answer PING after start.
START_TIMEOUT: Final = 15.0


def free_port() -> int:
    """A loopback port for a server that must be named before it binds (redis-server
    cannot report a port of its choice; services of a mesh name each other): reserved
    outside the kernel's ephemeral range, so no ``connect()`` or ``bind(0)`` takes it
    meanwhile (tests/support/ports.py). A server started alone binds port 0 instead."""
    return reserved_port()


def redis_binary() -> str:
    found = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(found).exists():
        raise RuntimeError("redis-server is not installed: run scripts/install")
    return found


def ping(port: int, timeout: float = 0.5, password: str | None = None) -> bool:
    """True when a Redis server on ``port`` answers PING with PONG."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=scaled(timeout)) as sock:
            if password is not None:
                sock.sendall(f"AUTH {password}\r\n".encode())
                if not sock.recv(64).startswith(b"+OK"):
                    return False
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server child process with its own data directory."""

    def __init__(self, data_dir: Path, port: int | None = None, password: str | None = None):
        self.data_dir = data_dir
        self.port = port or free_port()
        #: With a password (``requirepass``), as production runs it: services started
        #: outside development mode refuse an open Redis.
        self.password = password
        self.log_path = data_dir / "redis.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.password is not None:
            return f"redis://:{self.password}@127.0.0.1:{self.port}/0"
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = START_TIMEOUT) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [
                    redis_binary(),
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "yes",
                    "--dir",
                    str(self.data_dir),
                    "--protected-mode",
                    "yes",
                    "--daemonize",
                    "no",
                    "--logfile",
                    "",
                    *(["--requirepass", self.password] if self.password is not None else []),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + scaled(timeout)  # the one time factor (tests/README.md)
        while not ping(self.port, password=self.password):
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited with {self._process.returncode}:\n{self.output()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server not ready in {timeout}s:\n{self.output()}")
            time.sleep(0.02)  # probe interval, not a readiness guess

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no output)"

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=scaled(10))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> None:
        """Stop and start on the same port and directory (data comes back from AOF)."""
        self.stop()
        self.start()
