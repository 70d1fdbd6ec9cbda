"""The in-process meshes' harness on every path (issue #32): a start that fails half
way (a port taken by a foreign server) stops what it started and leaks no transport,
channel or socket; the retried start then runs."""

from __future__ import annotations

import gc
import socket
from pathlib import Path

import pytest

from apexmesh.store.keys import Keys
from tests.support import mesh as mesh_module
from tests.support.mesh import running_mesh
from tests.support.redis_server import RedisServer, free_port

pytestmark = pytest.mark.integration


async def test_a_mesh_start_that_fails_half_way_leaks_nothing(
    redis_server: RedisServer, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as foreign:
        foreign.bind(("127.0.0.1", 0))
        foreign.listen()
        busy = foreign.getsockname()[1]
        picks = 0

        def taken_once() -> int:
            # rubble.com's mesh port of the first try: example-a has started by then.
            nonlocal picks
            picks += 1
            return busy if picks == 2 else free_port()

        monkeypatch.setattr(mesh_module, "free_port", taken_once)
        async with running_mesh(redis_server, keys, tmp_path) as running:
            assert picks > 4  # a second try picked its own ports
            assert busy not in running.mesh_ports.values()
            gc.collect()  # a transport of the failed try, unclosed, would warn (an error)
    gc.collect()
