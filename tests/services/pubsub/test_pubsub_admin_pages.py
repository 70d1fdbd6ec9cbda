"""Issue #33: the pubsub admin listings page, filter and count from the pod's catalogue
index, and whole listings (no query parameters) stay as apexctl reads them.

A real pubsub pod (in-process) over its own redis-server; topics and subscriptions
committed through the store as the service commits them; the admin API over HTTP."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.changes import Subscribed, Subscription, TopicCreated, Unsubscribed
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import PubsubStore
from services.pubsub.admin_lists import NEXT_HEADER, TOTAL_HEADER
from services.pubsub.app import PubsubApp
from services.pubsub.settings import PubsubSettings
from tests.support.mesh import READ_TOKEN, base_env
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

DOMAIN = "example.com"
FRED = Endpoint.parse(f"fred@{DOMAIN}")
FAR = 2**41  # a lease end far in the future (ms)


@contextlib.asynccontextmanager
async def pod_on(redis: RedisServer, keys: Keys) -> AsyncIterator[httpx.AsyncClient]:
    env = {
        **base_env(redis, keys),
        "APEXMESH_PUBSUB_DOMAINS": DOMAIN,
        "APEXMESH_ACCESS_ADDRESS": "127.0.0.1:9",
        "APEXMESH_RELAY_ADDRESSES": "127.0.0.1:9",
        "APEXMESH_PUBSUB_POD_ID": "admin-pages",
        "APEXMESH_PUBSUB_GRPC_PORT": "0",
        "APEXMESH_PUBSUB_HTTP_PORT": "0",
    }
    pod = PubsubApp(PubsubSettings.from_env(env))
    await pod.start()
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{pod.http_port}/admin/v1",
            headers={"Authorization": f"Bearer {READ_TOKEN}"},
            timeout=scaled(30.0),
        ) as client:
            yield client
    finally:
        await pod.stop()


def lease(topic: str, who: str) -> Subscribed:
    subscriber = Endpoint.parse(who)
    lease = Subscription(
        topic=topic, subscriber=subscriber, originator=subscriber, trans_id=7, expires_ms=FAR
    )
    return Subscribed(lease, renewed=False)


async def test_pages_prefix_counts_and_whole_listings(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    keys = Keys("pages")
    try:
        async with Redis.from_url(redis.url) as client, pod_on(redis, keys) as admin:
            store = PubsubStore(client, keys, "setup")
            for i in range(30):
                name = f"news.{i:02}"
                changes: list[object] = [TopicCreated(name, FRED)]
                if i == 3:
                    changes += [lease(name, f"u{k}@{DOMAIN}") for k in range(3)]
                assert await store.commit(DOMAIN, name, None, changes, [], 1) is not None  # type: ignore[arg-type]
            sports = [TopicCreated("sports", FRED)]
            assert await store.commit(DOMAIN, "sports", None, sports, [], 1) == []

            whole = (await admin.get("/topics")).json()  # as apexctl reads it
            names = [t["topic"] for t in whole if not t["topic"].startswith("WKT=")]
            assert names == [f"news.{i:02}" for i in range(30)] + ["sports"]
            assert {t["topic"]: t["subscriptions"] for t in whole}["news.03"] == 3
            assert set(whole[0]) == {
                "domain",
                "topic",
                "subscriptions",
                "created_ms",
                "creator",
                "backlog",
            }

            first = await admin.get("/topics", params={"prefix": "news.", "limit": 10})
            assert [t["topic"] for t in first.json()] == [f"news.{i:02}" for i in range(10)]
            assert first.headers[TOTAL_HEADER] == "30"
            cursor = first.headers[NEXT_HEADER]
            assert json.loads(cursor) == [DOMAIN, "news.09"]
            pages = [first.json()]
            while cursor:
                answer = await admin.get(
                    "/topics", params={"prefix": "news.", "limit": 10, "after": cursor}
                )
                pages.append(answer.json())
                cursor = answer.headers.get(NEXT_HEADER, "")
            assert sum(len(p) for p in pages) == 30
            assert [t["topic"] for p in pages for t in p] == [f"news.{i:02}" for i in range(30)]

            subs = await admin.get("/subscriptions", params={"topic": "news.03", "limit": 2})
            assert [s["subscriber"] for s in subs.json()] == [f"u0@{DOMAIN}", f"u1@{DOMAIN}"]
            rest = await admin.get(
                "/subscriptions",
                params={"topic": "news.03", "limit": 2, "after": subs.headers[NEXT_HEADER]},
            )
            assert [s["subscriber"] for s in rest.json()] == [f"u2@{DOMAIN}"]
            assert NEXT_HEADER not in rest.headers
            assert len((await admin.get("/subscriptions")).json()) == 3

            # A change reaches the next listing (the catalogue folds the log on each read).
            gone = Unsubscribed("news.03", Endpoint.parse(f"u1@{DOMAIN}"), "cancel", FRED)
            done = await store.commit(DOMAIN, "news.03", None, [gone], [], 2, topic_exists=True)
            assert done == []
            summary = (await admin.get("/summary")).json()
            (counts,) = summary["domains"]
            assert counts["domain"] == DOMAIN
            assert counts["topics"] == len(whole)
            assert counts["subscriptions"] == 2
            detail = (await admin.get(f"/topics/{DOMAIN}/news.03")).json()
            assert detail["subscriptions"] == 2
            assert [s["subscriber"] for s in detail["subscribers"]] == [
                f"u0@{DOMAIN}",
                f"u2@{DOMAIN}",
            ]
            assert (await admin.get("/topics", params={"after": "nonsense"})).status_code == 400
            assert (await admin.get("/topics", params={"domain": "other.org"})).status_code == 404
    finally:
        redis.stop()
