"""A pubsub pod started after a snapshot and a trim of the event log serves the same
topics and subscriptions as a pod that saw the whole log (docs/snapshot.md): its admin
listings (live topics, and the whole catalogue from the snapshot plus later events), and
a publication delivered to every subscriber through it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from redis.asyncio import Redis

from apexmesh.client.outgoing import XmlContent
from apexmesh.ops.admin import ADMIN_PREFIX, API_VERSION
from apexmesh.store.keys import Keys
from services.pubsub.app import PubsubApp
from services.pubsub.settings import PubsubSettings
from spark.snapshot import SnapshotJob
from tests.services.pubsub.conftest import Attach, PubsubMesh
from tests.spark.test_snapshot_job import settings_for
from tests.support.mesh import READ_TOKEN
from tests.support.polling import scaled

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]


async def listing(app: PubsubApp, path: str) -> Any:
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{app.http_port}{ADMIN_PREFIX}{API_VERSION}",
        headers={"Authorization": f"Bearer {READ_TOKEN}"},
        timeout=scaled(30),
    ) as http:
        answer = await http.get(path)
        assert answer.status_code == 200, answer.text
        return answer.json()


async def views(app: PubsubApp) -> tuple[Any, Any, Any]:
    topics = await listing(app, "/topics")
    for topic in topics:
        topic.pop("backlog")
    whole = await listing(app, "/catalogue/example.com")
    return topics, whole["topics"], whole["subscriptions"]


async def test_a_pod_started_after_a_snapshot_and_trim_serves_the_same(
    mesh: PubsubMesh,
    attach: Attach,
    spark: SparkSession,
    redis: Redis,
    keys: Keys,
    tmp_path: Path,
) -> None:
    mike = await attach("mike@example.com", pod="a")
    bob = await attach("bob@example.com", pod="b")
    for topic in ("news", "sports", "leases"):
        await mike.pubsub.create_topic(topic)
    await mike.pubsub.subscribe("news", duration=3600)
    await bob.pubsub.subscribe("news", duration=3600)
    await bob.pubsub.subscribe("sports", duration=3600)
    await mike.pubsub.subscribe("sports", duration=3600)
    await mike.pubsub.cancel("sports")
    await mike.pubsub.subscribe("leases", duration=3600)
    await mike.pubsub.delete_topic("leases")
    events = await redis.xlen(keys.pubsub_events())
    assert events >= 10

    full = mesh.pubsub["p1"]  # saw the whole log (it was there from the start)
    before = await views(full)
    # with the well-known topics every pod creates (draft-wyman 6.2, 6.3)
    assert [t["topic"] for t in before[0]] == ["WKT=Subscriptions", "WKT=Topics", "news", "sports"]
    assert sorted((s["topic"], s["subscriber"]) for s in before[2]) == [
        ("news", "bob@example.com"),
        ("news", "mike@example.com"),
        ("sports", "bob@example.com"),
    ]

    # the snapshot job: Parquet, the Redis snapshot, and the log trimmed to nothing
    result = await SnapshotJob(settings_for(keys, tmp_path / "snapshots"), spark, redis).run()
    # example.com's two and three, and what redistr.com's pod holds
    assert result.subscriptions >= 3
    assert result.topics >= 4
    assert result.trimmed == events
    assert await redis.xlen(keys.pubsub_events()) == 0

    # a new pod in place of p2 (relay b sends to its port), started after the trim
    await mesh.pubsub["p2"].stop()
    warm = PubsubApp(PubsubSettings.from_env(mesh.pubsub_env("p2", APEXMESH_PUBSUB_POD_ID="p3")))
    await warm.start()
    try:
        assert await views(warm) == before
        assert warm.catalogue.from_snapshot
        assert await views(full) == before  # the old pod too, after the trim

        # a publication through the new pod reaches both subscribers of news
        fred = await attach("fred@example.com", pod="b")
        await fred.pubsub.publish("news", XmlContent(b"<headline>warm</headline>"))
        for party in (mike, bob):
            topic, received = await party.publication(within=20)
            assert (topic, received.content) == ("news", b"<headline>warm</headline>")

        # a change after the trim reaches both pods' catalogues
        await bob.pubsub.cancel("news")
        after = await views(warm)
        assert sorted((s["topic"], s["subscriber"]) for s in after[2]) == [
            ("news", "mike@example.com"),
            ("sports", "bob@example.com"),
        ]
        assert await views(full) == after
    finally:
        await warm.stop()
