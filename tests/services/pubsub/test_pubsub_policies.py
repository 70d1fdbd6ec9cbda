"""Section 7's policies through the access service: "only subscribers publish" (the
service grants core:data on subscribe and removes it on cancel), and a publisher
excluded by an entry without actions."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from apexmesh.apex.elements import Reply
from apexmesh.client import PubsubError
from apexmesh.client.pubsub import PubsubClient
from apexmesh.store.keys import Keys
from services.pubsub.app import PubsubApp
from services.pubsub.settings import PubsubSettings
from tests.services.pubsub.conftest import started_mesh
from tests.support.mesh import endpoint_client
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

TOPIC = "only.subscribers"


async def _code(helper: PubsubClient, content: bytes) -> int:
    try:
        await helper.publish(TOPIC, content)
    except PubsubError as refused:
        return refused.code
    return 250


async def test_only_subscribers_publish(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with (
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=()) as mesh,
        contextlib.AsyncExitStack() as stack,
    ):
        for name in ("p1", "p2"):
            app = PubsubApp(
                PubsubSettings.from_env(mesh.pubsub_env(name, APEXMESH_PUBSUB_GRANT_DATA="1"))
            )
            await app.start()
            stack.push_async_callback(app.stop)
        mike = PubsubClient(
            await (await stack.enter_async_context(endpoint_client(mesh.a.edge_port))).attach(
                "mike@example.com"
            )
        )
        fred = PubsubClient(
            await (await stack.enter_async_context(endpoint_client(mesh.b.edge_port))).attach(
                "fred@example.com"
            )
        )
        stack.push_async_callback(mike.aclose)
        stack.push_async_callback(fred.aclose)
        # fred creates the topic, so he owns it (core:data included); anyone may
        # subscribe to it, nobody else holds core:data on it.
        assert await fred.create_topic(TOPIC) == Reply(code=250, trans_id=1)
        assert await fred.subscribe(TOPIC, duration=60) == Reply(code=250, trans_id=2)
        assert await _code(mike, b"not a subscriber") == 537
        assert await mike.subscribe(TOPIC, duration=60) == Reply(code=250, trans_id=1)

        # The grant reaches the access service right after the reply.
        async def granted() -> bool:
            return await _code(mike, b"now a subscriber") == 250

        await wait_until(granted, 10, what="core:data granted to the subscriber")
        _, received = await fred.next_publication()
        assert received.content == b"now a subscriber"
        assert await mike.cancel(TOPIC) == Reply(code=250, trans_id=2)

        async def removed() -> bool:
            return await _code(mike, b"gone") == 537

        await wait_until(removed, 10, every=0.05, what="core:data removed on cancel")
