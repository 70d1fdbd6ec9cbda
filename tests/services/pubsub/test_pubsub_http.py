"""Admin HTTP of a pubsub pod: health, readiness, metrics of what it did."""

from __future__ import annotations

import httpx
import pytest

from apexmesh.apex.elements import Reply
from tests.services.pubsub.conftest import Attach, PubsubMesh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def test_health_readiness_metrics(mesh: PubsubMesh, attach: Attach) -> None:
    mike = await attach("mike@example.com", pod="a")
    assert await mike.pubsub.create_topic("news") == Reply(code=250, trans_id=1)
    app = mesh.pubsub["p1"]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{app.http_port}") as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/readyz")).status_code == 200
        metrics = (await http.get("/metrics")).text
    assert 'apexmesh_pubsub_operations_total{code="250",operation="createtopic"} 1.0' in metrics
    assert "apexmesh_pubsub_leader" in metrics
