"""Drain of a relay pod through its admin API (the chart's preStop, ``apexctl drain``):
no new sessions, readiness false, the sessions already open go on; and closing one
session. Tested on an in-process mesh (tests/support/mesh.py), since draining a pod of
the shared local mesh would take it from the other tests."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.support.mesh import ADMIN_TOKEN, READ_TOKEN, Mesh, endpoint_client, receive
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration


def admin(pod_port: int, token: str = ADMIN_TOKEN) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{pod_port}",
        headers={"Authorization": f"Bearer {token}"},
    )


async def test_drain_refuses_new_sessions_and_keeps_open_ones(mesh: Mesh) -> None:
    async with (
        endpoint_client(mesh.b.edge_port) as barney_client,
        endpoint_client(mesh.a.edge_port) as fred_client,
        admin(mesh.b.http_port) as http,
        admin(mesh.b.http_port, READ_TOKEN) as reader,
    ):
        barney = await barney_client.attach("barney@example.com")
        fred = await fred_client.attach("fred@example.com")
        assert (await http.get("/readyz")).status_code == 200
        assert (await reader.post("/admin/v1/drain")).status_code == 403
        answer = await http.post("/admin/v1/drain")
        assert answer.status_code == 200
        state = answer.json()
        assert state["draining"] is True
        assert state["sessions"] >= 1
        ready = await http.get("/readyz")
        assert ready.status_code == 503
        assert "draining" in ready.json()["reason"]
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", mesh.b.edge_port)
        await fred.send("barney@example.com", b"still here")
        assert (await receive(barney)).content == b"still here"
        info = (await reader.get("/admin/v1/info")).json()
        assert info["details"]["draining"] is True
        assert info["ready"] is False


async def test_sessions_listed_and_closed(mesh: Mesh) -> None:
    async with endpoint_client(mesh.a.edge_port) as client, admin(mesh.a.http_port) as http:
        await client.attach("wilma@example.com")
        sessions = (await http.get("/admin/v1/sessions")).json()
        [mine] = [s for s in sessions if s["attachments"] == ["wilma@example.com"]]
        assert mine["mode"] == "endpoint-relay"
        attachments = (await http.get("/admin/v1/attachments")).json()
        assert {"endpoint": "wilma@example.com", "session": mine["id"]}.items() <= next(
            a for a in attachments if a["endpoint"] == "wilma@example.com"
        ).items()
        closed = await http.delete(f"/admin/v1/sessions/{mine['id']}")
        assert closed.json() == {"id": mine["id"], "closed": True}
        assert (await http.delete(f"/admin/v1/sessions/{mine['id']}")).status_code == 404

        async def released() -> bool:
            listed = (await http.get("/admin/v1/attachments")).json()
            return not any(a["endpoint"] == "wilma@example.com" for a in listed)

        await wait_until(released, 5, every=0.05, what="the closed session's attachment ends")
