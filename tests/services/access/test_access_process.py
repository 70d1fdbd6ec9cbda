"""``python -m services.access`` as a real process: seed file, admin HTTP endpoints,
graceful SIGTERM, and entries that survive a restart because they live in Redis."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from apexmesh.rpc.access import AccessClient
from tests.support.grpc_channels import ready_channel
from tests.support.processes import ServiceProcess
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

SEED = """<access-entries>
  <access owner='apex=pubsub@example.com' actor='*@example.com'
          actions='pubsub:createtopic pubsub:deletetopic' />
  <access owner='apex=pubsub/music.jazz.milesdavis@example.com' actor='*@*'
          actions='core:data' />
  <access owner='apex=pubsub/music.jazz.milesdavis@example.com' actor='mr.slate@example.com'
          actions='' />
</access-entries>
"""


def service_env(redis_server: RedisServer, tmp_path: Path, prefix: str) -> dict[str, str]:
    seed = tmp_path / "seed.xml"
    seed.write_text(SEED)
    return {
        "APEXMESH_DEV": "1",
        "APEXMESH_DOMAINS": "example.com",
        "APEXMESH_REDIS_URL": redis_server.url,
        "APEXMESH_REDIS_PREFIX": prefix,
        "APEXMESH_ACCESS_GRPC_PORT": "0",
        "APEXMESH_ACCESS_HTTP_PORT": "0",
        "APEXMESH_ACCESS_SEED_FILE": str(seed),
        "APEXMESH_SHUTDOWN_GRACE": "1",
    }


async def check(port: int, owner: str, actor: str, token: str) -> int:
    async with ready_channel(port) as channel:
        decision, _ = await AccessClient(channel).check(owner, actor, token)
        return int(decision.code)


async def test_restart_keeps_entries(redis_server: RedisServer, tmp_path: Path) -> None:
    env = service_env(redis_server, tmp_path, f"proc-{tmp_path.name}")
    topic = "apex=pubsub/music.jazz.milesdavis@example.com"
    service = ServiceProcess("services.access", env, tmp_path / "access-1.log")
    info = service.start()
    try:
        port = info["grpc_port"]
        assert await check(port, topic, "barney@rubble.com", "core:data") == 250
        assert await check(port, topic, "mr.slate@example.com", "core:data") == 537
        async with ready_channel(port) as channel:
            result = await AccessClient(channel).handle_operation(
                "apex=pubsub@example.com",
                f"<set transID='1'><access owner='{topic}' actor='barney@rubble.com'"
                " actions='pubsub:subscribe core:data' /></set>".encode(),
            )
            assert result.code == 250
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{info['http_port']}") as http:
            assert (await http.get("/healthz")).json()["status"] == "ok"
            assert (await http.get("/readyz")).status_code == 200
            metrics = (await http.get("/metrics")).text
            assert "apexmesh_access_checks_total" in metrics
            assert "apexmesh_access_operations_total" in metrics
            assert "apexmesh_access_check_duration_seconds_bucket" in metrics
            assert "apexmesh_access_cached_decisions" in metrics
    finally:
        assert service.stop() == 0, service.stderr()

    again = ServiceProcess("services.access", env, tmp_path / "access-2.log")
    info = again.start()
    try:
        port = info["grpc_port"]
        assert await check(port, topic, "barney@rubble.com", "pubsub:subscribe") == 250
        assert await check(port, topic, "mr.slate@example.com", "core:data") == 537
        assert (
            await check(port, "apex=pubsub@example.com", "a@example.com", "pubsub:createtopic")
            == 250
        )
    finally:
        assert again.stop() == 0, again.stderr()


def test_bad_settings_exit_2(redis_server: RedisServer, tmp_path: Path) -> None:
    env = service_env(redis_server, tmp_path, "bad")
    env["APEXMESH_DEV"] = "0"  # a Redis URL without TLS or password is refused
    service = ServiceProcess("services.access", env, tmp_path / "bad.log")
    with pytest.raises(RuntimeError, match="exit 2"):
        service.start(timeout=15)  # start() scales it


def test_bad_seed_file_exit_2(redis_server: RedisServer, tmp_path: Path) -> None:
    env = service_env(redis_server, tmp_path, "badseed")
    Path(env["APEXMESH_ACCESS_SEED_FILE"]).write_text("<access-entries><x/></access-entries>")
    service = ServiceProcess("services.access", env, tmp_path / "badseed.log")
    with pytest.raises(RuntimeError, match="exit 2"):
        service.start(timeout=15)  # start() scales it
