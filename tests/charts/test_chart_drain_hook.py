"""The relay's preStop hook as the chart renders it, run the way the kubelet runs it
(the relay container's variables in its environment) against a real relay pod of an
in-process mesh: it drains the pod, waits while a session is open, returns once the
session has ended, and fails at once when the relay refuses it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from apexmesh.aio.tasks import within
from apexmesh.store.keys import Keys
from tests.charts.conftest import drain_hook, render
from tests.support.mesh import ADMIN_TOKEN, Mesh, endpoint_client, running_mesh
from tests.support.polling import scaled, still_true, wait_until
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.chart, pytest.mark.integration]


@pytest.fixture
async def relay_mesh(redis_server: RedisServer, keys: Keys, tmp_path: Path) -> AsyncIterator[Mesh]:
    async with running_mesh(redis_server, keys, tmp_path) as running:
        yield running


async def run_hook(script: str, port: int, token: str = ADMIN_TOKEN) -> asyncio.subprocess.Process:
    """The rendered hook with the relay's own variables: its address, port, admin token."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        env={
            "APEXMESH_RELAY_HTTP_HOST": "127.0.0.1",
            "APEXMESH_RELAY_HTTP_PORT": str(port),
            "APEXMESH_ADMIN_TOKEN": token,
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_the_hook_drains_a_real_relay_and_waits_for_its_sessions(
    relay_mesh: Mesh,
) -> None:
    values = {"relay": {"drain": {"graceSeconds": 60}, "terminationGracePeriodSeconds": 75}}
    (script,) = drain_hook(render(values))[2:]
    port = relay_mesh.b.http_port
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        refused = await run_hook(script, port, token="not-the-admin-token-0123456")
        _, stderr = await within(refused.communicate(), scaled(30))
        assert refused.returncode != 0
        assert b"drain refused" in stderr
        assert (await http.get("/readyz")).status_code == 200
        async with endpoint_client(relay_mesh.b.edge_port) as client:
            await client.attach("barney@example.com")
            hook = await run_hook(script, port)

            async def unready() -> bool:
                return (await http.get("/readyz")).status_code == 503

            await wait_until(unready, 10, every=0.05, what="the hook draining the relay")
            assert "draining" in (await http.get("/readyz")).json()["reason"]
            # A session is still open: the hook is waiting for it, within its grace.
            await still_true(lambda: hook.returncode is None, 1.5)
        # The session ended: the hook returns well before its 60 s.
        _, stderr = await within(hook.communicate(), scaled(30))
        assert hook.returncode == 0, stderr
