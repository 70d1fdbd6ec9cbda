"""A topic's creator owns it (draft-schwartz-apex-pubsub-02 sections 5.1 and 7): it may
subscribe, publish and grant access on its own topic without an operator adding entries;
and the SDK's pubsub helpers raise typed errors with the service's code, publish
confirming by default."""

from __future__ import annotations

import asyncio

import pytest

from apexmesh.apex.elements import Reply
from apexmesh.client import Audience, PubsubError, XmlContent
from tests.services.pubsub.conftest import Attach, PubsubMesh
from tests.support.polling import scaled

pytestmark = pytest.mark.integration

TOPIC = "fred.own"


def access_set(owner: str, actor: str, actions: str, trans_id: int) -> bytes:
    return (
        f"<set transID='{trans_id}'><access owner='{owner}' actor='{actor}' "
        f"actions='{actions}' /></set>"
    ).encode()


async def test_the_creator_subscribes_publishes_and_grants_on_its_topic(
    mesh: PubsubMesh, attach: Attach
) -> None:
    fred = await attach("fred@example.com", pod="a")
    wilma = await attach("wilma@example.com", pod="b")
    # "the owner only" (by default anyone of example.com could subscribe: issue #29)
    assert await fred.pubsub.create_topic(TOPIC, subscribers=Audience.OWNER) == Reply(
        code=250, trans_id=1
    )
    # no operator entry names this topic: fred's own entry lets him subscribe...
    assert (await fred.pubsub.subscribe(TOPIC, duration=60)).code == 250
    # ... and publish (confirmed: 250 from the topic endpoint)
    await fred.pubsub.publish(TOPIC, b"mine")
    topic, received = await fred.publication()
    assert (topic, received.content) == (TOPIC, b"mine")
    # wilma may not, until fred grants her access through apex=access (RFC 3341 set)
    with pytest.raises(PubsubError) as refused:
        await wilma.pubsub.subscribe(TOPIC, duration=60)
    assert (refused.value.code, refused.value.topic) == (537, TOPIC)
    await fred.attachment.send(
        "apex=access@example.com",
        XmlContent(
            access_set(
                f"apex=pubsub/{TOPIC}@example.com",
                "wilma@example.com",
                "pubsub:subscribe pubsub:cancel",
                9,
            )
        ),
    )
    async with asyncio.timeout(scaled(5)):
        granted = await fred.pubsub.next_other()  # apex=access's reply
    assert b"code='250'" in granted.content or b'code="250"' in granted.content
    assert (await wilma.pubsub.subscribe(TOPIC, duration=60)).code == 250
    with pytest.raises(PubsubError) as no_data:
        await wilma.pubsub.publish(TOPIC, b"not hers")
    assert no_data.value.code == 537


async def test_helpers_raise_the_services_code(mesh: PubsubMesh, attach: Attach) -> None:
    mike = await attach("mike@example.com", pod="a")
    dino = await attach("dino@example.com", pod="b")
    fred = await attach("fred@example.com", pod="a")
    await mike.pubsub.create_topic("typed.errors")
    await fred.pubsub.create_topic("fred.first")
    with pytest.raises(PubsubError) as exists:  # mike's own would modify it (6.2.2)
        await fred.pubsub.create_topic("typed.errors")
    assert (exists.value.code, exists.value.trans_id) == (553, 2)
    with pytest.raises(PubsubError) as denied:
        await dino.pubsub.create_topic("dinos.topic")
    assert denied.value.code == 537
    with pytest.raises(PubsubError) as missing:
        await mike.pubsub.publish("no.such.topic", b"x")
    assert missing.value.code == 550
    # fire-and-forget: no report is awaited, nothing is raised
    sent = await mike.pubsub.publish("no.such.topic", b"x", confirm=False)
    assert sent.status_trans_id is None
    assert (await mike.pubsub.delete_topic("typed.errors")).code == 250
