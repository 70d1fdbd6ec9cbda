"""Recovery after the access service restarts (the relay's gRPC channels reconnect within
a second, apexmesh/rpc/channels.py), and the relay's readiness while it cannot reach the
access service (fail closed: nothing is allowed meanwhile)."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest

from services.access.app import AccessApp
from tests.support.mesh import Mesh
from tests.support.polling import scaled

pytestmark = pytest.mark.integration


async def readiness(port: int) -> tuple[int, dict[str, str]]:
    async with httpx.AsyncClient(timeout=scaled(5.0)) as client:
        answer = await client.get(f"http://127.0.0.1:{port}/readyz")
    return answer.status_code, answer.json()


async def test_checks_work_again_within_a_second_of_an_access_restart(mesh: Mesh) -> None:
    relay = mesh.a
    assert (await relay.access.check("fred@example.com", "barney@example.com", "core:data"))[0]
    port = mesh.access.grpc_port
    settings = mesh.access.settings
    await mesh.access.stop()
    # Down for a while, as a rolling restart is: every call fails, and the channel's
    # reconnect attempts back off meanwhile.
    loop = asyncio.get_running_loop()
    until = loop.time() + 6.0
    while loop.time() < until:
        with pytest.raises(Exception):  # noqa: B017  (UNAVAILABLE or deadline)
            await relay.access.check("fred@example.com", "barney@example.com", "core:data")
        await asyncio.sleep(0.2)  # the relay keeps being used while access is down
    code, body = await readiness(relay.http_port)
    assert code == 503
    assert "access" in body["reason"]
    restarted = AccessApp(dataclasses.replace(settings, grpc_port=port))
    await restarted.start()
    try:
        started = loop.time()
        while True:
            try:
                await relay.access.check("fred@example.com", "barney@example.com", "core:data")
            except Exception:  # noqa: BLE001  (not reconnected yet)
                assert loop.time() - started < scaled(1.5), (
                    "the relay did not reconnect within a second"
                )
                await asyncio.sleep(0.05)  # poll interval
                continue
            break
        assert loop.time() - started < scaled(1.5)
        assert (await readiness(relay.http_port))[0] == 200
    finally:
        await restarted.stop()  # (the first one is stopped again, harmlessly, with the mesh)
