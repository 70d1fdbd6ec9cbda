"""A robust topic across two domains (issue #29; draft-schwartz 2.6 with XEP-0040 1's
"a subscriber to a pubsub component may well be a pubsub component in itself").

The running mesh's two domains: example.com (relays ``a``, ``b``; pubsub pods ``p1``,
``p2``) and redistr.com (relay ``r``; pubsub pod ``pr``), which redistributes
example.com's ``music.jazz.milesdavis``. Both topics are robust. Fred publishes at
example.com; Dave follows the topic at redistr.com. Deliveries from example.com to
redistr.com's server are lost on purpose before its stub sees them (the boundary
loses them): its stub asks example.com for them by link range, and Dave's application
gets every publication, in order, once, each with its source, type and item. Before,
redistribution republished what came as plain publications: a delivery lost at the
boundary stayed lost, and the upstream's heartbeats were published as empty data.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from apexmesh.aio.tasks import within
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.options import Option
from apexmesh.client import PubsubClient
from apexmesh.client.robust import RobustClient
from apexmesh.pubsub.robust.elements import PublishHeader, robust_from_option
from apexmesh.pubsub.robust.publish_types import PublishType
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.store.keys import Keys
from services.pubsub.app import PubsubApp
from services.pubsub.robust_owner import OwnedTopic
from services.pubsub.settings import PubsubSettings
from tests.services.pubsub.conftest import TOPIC, started_mesh, until
from tests.services.pubsub.robust_support import subscribed
from tests.support.mesh import endpoint_client
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

UPSTREAM = RobustSettings(resolution=Resolution.BITS16, heartbeat_ms=500)
LOCAL = RobustSettings(resolution=Resolution.BITS32, heartbeat_ms=700)
REDISTRIBUTOR = Endpoint.parse(f"apex=pubsub/{TOPIC}@redistr.com")
DAVE = Endpoint.parse("dave@redistr.com")
COUNT = 30
#: Source seqs of the publications whose first delivery across the boundary is lost.
LOST = {5, 6, 17, 30}


async def test_a_redistributed_robust_topic_repairs_what_the_boundary_lost(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with (
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("p1", "p2")) as mesh,
        contextlib.AsyncExitStack() as stack,
    ):
        # redistr.com's local topic is created robust (its own settings) before it is
        # redistributed: its pod first runs without the upstream configured.
        first = PubsubApp(
            PubsubSettings.from_env(mesh.pubsub_env("pr", APEXMESH_PUBSUB_UPSTREAMS=""))
        )
        await first.start()
        try:
            async with endpoint_client(mesh.r.edge_port) as client:
                carol = PubsubClient(await client.attach("carol@redistr.com"))
                try:
                    assert (await carol.create_topic(TOPIC, robust=LOCAL)).code == 250
                finally:
                    await carol.aclose()
        finally:
            await first.stop()
        upstream_client = await stack.enter_async_context(endpoint_client(mesh.a.edge_port))
        mike = PubsubClient(await upstream_client.attach("mike@example.com"))
        stack.push_async_callback(mike.aclose)
        assert (await mike.create_topic(TOPIC, robust=UPSTREAM)).code == 250

        redistributor = PubsubApp(PubsubSettings.from_env(mesh.pubsub_env("pr")))
        await redistributor.start()
        stack.push_async_callback(redistributor.stop)
        assert redistributor.service is not None
        links = redistributor.service.robust.sequencing.upstream
        delivered = links.delivery
        lost: list[int] = []

        async def boundary(owned: OwnedTopic, option: Option, payload: bytes, ctype: str) -> None:
            info = robust_from_option(option)
            live = info.gap is None and not info.heartbeat and info.link_seq is not None
            if live and info.source_seq in LOST - set(lost):
                lost.append(info.source_seq or 0)
                return  # lost between the domains
            await delivered(owned, option, payload, ctype)

        links.delivery = boundary  # type: ignore[method-assign]
        upstream_store = mesh.pubsub["p1"].store

        async def redistributing() -> bool:
            view = await upstream_store.read_topic("example.com", TOPIC)
            return REDISTRIBUTOR in view.subscriptions

        await until(redistributing, within=15)
        await subscribed(mesh.pubsub.values(), "example.com", TOPIC, REDISTRIBUTOR)

        dave_client = await stack.enter_async_context(endpoint_client(mesh.r.edge_port))
        dave = RobustClient(await dave_client.attach(str(DAVE)))
        stack.push_async_callback(dave.aclose)
        stub = await dave.follow(TOPIC)
        assert (stub.resolution, stub.heartbeat_ms) == (LOCAL.resolution, LOCAL.heartbeat_ms)
        await dave.subscribe(TOPIC, duration=60)
        await subscribed([redistributor], "redistr.com", TOPIC, DAVE)

        fred_client = await stack.enter_async_context(endpoint_client(mesh.b.edge_port))
        fred = RobustClient(await fred_client.attach("fred@example.com"))
        stack.push_async_callback(fred.aclose)
        for n in range(1, COUNT + 1):
            header = PublishHeader(type=PublishType.UPDATE, item=f"item-{n % 3}")
            assert await fred.publish(TOPIC, f"<q><n>{n}</n></q>".encode(), header) == n

        got = []
        async with asyncio.timeout(scaled(30)):
            while len(got) < COUNT:
                got.append(await dave.next())
        assert [p.payload for p in got] == [f"<q><n>{n}</n></q>".encode() for n in range(1, 31)]
        assert {p.source for p in got} == {Endpoint.parse("fred@example.com")}
        assert [(p.type, p.item) for p in got[:3]] == [
            (PublishType.UPDATE, "item-1"),
            (PublishType.UPDATE, "item-2"),
            (PublishType.UPDATE, "item-0"),
        ]
        assert sorted(lost) == sorted(LOST)
        upstream_stub = links.stub("redistr.com", TOPIC)
        assert upstream_stub is not None
        assert upstream_stub.resolution == UPSTREAM.resolution  # asked of example.com
        assert upstream_stub.stats.link_repairs >= 1
        with pytest.raises(TimeoutError):
            await within(dave.next(), timeout=scaled(1.5))  # no heartbeat published
