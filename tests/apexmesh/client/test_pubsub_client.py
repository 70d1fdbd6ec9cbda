"""The SDK's pubsub helpers: message sorting (unit) and the helpers against the running
mesh (create, list, subscribe with renewal, publish, cancel) over real TCP."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from apexmesh.apex.data import Data, DataContent, Originator, Recipient
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.client import PubsubClient
from apexmesh.client.pubsub import publication_topic, pubsub_message
from apexmesh.client.received import ReceivedData
from apexmesh.pubsub.elements import TopicList
from apexmesh.store.keys import Keys
from tests.services.pubsub.conftest import started_mesh
from tests.support.mesh import endpoint_client
from tests.support.redis_server import RedisServer


def _received(originator: str, content: bytes) -> ReceivedData:
    data = Data(
        content="#Content",
        originator=Originator(identity=Endpoint.parse(originator)),
        recipients=(Recipient(identity=Endpoint.parse("mike@example.com")),),
        data_content=DataContent(name="Content", content=content),
    )
    return ReceivedData(
        originator=data.originator.identity,
        recipients=(Endpoint.parse("mike@example.com"),),
        content=content,
        content_type="application/beep+xml",
        options=(),
        data=data,
    )


@pytest.mark.unit
def test_messages_are_sorted_by_originator() -> None:
    reply = _received("apex=pubsub@example.com", b"<reply code='250' transID='1' />")
    assert pubsub_message(reply) == Reply(code=250, trans_id=1)
    assert publication_topic(reply) is None
    listing = _received("apex=pubsub@example.com", b"<topiclist><topic name='a' /></topiclist>")
    assert pubsub_message(listing) == TopicList(topics=("a",))
    data = _received("apex=pubsub/a.b@example.com", b"<reply code='250' transID='1' />")
    assert pubsub_message(data) is None  # publications are never service messages
    assert publication_topic(data) == "a.b"
    other = _received("fred@example.com", b"<cancel topic='a' transID='1' />")
    assert pubsub_message(other) is None
    assert publication_topic(other) is None


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_helpers_against_the_mesh(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with (
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("p1", "p2")) as mesh,
        endpoint_client(mesh.a.edge_port) as client_a,
        endpoint_client(mesh.b.edge_port) as client_b,
    ):
        mike = PubsubClient(await client_a.attach("mike@example.com"))
        fred = PubsubClient(await client_b.attach("fred@example.com"))
        try:
            assert await mike.create_topic("sports") == Reply(code=250, trans_id=1)
            assert await fred.list_topics() == ("sports",)
            # keep_subscribed renews at half-life: the lease of 1 s is still there later.
            lease = mike.keep_subscribed("sports", duration=1)
            first = await asyncio.wait_for(mike.next_message(), timeout=5)
            assert isinstance(first, Reply)
            assert first.code == 250
            await asyncio.sleep(1.6)
            await fred.publish("sports", b"goal")
            topic, received = await asyncio.wait_for(mike.next_publication(), timeout=5)
            assert (topic, received.content) == ("sports", b"goal")
            lease.cancel()
            answer = await mike.cancel("sports")
            assert isinstance(answer, Reply)
            assert answer.code == 250
            await fred.publish("sports", b"late")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(mike.next_publication(), timeout=0.5)
            deleted = await fred.delete_topic("sports")
            assert isinstance(deleted, Reply)
            assert deleted.code == 250
            assert await fred.list_topics() == ()
        finally:
            await mike.aclose()
            await fred.aclose()
