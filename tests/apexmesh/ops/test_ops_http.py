"""The shared admin HTTP app: /healthz, /readyz, /metrics, served by uvicorn on port 0."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from redis.asyncio import Redis

from apexmesh.ops.http import HttpServer, also_loopback, create_ops_app, redis_ready
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


async def test_a_pod_address_is_served_on_loopback_too() -> None:
    """kubectl port-forward dials the pod's 127.0.0.1: a service bound to its pod's
    address (here 127.0.0.2, a stand-in) answers there too, on the same port."""
    server = HttpServer(create_ops_app("test", CollectorRegistry(), _always_ready))
    port = await server.start("127.0.0.2", 0)
    try:
        for host in ("127.0.0.2", "127.0.0.1"):
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
                assert (await client.get("/healthz")).json()["service"] == "test"
    finally:
        await server.stop()
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            await client.get("/healthz")


async def test_a_busy_loopback_port_does_not_stop_the_service() -> None:
    """127.0.0.1:PORT taken by something else: the service still serves its address."""
    taken = HttpServer(create_ops_app("other", CollectorRegistry(), _always_ready))
    port = await taken.start("127.0.0.1", 0)
    server = HttpServer(create_ops_app("test", CollectorRegistry(), _always_ready))
    try:
        assert await server.start("127.0.0.2", port) == port
        async with httpx.AsyncClient(base_url=f"http://127.0.0.2:{port}") as client:
            assert (await client.get("/healthz")).json()["service"] == "test"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/healthz")).json()["service"] == "other"
    finally:
        await server.stop()
        await taken.stop()


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("10.1.2.3", True),
        ("fd00::7", True),
        ("127.0.0.2", True),
        ("relay-1", True),
        ("127.0.0.1", False),
        ("localhost", False),
        ("0.0.0.0", False),  # a wildcard covers loopback already
        ("::", False),
    ],
)
def test_which_hosts_get_a_loopback_listener(host: str, expected: bool) -> None:
    assert also_loopback(host) is expected


async def _always_ready() -> str | None:
    return None


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
