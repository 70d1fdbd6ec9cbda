"""Every step and reply code of draft-schwartz-apex-pubsub-02 sections 4.2 to 4.7 reached
over real TCP through the relays: one table row per step, run in order against one mesh
(later rows rely on what earlier rows created). Section 4.5 step 4 and 4.6 step 3
(forwarding to a redistributing server) are in test_pubsub_draft_examples.py."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from apexmesh.apex.elements import Reply
from apexmesh.client import PubsubError
from apexmesh.pubsub.elements import TopicList
from tests.services.pubsub.conftest import Attach, Party, PubsubMesh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@dataclass(frozen=True)
class Row:
    step: str
    who: str
    xml: str
    #: The reply code expected, or a topiclist's topics.
    expect: int | tuple[str, ...]


ROWS = (
    Row("4.2/1", "dino", "<createtopic topic='news' transID='1' />", 537),
    Row("4.2/3", "mike", "<createtopic topic='news' transID='2' />", 250),
    # Not its creator: from mike it would modify it (draft-wyman 6.2.2).
    Row("4.2/2", "fred", "<createtopic topic='news' transID='3' />", 553),
    Row("4.4/1", "dino", "<listtopics transID='4' />", 537),
    Row("4.4/2", "mike", "<listtopics transID='5' />", ("news",)),
    Row(
        "4.5/1",
        "dino",
        "<subscribe subscriber='dino@example.com' topic='news' duration='60' transID='6' />",
        537,
    ),
    Row(
        "4.5/2",
        "mike",
        "<subscribe subscriber='mike@example.com' topic='sports' duration='60' transID='7' />",
        553,
    ),
    Row(
        "4.5/3",
        "mike",
        "<subscribe subscriber='mike@example.com' topic='news' duration='0' transID='8' />",
        553,
    ),
    Row(
        "4.5/3 negative",
        "mike",
        "<subscribe subscriber='mike@example.com' topic='news' duration='-1' transID='9' />",
        553,
    ),
    Row(
        "4.5/5",
        "mike",
        "<subscribe subscriber='mike@example.com' topic='news' duration='60' transID='10' />",
        250,
    ),
    Row(
        "4.5/5 renew",
        "mike",
        "<subscribe subscriber='mike@example.com' topic='news' duration='120' transID='11' />",
        250,
    ),
    Row("4.6/1", "dino", "<cancel topic='news' transID='12' />", 537),
    Row("4.6/2", "mike", "<cancel topic='sports' transID='13' />", 553),
    Row("4.3/1", "dino", "<deletetopic topic='news' transID='14' />", 537),
    Row("4.3/2", "mike", "<deletetopic topic='sports' transID='15' />", 553),
    Row("500", "mike", "<createtopic topic='x' transID='16'", 500),
    Row("501 unknown", "mike", "<publish topic='news' transID='17' />", 501),
    Row("501 missing", "mike", "<createtopic transID='18' />", 501),
    Row("553 topic", "mike", "<createtopic topic='Not.A.Topic' transID='19' />", 553),
    Row(
        "553 endpoint",
        "mike",
        "<subscribe subscriber='nobody' topic='news' duration='5' transID='20' />",
        553,
    ),
)


async def _answer(party: Party, xml: str) -> int | tuple[str, ...]:
    # As a MIME part (section 4.1's cid: form): the SDK would refuse to inline bad XML.
    await party.attachment.send(
        "apex=pubsub@example.com", xml.encode(), content_type="application/beep+xml"
    )
    message = await party.message()
    if isinstance(message, TopicList):
        return message.topics
    assert isinstance(message, Reply)
    return message.code


async def _publish_code(party: Party, topic: str) -> int:
    """Section 4.7.1's answer to the relay, as the publisher's statusResponse shows it:
    ``publish`` confirms by default, and raises PubsubError with the code unless 250."""
    try:
        await party.pubsub.publish(topic, b"payload")
    except PubsubError as refused:
        return refused.code
    return 250


async def test_every_step_and_code(mesh: PubsubMesh, attach: Attach) -> None:
    party = {
        "mike": await attach("mike@example.com", pod="a"),
        "dino": await attach("dino@example.com", pod="b"),
        "slate": await attach("mr.slate@example.com", pod="b"),
        "fred": await attach("fred@example.com", pod="b"),
    }
    seen = {row.step: await _answer(party[row.who], row.xml) for row in ROWS}
    assert seen == {row.step: row.expect for row in ROWS}
    # 4.7.1: 550 for an unknown topic, 537 without core:data, ok then forwarding.
    assert await _publish_code(party["slate"], "sports") == 550
    assert await _publish_code(party["slate"], "news") == 537
    assert await _publish_code(party["dino"], "news") == 537
    assert await _publish_code(party["mike"], "news") == 250
    topic, received = await party["mike"].publication()
    assert (topic, received.content) == ("news", b"payload")
    # 4.6/4 then 4.3/3 (a deleted topic's subscribers get a cancel).
    assert await _answer(party["mike"], "<cancel topic='news' transID='30' />") == 250
    assert (
        await _answer(
            party["mike"],
            "<subscribe subscriber='mike@example.com' topic='news' duration='60' transID='31' />",
        )
        == 250
    )
    assert await _answer(party["mike"], "<deletetopic topic='news' transID='32' />") == 250
    cancel = await party["mike"].message()
    assert cancel.trans_id == 31
    assert await _publish_code(party["mike"], "news") == 550
