"""The admin API plumbing: bearer roles, refusals counted by mechanism, the OpenAPI
document, the tokens' settings rules, 503 while Redis cannot answer."""

from __future__ import annotations

import httpx
import pytest
from fastapi import APIRouter
from prometheus_client import CollectorRegistry
from redis import exceptions as redis_errors

from apexmesh.ops.admin import RETRY_AFTER_SECONDS, AdminSpec, Guard
from apexmesh.ops.audit import AuthFailures
from apexmesh.ops.http import create_ops_app
from apexmesh.ops.settings import AdminTokens, SettingsError, admin_tokens

pytestmark = pytest.mark.unit

ADMIN = "a" * 24
READ = "r" * 24


async def ready() -> str | None:
    return None


def app_with(tokens: AdminTokens) -> tuple[httpx.AsyncClient, CollectorRegistry]:
    registry = CollectorRegistry()
    guard = Guard(tokens, AuthFailures("test", registry))
    read, change = guard.reader(), guard.changer()

    @read.get("/things")
    async def things() -> list[str]:
        return ["one"]

    @change.post("/things")
    async def add() -> dict[str, bool]:
        return {"added": True}

    spec = AdminSpec(guard=guard, pod="pod-1", domains=("example.com",), routers=[read, change])
    app = create_ops_app("test", registry, ready, spec)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
    return client, registry


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_roles() -> None:
    client, registry = app_with(AdminTokens(admin=ADMIN, read=READ))
    async with client:
        assert (await client.get("/admin/v1/things")).status_code == 401
        assert (await client.get("/admin/v1/things", headers=bearer("x"))).status_code == 401
        assert (await client.get("/admin/v1/things", headers=bearer(READ))).json() == ["one"]
        assert (await client.get("/admin/v1/things", headers=bearer(ADMIN))).status_code == 200
        assert (await client.post("/admin/v1/things", headers=bearer(READ))).status_code == 403
        assert (await client.post("/admin/v1/things", headers=bearer(ADMIN))).json() == {
            "added": True
        }
        info = (await client.get("/admin/v1/info", headers=bearer(READ))).json()
        assert (info["service"], info["pod"], info["ready"]) == ("test", "pod-1", True)
        # probes and metrics stay open; the OpenAPI document names the bearer scheme
        assert (await client.get("/healthz")).status_code == 200
        document = (await client.get("/admin/openapi.json")).json()
        assert "HTTPBearer" in document["components"]["securitySchemes"]
        assert "401" in document["paths"]["/v1/things"]["get"]["responses"]
    failures = registry.get_sample_value(
        "apexmesh_auth_failures_total", {"mechanism": "bearer", "service": "test"}
    )
    assert failures == 3


async def test_no_token_configured_refuses_everything() -> None:
    client, _ = app_with(AdminTokens())
    async with client:
        assert (await client.get("/admin/v1/info", headers=bearer(""))).status_code == 401
        assert (await client.get("/admin/v1/info", headers=bearer(ADMIN))).status_code == 401


def test_token_settings(tmp_path: object) -> None:
    assert admin_tokens({}, dev=False) == AdminTokens()
    assert admin_tokens({"APEXMESH_ADMIN_TOKEN": ADMIN}, dev=False).admin == ADMIN
    with pytest.raises(SettingsError, match="shorter"):
        admin_tokens({"APEXMESH_ADMIN_TOKEN": "short"}, dev=False)
    assert admin_tokens({"APEXMESH_ADMIN_TOKEN": "short"}, dev=True).admin == "short"
    with pytest.raises(SettingsError, match="differ"):
        admin_tokens({"APEXMESH_ADMIN_TOKEN": ADMIN, "APEXMESH_ADMIN_READ_TOKEN": ADMIN}, dev=False)
    with pytest.raises(SettingsError, match="white space"):
        admin_tokens({"APEXMESH_ADMIN_TOKEN": ADMIN + " x"}, dev=False)


def test_token_from_a_mounted_file(tmp_path: pytest.TempPathFactory) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "token"
    path.write_text(READ + "\n", encoding="utf-8")
    tokens = admin_tokens({"APEXMESH_ADMIN_READ_TOKEN_FILE": str(path)}, dev=False)
    assert tokens.read == READ
    with pytest.raises(SettingsError, match="not both"):
        admin_tokens(
            {"APEXMESH_ADMIN_READ_TOKEN_FILE": str(path), "APEXMESH_ADMIN_READ_TOKEN": READ},
            dev=False,
        )


def test_router_helpers_are_guarded() -> None:
    guard = Guard(AdminTokens(admin=ADMIN), AuthFailures("x", CollectorRegistry()))
    assert isinstance(guard.reader(), APIRouter)
    assert guard.role_of(ADMIN) is not None
    assert guard.role_of(READ) is None


@pytest.mark.parametrize(
    "error",
    [
        redis_errors.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
        redis_errors.BusyLoadingError("Redis is loading the dataset in memory"),
        redis_errors.TimeoutError("Timeout reading from socket"),
        redis_errors.ClusterDownError("CLUSTERDOWN The cluster is down"),
        redis_errors.TryAgainError("TRYAGAIN"),
        redis_errors.ReadOnlyError("You can't write against a read only replica."),
    ],
    ids=lambda error: type(error).__name__,
)
async def test_every_admin_route_answers_503_while_redis_cannot(error: Exception) -> None:
    """Issue #34: once for every service's admin app (create_admin_app), not per route."""
    registry = CollectorRegistry()
    guard = Guard(AdminTokens(admin=ADMIN, read=READ), AuthFailures("test", registry))
    read, change = guard.reader(), guard.changer()

    @read.get("/listing")
    async def listing() -> list[str]:
        raise error

    @change.post("/change")
    async def change_something() -> dict[str, bool]:
        raise error

    spec = AdminSpec(guard=guard, pod="pod-1", domains=("example.com",), routers=[read, change])
    app = create_ops_app("test", registry, ready, spec)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        for answer in (
            await client.get("/admin/v1/listing", headers=bearer(READ)),
            await client.post("/admin/v1/change", headers=bearer(ADMIN)),
        ):
            assert answer.status_code == 503
            assert answer.json()["detail"] == f"redis unreachable: {type(error).__name__}: {error}"
            assert answer.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
        # the guard still comes first: no token is 401, not a hint about Redis
        assert (await client.get("/admin/v1/listing")).status_code == 401
        document = (await client.get("/admin/openapi.json")).json()
        assert "503" in document["paths"]["/v1/listing"]["get"]["responses"]


async def test_other_errors_stay_500() -> None:
    registry = CollectorRegistry()
    guard = Guard(AdminTokens(admin=ADMIN, read=READ), AuthFailures("test", registry))
    read = guard.reader()

    @read.get("/broken")
    async def broken() -> list[str]:
        raise redis_errors.ResponseError("WRONGTYPE Operation against a key")

    spec = AdminSpec(guard=guard, pod="pod-1", domains=("example.com",), routers=[read])
    app = create_ops_app("test", registry, ready, spec)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/admin/v1/broken", headers=bearer(READ))).status_code == 500
