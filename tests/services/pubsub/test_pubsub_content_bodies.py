"""Bodies that are not the draft's XML, over real TCP against the running mesh
(draft-wyman 7.2 and 7.3: "text processing for the text/* types (e.g. text/html) and
will not process application or binary content types"; apexmesh/pubsub/body.py): a
``text/*`` publication is selected by its text, the text of ``message-content`` by the
default message schema of 5.3.2, in both classes; an ``application/octet-stream`` or
image publication reaches only the subscriptions without a selector, not even those
whose selector is true of a message without identifiers. Subscribed through one pubsub
pod, published through the other."""

from __future__ import annotations

import pytest

from tests.services.pubsub.conftest import Attach, Party, PubsubMesh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

TOPIC = "news"


async def quiet(party: Party, within: float = 0.5) -> None:
    with pytest.raises(TimeoutError):
        await party.publication(within)


async def test_text_bodies_are_searched_as_text_other_types_are_not_processed(
    mesh: PubsubMesh, attach: Attach
) -> None:
    fred = await attach("fred@example.com", pod="b")
    jade = await attach("jade@example.com", pod="a")
    wilma = await attach("wilma@example.com", pod="a")
    barney = await attach("barney@example.com", pod="a")
    mike = await attach("mike@example.com", pod="a")
    await fred.pubsub.create_topic(TOPIC)
    ldap = await jade.pubsub.select(
        TOPIC, duration=600, selector="(message-content=*XMPL*)", selector_class="RFC-2254"
    )
    jms = await jade.pubsub.select(TOPIC, duration=600, selector="message-content LIKE '%up%'")
    absent = await wilma.pubsub.select(
        TOPIC, duration=600, selector="(!(symbol=XMPL))", selector_class="RFC-2254"
    )
    everything = await barney.pubsub.select(TOPIC, duration=600)
    await mike.pubsub.subscribe(TOPIC, duration=600)  # draft-schwartz: everything

    # text/plain: both of jade's selectors, wilma's (no symbol), barney, mike.
    text = "Example, Inc. (XMPL) up 7 %"
    await fred.pubsub.publish(TOPIC, text.encode(), content_type="text/plain")
    _, ids, got = await jade.pubsub.next_match()
    assert ids == tuple(sorted((ldap, jms)))
    assert (got.content, got.content_type) == (text.encode(), "text/plain")
    assert (await wilma.pubsub.next_match())[1] == (absent,)
    assert (await barney.pubsub.next_match())[1] == (everything,)
    assert (await mike.pubsub.next_match())[1] == ()
    # text/html in its charset: markup is text, "up" is in it, "XMPL" is not.
    html = "<p>Société Générale <b>up</b></p>".encode("iso-8859-1")
    await fred.pubsub.publish(TOPIC, html, content_type="text/html; charset=iso-8859-1")
    _, ids, got = await jade.pubsub.next_match()
    assert (ids, got.content) == ((jms,), html)
    assert (await wilma.pubsub.next_match())[1] == (absent,)
    assert (await barney.pubsub.next_match())[1] == (everything,)
    assert (await mike.pubsub.next_match())[2].content == html
    # application/octet-stream is not processed, whatever it holds: XMPL and up are in
    # it, and wilma's selector is true of a message without identifiers, yet only the
    # subscriptions without a selector receive it.
    octets = b"Example, Inc. (XMPL) up 7 %"
    await fred.pubsub.publish(TOPIC, octets)
    _, ids, got = await barney.pubsub.next_match()
    assert (ids, got.content, got.content_type) == (
        (everything,),
        octets,
        "application/octet-stream",
    )
    assert (await mike.pubsub.next_match())[2].content == octets
    await quiet(jade)
    await quiet(wilma, 0.1)
