"""The mesh's system scenarios with its state on a real Redis Cluster (issue #30).

The README's local mesh (every service its own process, TLS and SASL on, two domains,
two relay pods for example.com) runs against a six-node cluster of Debian redis-server
processes (tests/support/redis_cluster.py, tests/support/cluster_mesh.py): every relay,
access, presence and pubsub process has ``APEXMESH_REDIS_URL=redis+cluster://...``, so
a script or transaction that crossed slots, a key without a tag or a pub/sub the cluster
client cannot do fails here, where the store tests on the cluster
(tests/apexmesh/store/cluster/) only reach the store's calls one at a time.

One mesh for the module (its start is most of the cost on a loaded two-core machine).
The tests run in file order: the demo first, as test_mesh.py checks it (its listing
expects the demo's topic only), then the snapshot job on what the demo left, then the
topic scenarios the demo does not do. Endpoints are SDK clients in the test's process
over BEEP/TCP.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import TypeVar

import pytest
import pytest_asyncio

from apexmesh.aio.tasks import within
from apexmesh.client import XmlContent
from apexmesh.client.pubsub import PubsubClient
from apexmesh.client.robust import RobustClient
from apexmesh.ops.localmesh import DEMO_TOPIC, Relay
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from scripts.demo import demo, snapshot_step
from tests.support.cluster_mesh import ClusterLocalMesh, running_cluster, running_mesh, session
from tests.support.polling import scaled
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.robust_clients import publish_at_full_speed, receive_all, warm_up
from tests.system.test_mesh import DEMO_LINES

pytestmark = [
    pytest.mark.system,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(600),
]

#: Topics anyone may subscribe and publish to (their owner, who creates them, is dino).
CONTENT_TOPIC = "cluster.content"
ROBUST_TOPIC = "cluster.robust"
ROBUST_PUBLICATIONS = 60
#: Seconds a delivery or an answer may take on a loaded machine (scaled).
ANSWER_SECONDS = 10.0

T = TypeVar("T")


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    with running_cluster(tmp_path_factory.mktemp("mesh-cluster")) as cluster:
        yield cluster


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mesh(
    redis_cluster: RedisClusterNodes, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ClusterLocalMesh]:
    workdir = tmp_path_factory.mktemp("mesh")
    async with running_mesh(workdir, redis_cluster.url, topics=(CONTENT_TOPIC, ROBUST_TOPIC)) as up:
        yield up


async def soon(awaitable: Awaitable[T]) -> T:
    """``awaitable`` within :data:`ANSWER_SECONDS` (scaled): a lost delivery fails the
    test there, not at the module's timeout."""
    return await within(awaitable, scaled(ANSWER_SECONDS))


async def pubsub_of(
    stack: contextlib.AsyncExitStack,
    mesh: ClusterLocalMesh,
    relay: Relay,
    name: str,
    domain: str | None = None,
) -> PubsubClient:
    client = await session(stack, mesh, relay, name)
    helper = PubsubClient(await client.attach(name), domain=domain)
    stack.push_async_callback(helper.aclose)
    return helper


async def test_the_demo_runs_on_the_cluster(
    mesh: ClusterLocalMesh, capsys: pytest.CaptureFixture[str]
) -> None:
    """Attach on both example.com pods and on rubble.com, data across pods and domains
    with reports, presence, a topic with subscribers on both pods, hold4Endpoint."""
    await demo(mesh)
    out = capsys.readouterr().out
    for line in DEMO_LINES:
        assert line in out, out


@pytest.mark.spark
async def test_the_snapshot_job_runs_on_the_cluster(
    mesh: ClusterLocalMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m spark.snapshot`` per domain with the cluster's URL (as the chart's
    CronJob would be given it): the demo's topic and the two well-known ones."""
    # The job refuses a Redis without a password too, unless in a development run.
    monkeypatch.setenv("APEXMESH_DEV", "1")
    assert await snapshot_step(mesh, mesh.workdir)
    manifests = sorted(
        (mesh.workdir / "snapshots" / "example.com").glob("snapshots/*/manifest.json")
    )
    assert len(manifests) == 1
    manifest = json.loads(manifests[0].read_text())
    assert (manifest["topics"], manifest["schema"]) == (3, 1)
    assert (manifests[0].parent / "_SUCCESS").exists()
    assert list((mesh.workdir / "snapshots" / "rubble.com").glob("snapshots/*/_SUCCESS"))


async def test_subscribe_publish_cancel_on_the_cluster(mesh: ClusterLocalMesh) -> None:
    """The demo's topic: fred (pod 1) and barney (pod 2) subscribe, wilma publishes from
    rubble.com, both get it; fred cancels and the next publication reaches barney only
    (fred, subscribed again, gets the one after it next)."""
    pod1, pod2 = mesh.relay("example.com", 0), mesh.relay("example.com", 1)
    async with contextlib.AsyncExitStack() as stack:
        fred = await pubsub_of(stack, mesh, pod1, "fred@example.com")
        barney = await pubsub_of(stack, mesh, pod2, "barney@example.com")
        wilma = await pubsub_of(
            stack, mesh, mesh.relay("rubble.com"), "wilma@rubble.com", domain="example.com"
        )

        async def publish(content: bytes) -> None:
            await wilma.publish(DEMO_TOPIC, content, content_type="text/plain")

        async def next_content(helper: PubsubClient) -> tuple[str, bytes]:
            topic, data = await soon(helper.next_publication())
            return topic, data.content

        for helper in (fred, barney):
            assert (await helper.subscribe(DEMO_TOPIC, duration=60)).code == 250
        await publish(b"first")
        for helper in (fred, barney):
            assert await next_content(helper) == (DEMO_TOPIC, b"first")
        assert (await fred.cancel(DEMO_TOPIC)).code == 250
        await publish(b"second")
        assert await next_content(barney) == (DEMO_TOPIC, b"second")
        assert (await fred.subscribe(DEMO_TOPIC, duration=60)).code == 250
        await publish(b"third")
        assert await next_content(fred) == (DEMO_TOPIC, b"third")
        assert await next_content(barney) == (DEMO_TOPIC, b"third")


async def test_a_content_topic_on_the_cluster(mesh: ClusterLocalMesh) -> None:
    """Selector subscriptions (draft-wyman 5.8) on pods 1 and 2: each publication reaches
    exactly the endpoint whose selector matches, with that subscription's id."""
    pod1, pod2 = mesh.relay("example.com", 0), mesh.relay("example.com", 1)
    async with contextlib.AsyncExitStack() as stack:
        dino = await pubsub_of(stack, mesh, pod1, "dino@example.com")
        assert (await dino.create_topic(CONTENT_TOPIC)).code == 250
        fred = await pubsub_of(stack, mesh, pod1, "fred@example.com")
        barney = await pubsub_of(stack, mesh, pod2, "barney@example.com")
        fred_id = await fred.select(CONTENT_TOPIC, duration=60, selector="d = '1'")
        barney_id = await barney.select(CONTENT_TOPIC, duration=60, selector="d = '2'")
        for n, d in enumerate(("1", "2", "1", "2")):
            await dino.publish(CONTENT_TOPIC, XmlContent(f"<q n='{n}' d='{d}'/>".encode()))
        # Each one's next two matches are its own, in order: a stray one would come
        # between them.
        for helper, wanted, own in ((fred, (0, 2), fred_id), (barney, (1, 3), barney_id)):
            for n in wanted:
                topic, matched, data = await soon(helper.next_match())
                assert (topic, matched) == (CONTENT_TOPIC, (own,))
                assert data.content == f"<q n='{n}' d='{'1' if n % 2 == 0 else '2'}'/>".encode()


async def test_a_robust_topic_on_the_cluster(mesh: ClusterLocalMesh) -> None:
    """A robust topic (XEP-0040): fred publishes on pod 1 with publications in flight,
    barney follows on pod 2 and receives every one that got ``published``, in source-seq
    order, once."""
    pod1, pod2 = mesh.relay("example.com", 0), mesh.relay("example.com", 1)
    settings = RobustSettings(resolution=Resolution.BITS32, heartbeat_ms=300)
    async with contextlib.AsyncExitStack() as stack:
        dino = await pubsub_of(stack, mesh, pod1, "dino@example.com")
        assert (await dino.create_topic(ROBUST_TOPIC, robust=settings)).code == 250
        fred_client = await session(stack, mesh, pod1, "fred@example.com")
        fred = RobustClient(await fred_client.attach("fred@example.com"))
        stack.push_async_callback(fred.aclose)
        barney_client = await session(stack, mesh, pod2, "barney@example.com")
        barney = RobustClient(await barney_client.attach("barney@example.com"))
        stack.push_async_callback(barney.aclose)
        await barney.follow(ROBUST_TOPIC, resolution=Resolution.BITS32, heartbeat_ms=300)
        assert (await barney.subscribe(ROBUST_TOPIC, duration=600)).code == 250
        await warm_up(fred, barney, ROBUST_TOPIC)
        payloads = await publish_at_full_speed(
            fred, ROBUST_TOPIC, "cluster", in_flight=10, at_least=ROBUST_PUBLICATIONS
        )
        got = await receive_all(barney, payloads, within=30)
        # Warm-up publications sent before the first one arrived may still come.
        delivered = [p.payload for p in got if not p.payload.startswith(b"warm")]
        assert delivered == payloads, "every published one, in source-seq order, once"
        seqs = [p.source_seq for p in got]
        assert seqs == sorted(set(seqs)), "in source-seq order, each once"
