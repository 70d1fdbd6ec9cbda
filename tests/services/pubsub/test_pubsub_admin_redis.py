"""Issue #34: the admin API answers 503 with a reason while Redis cannot answer, and
serves again once it is back (it answered an unhandled 500 after a Redis restart).

A real pubsub pod (in-process) over its own redis-server, which the test stops and
starts again; the admin API over real HTTP."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from apexmesh.ops.admin import RETRY_AFTER_SECONDS
from apexmesh.store.keys import Keys
from services.pubsub.app import PubsubApp
from services.pubsub.settings import PubsubSettings
from tests.support.mesh import READ_TOKEN, base_env
from tests.support.polling import scaled, wait_until
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

LISTINGS = ("/admin/v1/subscriptions", "/admin/v1/topics", "/admin/v1/topics/example.com/news")


@contextlib.asynccontextmanager
async def pod_on(redis: RedisServer) -> AsyncIterator[httpx.AsyncClient]:
    env = {
        **base_env(redis, Keys("admin503")),
        "APEXMESH_PUBSUB_DOMAINS": "example.com",
        # Nothing is published here: the access service and the relays are never called.
        "APEXMESH_ACCESS_ADDRESS": "127.0.0.1:9",
        "APEXMESH_RELAY_ADDRESSES": "127.0.0.1:9",
        "APEXMESH_PUBSUB_POD_ID": "admin-redis",
        "APEXMESH_PUBSUB_GRPC_PORT": "0",
        "APEXMESH_PUBSUB_HTTP_PORT": "0",
    }
    pod = PubsubApp(PubsubSettings.from_env(env))
    await pod.start()
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{pod.http_port}",
            headers={"Authorization": f"Bearer {READ_TOKEN}"},
            timeout=scaled(30.0),
        ) as client:
            yield client
    finally:
        await pod.stop()


async def test_admin_listings_answer_503_while_redis_is_down(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    try:
        async with pod_on(redis) as admin:
            assert (await admin.get("/admin/v1/subscriptions")).status_code == 200
            redis.stop()
            for path in LISTINGS:
                answer = await admin.get(path)
                assert answer.status_code == 503, (path, answer.text)
                assert answer.json()["detail"].startswith("redis unreachable: "), answer.text
                assert answer.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
            redis.start()  # same port and directory

            async def answers() -> bool:
                return (await admin.get("/admin/v1/subscriptions")).status_code == 200

            # The pool reconnects on its own; polling over HTTP: no event to await.
            await wait_until(answers, 20, every=0.05, what="the admin API after Redis is back")
            for path in LISTINGS[:2]:
                assert (await admin.get(path)).status_code == 200, path
    finally:
        redis.stop()
