"""The local mesh's start when a port it picked is taken before the service binds it:
the start is tried again with fresh ports and nothing of the failed try keeps running."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from apexmesh.ops import localmesh
from apexmesh.ops.localmesh import Child, LocalMesh

pytestmark = pytest.mark.system


class WatchedMesh(LocalMesh):
    """Keeps every process it starts, so the test can see what became of them."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir, dev=True)
        self.started: list[asyncio.subprocess.Process] = []

    async def _start_child(self, child: Child) -> None:
        await super()._start_child(child)
        if child.process is not None:
            self.started.append(child.process)


async def test_a_taken_port_costs_one_more_try_and_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picks = 0
        real_free_port = localmesh.free_port

        def racing_free_port() -> int:
            # The second pick of the first try (the first service port after Redis's)
            # is taken by another process before the service binds it.
            nonlocal picks
            picks += 1
            return busy if picks == 2 else real_free_port()

        monkeypatch.setattr(localmesh, "free_port", racing_free_port)
        mesh = WatchedMesh(tmp_path)
        await mesh.start()
        try:
            current = {c.process for c in mesh.children}
            failed_try = [p for p in mesh.started if p not in current]
            assert failed_try  # the first try did start processes
            assert all(p.returncode is not None for p in failed_try)  # all stopped
            assert all(p is not None and p.returncode is None for p in current)
            assert busy not in {r.edge_port for r in mesh.relays}
        finally:
            await mesh.stop()
        assert all(c.process is not None for c in mesh.children)
        assert all(c.process.returncode is not None for c in mesh.children if c.process)
