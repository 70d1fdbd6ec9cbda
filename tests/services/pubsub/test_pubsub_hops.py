"""dataHopping bounds redistribution (section 3, RFC 3342 section 4): with a hop budget of
1, data forwarded by example.com's pubsub stops at the first domain crossing, so the
redistributing server of redistr.com (and its subscribers) never get it, while local
subscribers do; with 2 it crosses once. A misconfigured tree of servers can therefore
not circulate data."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from apexmesh.aio.tasks import within
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.client.outgoing import XmlContent
from apexmesh.client.pubsub import PubsubClient
from apexmesh.store.keys import Keys
from services.pubsub.app import PubsubApp
from services.pubsub.settings import PubsubSettings
from tests.services.pubsub.conftest import TOPIC, started_mesh, until
from tests.support.mesh import endpoint_client
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.mark.parametrize(("hops", "crosses"), [(1, False), (2, True)])
async def test_hop_budget_stops_data_at_the_crossing(
    redis_server: RedisServer, keys: Keys, tmp_path: Path, hops: int, crosses: bool
) -> None:
    async with (
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("pr",)) as mesh,
        contextlib.AsyncExitStack() as stack,
    ):
        apps = []
        for name in ("p1", "p2"):
            app = PubsubApp(
                PubsubSettings.from_env(mesh.pubsub_env(name, APEXMESH_PUBSUB_HOPS=str(hops)))
            )
            await app.start()
            stack.push_async_callback(app.stop)
            apps.append(app)

        async def attached(endpoint: str, port: int, domain: str | None = None) -> PubsubClient:
            client = await stack.enter_async_context(endpoint_client(port))
            helper = PubsubClient(await client.attach(endpoint), domain=domain)
            stack.push_async_callback(helper.aclose)
            return helper

        mike = await attached("mike@example.com", mesh.a.edge_port)
        fred = await attached("fred@example.com", mesh.b.edge_port)
        bob = await attached("bob@redistr.com", mesh.r.edge_port, domain="redistr.com")
        await mike.create_topic(TOPIC)
        redistributor = Endpoint.parse(f"apex=pubsub/{TOPIC}@redistr.com")

        async def subscribed() -> bool:
            view = await apps[0].store.read_topic("example.com", TOPIC)
            return redistributor in view.subscriptions

        await until(subscribed, within=10)
        assert await mike.subscribe(TOPIC, duration=60) == Reply(code=250, trans_id=2)
        # bob subscribes at redistr.com, fed by example.com (with the default budget he
        # gets example.com's data: test_pubsub_draft_examples.py, section 2.6).
        assert await bob.subscribe(TOPIC, duration=60) == Reply(code=250, trans_id=1)
        await fred.attachment.send(f"apex=pubsub/{TOPIC}@example.com", XmlContent(b"<hop />"))
        _, local = await mike.next_publication()
        assert local.content == b"<hop />"
        if crosses:
            _, remote = await within(bob.next_publication(), timeout=scaled(10))
            assert remote.content == b"<hop />"
            return
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(scaled(1.5)):
                await bob.next_publication()
