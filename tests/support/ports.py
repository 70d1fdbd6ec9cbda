"""Ports for the services a test must name before they start (no race with the kernel).

A server the harness starts alone binds port 0 and reports the port it got (gRPC's
``add_insecure_port`` returns it, asyncio servers expose their sockets, a service process
prints it in its ``listening`` line). Some ports must be known *before* their server
binds: the services of a mesh name each other (relays and reports, relays and pubsub
pods, two domains' mesh ports), and redis-server cannot report a port it chose. The
classic trick, bind port 0, close, hand the number on, races: between the close and the
service's bind, the kernel may give that port to any ``connect()`` or ``bind(0)`` on the
machine (that was the "Failed to bind to address" of a loaded run, issue #32).

:func:`reserved_port` takes these ports from *below* the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``), which the kernel never hands out by itself;
test processes running side by side (several checkouts, xdist workers) share them
through a lock file per port (``flock``), held by the process that took the port (for
its last :data:`HELD` reservations, then released: by then its server has long bound
it). A port also has to bind right now, so a foreign server on it is skipped.
"""

from __future__ import annotations

import collections
import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path
from typing import Final, TextIO

#: Reservations one process keeps locked; older ones are released (their servers bound
#: them long ago, or stopped). Small enough that many suites side by side fit the range.
HELD: Final = 256

#: Where the lock files live (one per port), shared by every test process of this user.
LOCK_DIR: Final = Path(tempfile.gettempdir()) / f"apexmesh-test-ports-{os.getuid()}"

#: Lowest port handed out (below it: well-known and registered services' usual ports).
LOWEST: Final = 20000

_held: collections.deque[tuple[int, TextIO]] = collections.deque()
_mutex = threading.Lock()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when unreadable)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    """True when nothing holds ``port`` on loopback now (as a server would bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _lock(port: int) -> TextIO | None:
    """The open, locked lock file of ``port``; None when another process holds it."""
    LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
    handle = (LOCK_DIR / f"{port}.lock").open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


def reserved_port() -> int:
    """A loopback TCP port no other cooperating test process and no kernel choice will
    take: for a server started later that cannot bind port 0 (see the module
    docstring), or for an address where nothing must listen."""
    high = _ephemeral_low() - 1
    candidates = list(range(LOWEST, high + 1))
    start = random.randrange(len(candidates))
    with _mutex:
        taken = {port for port, _ in _held}
        for port in candidates[start:] + candidates[:start]:
            if port in taken:
                continue
            handle = _lock(port)
            if handle is None:
                continue
            if not _bindable(port):
                handle.close()
                continue
            _held.append((port, handle))
            while len(_held) > HELD:
                _, old = _held.popleft()
                old.close()
            return port
    raise RuntimeError(f"no free port in {LOWEST}..{high}")


__all__ = ["HELD", "LOCK_DIR", "reserved_port"]
