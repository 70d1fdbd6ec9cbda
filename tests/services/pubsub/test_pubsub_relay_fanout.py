"""Plain publications fanned out by the relay that took them (services/relay/topics.py),
over real TCP against the running mesh: the subscribers get what the pods would have
sent, the pubsub pods are not asked, and everything that is not plain still goes to
them (content-based topics, data with options, topics that do not exist, publishers
without ``core:data``)."""

from __future__ import annotations

import pytest

from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.party import DATA_HOPPING, data_hopping_of
from apexmesh.client.outgoing import XmlContent
from tests.services.pubsub.conftest import TOPIC as REDISTRIBUTED
from tests.services.pubsub.conftest import Attach, Party, PubsubMesh, until
from tests.support.polling import eventually, scaled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SERVICE = "apex=pubsub@example.com"
#: Not the conftest's TOPIC, which redistr.com redistributes (a subscriber in another
#: domain sends a publication to the pods: test_a_redistributed_topic_goes_to_the_pods).
TOPIC = "news"
TARGET = f"apex=pubsub/{TOPIC}@example.com"


async def op(party: Party, xml: str, trans_id: int) -> None:
    await party.attachment.send(SERVICE, XmlContent(xml.encode()))
    assert await party.message() == Reply(code=250, trans_id=trans_id)


def counts(mesh: PubsubMesh, pod: str) -> tuple[int, int]:
    topics = mesh.relay(pod).router.executor.topics
    assert topics is not None
    return topics.fanned_out, topics.delegated


async def test_a_plain_publication_is_fanned_out_by_its_relay(
    mesh: PubsubMesh, attach: Attach
) -> None:
    mike = await attach("mike@example.com", pod="a")
    wilma = await attach("wilma@example.com", pod="b")
    fred = await attach("fred@example.com", pod="b")
    await op(mike, f"<createtopic topic='{TOPIC}' transID='1' />", 1)
    for who, number in ((mike, 2), (wilma, 3)):
        await op(
            who,
            f"<subscribe subscriber='{who.attachment.endpoint}' topic='{TOPIC}'"
            f" duration='600' transID='{number}' />",
            number,
        )
    before = counts(mesh, "b")
    for index in range(5):
        await fred.attachment.send(TARGET, XmlContent(b"<n i='%d' />" % index))
    for subscriber in (mike, wilma):  # one on this pod, one on the other, in order
        for index in range(5):
            topic, received = await subscriber.publication()
            assert topic == TOPIC
            assert received.content == b"<n i='%d' />" % index
            assert received.originator == Endpoint.parse(TARGET)
            assert received.recipients == (subscriber.attachment.endpoint,)
            (option,) = received.options  # rewritten as section 3 says
            assert option.internal == DATA_HOPPING
            assert data_hopping_of(option).report_errors
    fanned, delegated = counts(mesh, "b")
    assert (fanned - before[0], delegated - before[1]) == (5, 0)


async def test_what_is_not_plain_still_goes_to_the_pubsub_pods(
    mesh: PubsubMesh, attach: Attach
) -> None:
    mike = await attach("mike@example.com", pod="a")
    fred = await attach("fred@example.com", pod="a")
    await op(mike, f"<createtopic topic='{TOPIC}' transID='1' />", 1)
    await op(
        mike,
        f"<subscribe subscriber='mike@example.com' topic='{TOPIC}' duration='600' transID='2' />",
        2,
    )
    before = counts(mesh, "a")
    # With statusRequest: the pods re-originate it (the report is theirs).
    sent = await fred.attachment.send(TARGET, XmlContent(b"<asked />"), status_request=True)
    [report] = await sent.reports(1, timeout=scaled(10))
    assert [int(d.reply.code) for d in report.destinations] == [250]
    _, received = await mike.publication()
    assert received.content == b"<asked />"
    # A topic that does not exist: the pods answer it (550, their diagnostic).
    await fred.attachment.send("apex=pubsub/no.such.topic@example.com", XmlContent(b"<x />"))
    await eventually(lambda: counts(mesh, "a")[1] - before[1] == 1)
    # A draft-wyman envelope is the pods' to cache and select.
    envelope = b"<message-content xmlns='urn:x'><topic>t</topic></message-content>"
    await fred.attachment.send(TARGET, XmlContent(envelope))
    _, received = await mike.publication()
    fanned, delegated = counts(mesh, "a")
    assert fanned == before[0]
    assert delegated - before[1] == 2  # the missing topic and the envelope
    # And a plain one right after is the relay's again.
    await fred.attachment.send(TARGET, XmlContent(b"<plain />"))
    _, received = await mike.publication()
    assert received.content == b"<plain />"
    assert counts(mesh, "a")[0] == fanned + 1


async def test_a_redistributed_topic_goes_to_the_pods(mesh: PubsubMesh, attach: Attach) -> None:
    """redistr.com's server subscribes to the conftest's topic: its publications are the
    pods' to re-originate, with their hop budget (test_pubsub_hops.py)."""
    mike = await attach("mike@example.com", pod="a")
    fred = await attach("fred@example.com", pod="a")
    await op(mike, f"<createtopic topic='{REDISTRIBUTED}' transID='1' />", 1)
    await op(
        mike,
        f"<subscribe subscriber='mike@example.com' topic='{REDISTRIBUTED}' duration='600'"
        " transID='2' />",
        2,
    )
    redistributor = Endpoint.parse(f"apex=pubsub/{REDISTRIBUTED}@redistr.com")

    async def subscribed() -> bool:
        view = await mesh.pubsub["p1"].store.read_topic("example.com", REDISTRIBUTED)
        return redistributor in view.subscriptions

    await until(subscribed, within=10)
    before = counts(mesh, "a")
    await fred.attachment.send(f"apex=pubsub/{REDISTRIBUTED}@example.com", XmlContent(b"<far />"))
    _, received = await mike.publication()
    assert received.content == b"<far />"
    fanned, delegated = counts(mesh, "a")
    assert (fanned - before[0], delegated - before[1]) == (0, 1)
