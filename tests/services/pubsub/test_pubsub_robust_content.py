"""Robust and content-based selection on one topic (issue #29; docs/robust.md "Robust
and content-based"), over the running mesh: a robust topic with a message schema, a
subscriber taking everything and one with a selector, both robust. The selector
decides who a publication is numbered for (a subscriber it does not select takes no
number, so its link has no gap), a message that does not conform is 561 (answered and
replied, never sequenced), the selected delivery carries its InRe and its robust
option, and an envelope with a message-id is cached for later ``cached`` subscribers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from apexmesh.apex.endpoint import Endpoint
from apexmesh.client.errors import PubsubError
from apexmesh.client.outgoing import XmlContent
from apexmesh.client.pubsub import subscription_ids
from apexmesh.pubsub.elements import service_endpoint
from apexmesh.pubsub.robust.operations import GapReply, SnapshotRequest
from apexmesh.pubsub.topic_description import SchemaSource, TopicDescription
from apexmesh.store.keys import Keys
from services.pubsub.robust_serving import RobustSettingsReader
from tests.services.pubsub.conftest import until
from tests.services.pubsub.robust_support import publications, subscribed
from tests.services.pubsub.test_pubsub_robust import (
    DOMAIN,
    NEWS,
    SETTINGS,
    _answer,
    _reply,
    _robust_topic,
    robust_mesh,
)
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC = "load"  # seeded: anyone may subscribe and publish
BARNEY = Endpoint.parse("barney@example.com")
WILMA = Endpoint.parse("wilma@example.com")
FRED = Endpoint.parse("fred@example.com")
XS = "xmlns:xs='http://www.w3.org/2001/XMLSchema'"
SCHEMA = (
    f"<xs:element {XS} name='m'><xs:complexType>"
    "<xs:attribute name='x' type='xs:decimal' use='required'/></xs:complexType></xs:element>"
).encode()
PS = "xmlns:ps='http://www.example.com/pubsub'"


def envelope(
    x: str, *, trans_id: int, message_id: int | None = None, publisher: str = "pebbles"
) -> bytes:
    ident = "" if message_id is None else f"<ps:message-id>{message_id}</ps:message-id>"
    body = "<m/>" if x == "" else f"<m x='{x}'/>"
    return (
        f"<ps:message-content transID='{trans_id}' content='#Content' {PS}>"
        f"<ps:topic>{TOPIC}</ps:topic><ps:publisher>{publisher}@example.com</ps:publisher>"
        "<ps:publication-date>2026-12-02T12:00:00Z</ps:publication-date>"
        f"<ps:expiration-date>*</ps:expiration-date>{ident}"
        f"<ps:content Name='Content'>{body}</ps:content></ps:message-content>"
    ).encode()


async def test_a_robust_topic_selects_refuses_and_caches_by_content(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with robust_mesh(redis_server, keys, tmp_path) as mesh:
        owner = await mesh.pubsub("mike", "a")
        op = owner.create_topic_op(TOPIC, robust=SETTINGS)
        settings = dataclasses.replace(
            op.description.settings, message_schema=SchemaSource(inline=SCHEMA)
        )
        await owner.send(dataclasses.replace(op, description=TopicDescription(settings=settings)))
        assert (await _reply(owner)).code == 250
        for pod in ("p1", "p2"):
            app = mesh.mesh.pubsub[pod]

            async def known(app=app) -> bool:  # type: ignore[no-untyped-def]
                reader = RobustSettingsReader()
                return reader(await app.subscribers.topic(DOMAIN, TOPIC)) == SETTINGS

            await until(known)
        barney = await mesh.pubsub("barney", "a")
        wilma = await mesh.pubsub("wilma", "b")
        await barney.subscribe(TOPIC, duration=60)
        sid = await wilma.select(TOPIC, duration=60, selector="x > 5")
        for endpoint in (BARNEY, WILMA):
            await subscribed(mesh.mesh.pubsub.values(), DOMAIN, TOPIC, endpoint)
        pebbles = await mesh.robust("pebbles", "a")
        assert await pebbles.publish(TOPIC, XmlContent(b"<m x='1'/>")) == 1
        assert await pebbles.publish(TOPIC, XmlContent(envelope("9", trans_id=77))) == 2
        # 561 for a message the schema refuses: answered, replied, never sequenced.
        fred = await mesh.pubsub("fred", "b")
        with pytest.raises(PubsubError) as refused:
            await fred.publish(TOPIC, XmlContent(envelope("", trans_id=555, publisher="fred")))
        assert refused.value.code == 561
        reply = await _reply(fred)
        assert (reply.code, reply.trans_id) == (561, 555)
        assert await pebbles.publish(TOPIC, XmlContent(b"<m x='7'/>")) == 3
        seen_b = await publications(barney.next_publication, BARNEY, 3)
        assert [i.source_seq for i, _ in seen_b] == [1, 2, 3]
        seen_w = await publications(wilma.next_publication, WILMA, 2, heartbeats=True)
        got = [(i, r) for i, r in seen_w if not i.heartbeat]
        assert [i.source_seq for i, _ in got] == [2, 3]  # x = 1 was not selected
        # The unselected publication took no number on wilma's link.
        first = next(n for n, (i, _) in enumerate(seen_w) if not i.heartbeat)
        numbers = [i.link_seq or 0 for i, _ in seen_w[first:]]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
        # Each selected delivery names the subscription (InRe), with the envelope's
        # transID when it has one.
        for _info, received in got:
            assert subscription_ids(received, WILMA) == (sid,)
        inre = [o for o in got[0][1].recipient_options[WILMA] if o.internal == "InRe"]
        assert inre[0].trans_id == 77
        # Cached: an envelope with a message-id, replayed to a later cached subscriber.
        cached = envelope("8", trans_id=78, message_id=4)
        assert await pebbles.publish(TOPIC, XmlContent(cached)) == 4
        later = await fred.select(TOPIC, duration=60, selector="x > 5", cached=True)
        _topic, received = await fred.next_publication()
        assert received.content == cached
        assert subscription_ids(received, FRED) == (later,)


async def test_xep_0040_a_snapshot_of_a_topic_without_items_is_answered(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    """XEP 3.1: a snapshot is answered with its count also when there is nothing to
    send (no publication yet, then publications without an item): 0 images."""
    async with robust_mesh(redis_server, keys, tmp_path) as mesh:
        await _robust_topic(mesh, NEWS)
        wilma = await mesh.pubsub("wilma", "b")
        await wilma.subscribe(NEWS, duration=60)
        await subscribed(mesh.mesh.pubsub.values(), DOMAIN, NEWS, WILMA)
        pebbles = await mesh.robust("pebbles", "a")
        for trans_id in (51, 52):
            snap = SnapshotRequest(topic=NEWS, trans_id=trans_id)
            await wilma.attachment.send(service_endpoint(DOMAIN), XmlContent(snap.to_xml()))
            answer = await _answer(wilma)
            assert isinstance(answer, GapReply)
            assert (answer.trans_id, answer.count) == (trans_id, 0)
            if trans_id == 51:  # then one publication without an item: still no image
                assert await pebbles.publish(NEWS, b"no item") == 1
                await publications(wilma.next_publication, WILMA, 1)
