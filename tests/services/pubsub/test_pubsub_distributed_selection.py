"""Distribution of message selection (draft-wyman-apex-pubsub-00 5.7) across two domains
of the mesh, over real TCP: redistr.com's pubsub server redistributes example.com's
``music.jazz.milesdavis`` (draft-schwartz 2.6) with a subscription without a selector,
so it receives everything the topic carries, and selects for its own subscribers; a
content-based subscribe from redistr.com sent to example.com is forwarded there (4.5
step 4) before any class check, so a class example.com does not offer for the topic is
applied downstream; the cancel follows it (4.6 step 3). Each server lists the classes it
applies on its own ``WKT=Topics`` (6.2, 5.5.1)."""

from __future__ import annotations

import pytest

from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.client.errors import PubsubError
from apexmesh.client.outgoing import XmlContent
from apexmesh.pubsub.message import parse_message
from apexmesh.pubsub.wkt import TOPICS
from tests.services.pubsub.conftest import TOPIC, Attach, Party, PubsubMesh, until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

REDISTRIBUTOR = Endpoint.parse(f"apex=pubsub/{TOPIC}@redistr.com")


async def quiet(party: Party, within: float = 0.5) -> None:
    with pytest.raises(TimeoutError):
        await party.publication(within)


async def classes_listed(mesh: PubsubMesh, pod: str, domain: str) -> list[str]:
    """The selector classes ``domain``'s WKT=Topics lists for the topic (its cache)."""
    app = mesh.pubsub[pod]
    for stored in await app.service.selection.messages.live(domain, TOPICS, 0):
        content = parse_message(stored.body, max_octets=1 << 20).content
        if content.findtext("topic-name") == TOPIC:
            return [str(e.get("class")) for e in content.iter("selector-schema")]
    return []


async def test_selection_is_distributed_and_a_class_unknown_upstream_is_applied_downstream(
    mesh: PubsubMesh, attach: Attach
) -> None:
    mike = await attach("mike@example.com", pod="a")
    fred = await attach("fred@example.com", pod="b")
    wilma = await attach("wilma@example.com", pod="a")
    # bob and carol are redistr.com's: bob talks to example.com's service, carol to her
    # own domain's; dave holds a plain subscription at redistr.com.
    bob = await attach("bob@redistr.com", pod="r", domain="example.com")
    carol = await attach("carol@redistr.com", pod="r")
    dave = await attach("dave@redistr.com", pod="r")
    # example.com's topic offers JMS only (5.5: its selector schema names that class).
    await mike.attachment.send(
        "apex=pubsub@example.com",
        XmlContent(
            f"<createtopic topic='{TOPIC}' transID='1'><selector-schema class='JMS'/>"
            "</createtopic>".encode()
        ),
    )
    assert await mike.message() == Reply(code=250, trans_id=1)
    upstream = mesh.pubsub["p1"].store

    async def redistributed() -> bool:
        view = await upstream.read_topic("example.com", TOPIC)
        return REDISTRIBUTOR in view.subscriptions

    await until(redistributed, within=10)
    # Upstream, RFC-2254 is not offered for this topic: 566 to its own domain ...
    with pytest.raises(PubsubError) as refused:
        await mike.pubsub.select(TOPIC, duration=600, selector="(g=1)", selector_class="RFC-2254")
    assert refused.value.code == 566
    # ... but bob's subscribe is forwarded to redistr.com, which applies the class: the
    # reply (and the id) are redistr.com's.
    bob_id = await bob.pubsub.select(
        TOPIC, duration=600, selector="(g=1)", selector_class="RFC-2254"
    )
    downstream = mesh.pubsub["pr"].store
    (held,) = await downstream.subject_subscriptions("redistr.com", bob.attachment.endpoint)
    assert (held.subscription_id, held.selector_class, held.selector) == (
        bob_id,
        "RFC-2254",
        "(g=1)",
    )
    assert await upstream.subject_subscriptions("example.com", bob.attachment.endpoint) == []
    carol_id = await carol.pubsub.select(
        TOPIC, duration=600, selector="(g=2)", selector_class="RFC-2254"
    )
    await dave.pubsub.subscribe(TOPIC, duration=600)
    wilma_id = await wilma.pubsub.select(TOPIC, duration=600, selector="g = 3")
    for g in range(1, 5):
        await fred.pubsub.publish(TOPIC, XmlContent(f"<m g='{g}'/>".encode()))
    # Upstream selects for its own subscriber ...
    topic, ids, got = await wilma.pubsub.next_match()
    assert (topic, ids, got.content) == (TOPIC, (wilma_id,), b"<m g='3'/>")
    # ... and sends redistr.com everything (its subscription has no selector): dave, a
    # plain subscriber there, gets all four, through the redistributing server.
    for g in range(1, 5):
        _, ids, got = await dave.pubsub.next_match()
        assert (ids, got.content, got.originator) == ((), f"<m g='{g}'/>".encode(), REDISTRIBUTOR)
    # redistr.com selects for bob and carol, with its own ids in the InRe.
    _, ids, got = await bob.pubsub.next_match()
    assert (ids, got.content, got.originator) == ((bob_id,), b"<m g='1'/>", REDISTRIBUTOR)
    _, ids, got = await carol.pubsub.next_match()
    assert (ids, got.content) == ((carol_id,), b"<m g='2'/>")
    await quiet(bob)
    await quiet(carol, 0.1)
    await quiet(wilma, 0.1)
    # bob's cancel, sent to example.com, is forwarded too and answered by redistr.com.
    await bob.pubsub.unselect(topic=TOPIC, subscription_id=bob_id)
    assert await downstream.subject_subscriptions("redistr.com", bob.attachment.endpoint) == []
    await fred.pubsub.publish(TOPIC, XmlContent(b"<m g='1'/>"))
    assert (await dave.pubsub.next_match())[2].content == b"<m g='1'/>"
    await quiet(bob)
    # Each server lists the classes it applies to the topic (6.2).
    assert await classes_listed(mesh, "p1", "example.com") == ["JMS"]
    assert sorted(await classes_listed(mesh, "pr", "redistr.com")) == ["JMS", "RFC-2254"]
