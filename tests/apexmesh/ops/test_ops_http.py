"""The shared admin HTTP app: /healthz, /readyz, /metrics, served by uvicorn on port 0."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from redis.asyncio import Redis

from apexmesh.ops.http import HttpServer, create_ops_app, redis_ready
from tests.support.redis_server import free_port

pytestmark = pytest.mark.integration


async def test_endpoints_over_a_real_socket() -> None:
    registry = CollectorRegistry()
    Counter("apexmesh_test_things", "Things.", registry=registry).inc(3)
    reason: list[str | None] = ["warming up"]

    async def ready() -> str | None:
        return reason[0]

    server = HttpServer(create_ops_app("test", registry, ready))
    port = await server.start("127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/healthz")).json() == {"status": "ok", "service": "test"}
            not_ready = await client.get("/readyz")
            assert not_ready.status_code == 503
            assert not_ready.json()["reason"] == "warming up"
            reason[0] = None
            assert (await client.get("/readyz")).status_code == 200
            metrics = await client.get("/metrics")
            assert metrics.headers["content-type"].startswith("text/plain")
            assert "apexmesh_test_things_total 3.0" in metrics.text
    finally:
        await server.stop()


async def test_redis_ready_probe(redis: Redis) -> None:
    """Redis answering and relays configured: ready; no relay, Redis down, or the
    service's own condition failing: the reason."""
    assert await redis_ready(redis)() is None
    assert await redis_ready(redis, relay_addresses=("relay:7401",))() is None
    assert "no relay address" in str(await redis_ready(redis, relay_addresses=())())
    assert await redis_ready(redis, also=lambda: "not yet")() == "not yet"
    dead = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    try:
        assert "redis unreachable" in str(await redis_ready(dead)())
    finally:
        await dead.aclose()
