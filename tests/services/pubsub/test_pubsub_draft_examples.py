"""Every example exchange of draft-schwartz-apex-pubsub-02, over real TCP against the
running mesh: the operations are sent as the draft prints them, the answers are checked
element by element, and the redistribution example runs across two domains."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.party import DATA_HOPPING, data_hopping_of
from apexmesh.apex.presence import parse_presence
from apexmesh.client.outgoing import XmlContent
from apexmesh.contracts.presence.v1 import presence_pb2, presence_pb2_grpc
from apexmesh.pubsub.elements import Cancel, TopicList
from tests.services.pubsub.conftest import TOPIC, Attach, Party, PubsubMesh, until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SERVICE = "apex=pubsub@example.com"
ALBUM = b'<FavoriteAlbum title="Kind of Blue" />'


async def send_op(party: Party, xml: str, service: str = SERVICE) -> None:
    """Send an operation exactly as the draft prints its data-content."""
    await party.attachment.send(service, XmlContent(xml.encode()))


async def topic_tuples(mesh: PubsubMesh) -> list[str]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{mesh.ports['presence']}") as channel:
        stub = presence_pb2_grpc.PresenceServiceStub(channel)
        answer = await stub.GetPresence(presence_pb2.GetPresenceRequest(publisher=SERVICE))
    if not answer.presence:
        return []
    return [t.destination for t in parse_presence(answer.presence).tuples]


async def test_sections_2_1_to_2_5_and_3(mesh: PubsubMesh, attach: Attach) -> None:
    mike = await attach("mike@example.com", pod="a")
    fred = await attach("fred@example.com", pod="b")
    # 2.1: createtopic, answered by a reply with the same transID.
    await send_op(mike, "<createtopic topic='music.jazz.milesdavis' transID='1' />")
    assert await mike.message() == Reply(code=250, trans_id=1)
    # 4.2 step 3.2: the topic is a tuple of apex=pubsub's presence entry.
    destination = f"apex:apex=pubsub/{TOPIC}@example.com"
    await until(lambda: _has(mesh, destination))
    # 2.3: listtopics -> topiclist.
    await send_op(mike, "<listtopics />")
    assert await mike.message() == TopicList(topics=(TOPIC,))
    # 2.4: subscribe.
    await send_op(
        mike,
        "<subscribe subscriber='mike@example.com' topic='music.jazz.milesdavis'"
        " duration='9999999' transID='3' />",
    )
    assert await mike.message() == Reply(code=250, trans_id=3)
    # 3 / 4.1: data to the topic, both forms of section 4.1 (inline and cid:).
    await fred.attachment.send(f"apex=pubsub/{TOPIC}@example.com", XmlContent(ALBUM))
    topic, received = await mike.publication()
    assert topic == TOPIC
    assert received.content == ALBUM  # content untouched
    assert received.originator == Endpoint.parse(f"apex=pubsub/{TOPIC}@example.com")
    assert received.recipients == (Endpoint.parse("mike@example.com"),)
    (option,) = received.options
    assert option.internal == DATA_HOPPING
    assert option.must_understand
    assert data_hopping_of(option).report_errors
    await fred.attachment.send(
        f"apex=pubsub/{TOPIC}@example.com", ALBUM, content_type="application/beep+xml"
    )
    _, received = await mike.publication()
    assert received.content == ALBUM
    assert received.data.content.startswith("cid:")
    # 2.5: cancel by the subscriber.
    await send_op(mike, "<cancel topic='music.jazz.milesdavis' transID='4' />")
    assert await mike.message() == Reply(code=250, trans_id=4)
    await fred.attachment.send(f"apex=pubsub/{TOPIC}@example.com", XmlContent(b"<after />"))
    with pytest.raises(TimeoutError):
        await mike.publication(within=0.5)
    # 2.2: deletetopic; the tuple goes (4.3 step 3.2).
    await send_op(mike, "<deletetopic topic='music.jazz.milesdavis' transID='2' />")
    assert await mike.message() == Reply(code=250, trans_id=2)
    await until(lambda: _has(mesh, destination, present=False))


async def _has(mesh: PubsubMesh, destination: str, *, present: bool = True) -> bool:
    return (destination in await topic_tuples(mesh)) is present


async def test_section_2_5_cancel_by_the_service(mesh: PubsubMesh, attach: Attach) -> None:
    mike = await attach("mike@example.com", pod="b")
    assert await mike.pubsub.create_topic("news") == Reply(code=250, trans_id=1)
    await send_op(
        mike, "<subscribe subscriber='mike@example.com' topic='news' duration='1' transID='99' />"
    )
    assert await mike.message() == Reply(code=250, trans_id=99)
    # The lease ends: the service sends the cancel, echoing the subscribe's transID.
    assert await mike.message(within=5) == Cancel(
        topic="news", trans_id=99, subscriber=Endpoint.parse("mike@example.com")
    )


async def test_section_2_6_redistribution(mesh: PubsubMesh, attach: Attach) -> None:
    mike = await attach("mike@example.com", pod="a")
    bob = await attach("bob@redistr.com", pod="r", domain="example.com")
    fred = await attach("fred@example.com", pod="b")
    assert await mike.pubsub.create_topic(TOPIC) == Reply(code=250, trans_id=1)
    # redistr.com's server subscribes as apex=pubsub/TOPIC@redistr.com (its leader
    # renews at half-life; the first try may have met no topic yet).
    redistributor = Endpoint.parse(f"apex=pubsub/{TOPIC}@redistr.com")
    store = mesh.pubsub["p1"].store

    async def subscribed() -> bool:
        view = await store.read_topic("example.com", TOPIC)
        return redistributor in view.subscriptions

    await until(subscribed, within=10)
    # A later subscriber from redistr.com is forwarded to it (4.5 step 4) and answered
    # by it; the redistributing server keeps the subscription.
    await send_op(
        bob,
        f"<subscribe subscriber='bob@redistr.com' topic='{TOPIC}' duration='60' transID='5' />",
    )
    answer = await bob.message()
    assert answer == Reply(code=250, trans_id=5)
    view = await store.read_topic("example.com", TOPIC)
    assert Endpoint.parse("bob@redistr.com") not in view.subscriptions
    downstream = await mesh.pubsub["pr"].store.read_topic("redistr.com", TOPIC)
    assert Endpoint.parse("bob@redistr.com") in downstream.subscriptions
    # Data published at example.com reaches bob through redistr.com, hop count reduced.
    await mike.pubsub.subscribe(TOPIC, duration=60)
    await fred.attachment.send(f"apex=pubsub/{TOPIC}@example.com", XmlContent(ALBUM))
    topic, at_bob = await bob.publication()
    assert topic == TOPIC
    assert at_bob.content == ALBUM
    assert at_bob.originator == redistributor
    (option,) = at_bob.options
    assert data_hopping_of(option).no_more_than < 8
    _, at_mike = await mike.publication()
    assert at_mike.content == ALBUM
    # Cancel from redistr.com is forwarded too (4.6 step 3).
    await send_op(bob, f"<cancel topic='{TOPIC}' transID='6' />")
    assert await bob.message() == Reply(code=250, trans_id=6)
    downstream = await mesh.pubsub["pr"].store.read_topic("redistr.com", TOPIC)
    assert Endpoint.parse("bob@redistr.com") not in downstream.subscriptions
    await asyncio.sleep(0)
