"""``python -m apexmesh.client.smoke`` (the chart's helm test) against a real mesh on
loopback: SASL, attach, one data to itself with statusRequest, the 250 report; and a
wrong password fails with exit code 1 and the reason."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from apexmesh.client.smoke import exchange, main
from apexmesh.store.keys import Keys
from tests.support.mesh import PASSWORDS, running_mesh
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration


async def test_the_smoke_exchange_passes_and_a_wrong_password_fails(
    redis_server: RedisServer, keys: Keys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_mesh(redis_server, keys, tmp_path) as mesh:
        port = mesh.a.edge_port
        lines: list[str] = []
        await exchange(
            "127.0.0.1",
            port,
            identity="fred@example.com",
            sasl_name="fred",
            password=PASSWORDS["fred"],
            say=lines.append,
        )
        assert lines[1] == "attached fred@example.com"
        assert lines[-1].startswith("statusResponse 250")

        wrong = tmp_path / "password"
        wrong.write_text("not-the-password\n", encoding="utf-8")
        argv = [
            "--host", "127.0.0.1", "--port", str(port), "--identity", "fred@example.com",
            "--sasl-name", "fred", "--password-file", str(wrong), "--timeout", "5",
        ]  # fmt: skip
        assert await asyncio.to_thread(main, argv) == 1
        assert "FAILED" in capsys.readouterr().out
