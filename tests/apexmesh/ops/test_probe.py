"""The images' health probe: finds the admin address the way each service does and
turns the answer into an exit code (real HTTP on loopback)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from apexmesh.ops.http import HttpServer, create_ops_app
from apexmesh.ops.probe import DEFAULT_HTTP_PORTS, main, probe_url


@pytest.mark.unit
def test_the_url_follows_the_services_settings() -> None:
    assert probe_url("relay", "/readyz", {}) == "http://127.0.0.1:8401/readyz"
    env = {"APEXMESH_PUBSUB_HTTP_HOST": "pubsub-1", "APEXMESH_PUBSUB_HTTP_PORT": "9000"}
    assert probe_url("pubsub", "/healthz", env) == "http://pubsub-1:9000/healthz"
    assert probe_url("access", "readyz", {"APEXMESH_ACCESS_HTTP_HOST": "0.0.0.0"}) == (
        "http://127.0.0.1:8411/readyz"
    )
    assert probe_url("report", "/healthz", {"APEXMESH_REPORT_HTTP_HOST": "fd00::7"}) == (
        "http://[fd00::7]:8412/healthz"
    )
    assert set(DEFAULT_HTTP_PORTS) == {
        "relay",
        "access",
        "pubsub",
        "report",
        "presence",
        "dashboard",
    }
    assert probe_url("dashboard", "/healthz", {}) == "http://127.0.0.1:8420/healthz"


@pytest.mark.unit
def test_usage_errors_exit_2() -> None:
    assert main([]) == 2
    assert main(["nosuchservice"]) == 2


@pytest.fixture
async def admin() -> AsyncIterator[tuple[int, list[str | None]]]:
    """A service's admin app whose readiness the test sets."""
    reason: list[str | None] = [None]

    async def ready() -> str | None:
        return reason[0]

    server = HttpServer(create_ops_app("presence", CollectorRegistry(), ready))
    port = await server.start("127.0.0.1", 0)
    try:
        yield port, reason
    finally:
        await server.stop()


@pytest.mark.integration
async def test_exit_code_follows_readiness(admin: tuple[int, list[str | None]]) -> None:
    port, reason = admin
    env = {"APEXMESH_PRESENCE_HTTP_PORT": str(port)}
    assert await asyncio.to_thread(main, ["presence", "/readyz"], env) == 0
    reason[0] = "redis unreachable"
    assert await asyncio.to_thread(main, ["presence", "/readyz"], env) == 1
    assert await asyncio.to_thread(main, ["presence", "/healthz"], env) == 0


@pytest.mark.integration
async def test_nothing_listening_exits_1(admin: tuple[int, list[str | None]]) -> None:
    port, _ = admin
    env = {"APEXMESH_PRESENCE_HTTP_PORT": str(port + 1 if port < 65535 else port - 1)}
    assert await asyncio.to_thread(main, ["presence"], env) == 1
