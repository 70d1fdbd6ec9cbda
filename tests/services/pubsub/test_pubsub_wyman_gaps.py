"""Draft-wyman-apex-pubsub-00 behaviour issue #29 found missing, over real TCP against
the running mesh (a relay pod and a pubsub pod each for the publisher and the
subscribers, as in test_pubsub_wyman_exchanges.py): topic modification (6.2.2), the
envelope's headers checked (5.2.1), 561 as a reply (5.9.1), messages already expired,
the InRe transID (5.10.1.1), a selector schema without ``class`` on the Topics topic,
the Subscriptions topic's records (6.3, 7.6).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from apexmesh.apex import _dtd
from apexmesh.apex.elements import Reply
from apexmesh.client.errors import PubsubError
from apexmesh.client.outgoing import XmlContent
from apexmesh.pubsub._fields import pubsub_tag
from apexmesh.pubsub.message import message_from
from apexmesh.pubsub.wkt import SUBSCRIPTIONS, TOPICS
from tests.services.pubsub.conftest import LOCAL_SCHEMA_URI, QUOTES, Attach, PubsubMesh
from tests.services.pubsub.test_pubsub_wyman_exchanges import (
    PS,
    create_quotes,
    described,
    quiet,
    quote,
    send_op,
)
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def _description(received_content: bytes) -> str:
    message = message_from(_dtd.parse_root(received_content))
    children = {pubsub_tag(c): c for c in _dtd.element_children(message.content)}
    found = children.get("description")
    return "" if found is None else (found.text or "").strip()


def _from(publisher: str, body: bytes) -> bytes:
    return body.replace(b"quote-service@example.com", publisher.encode())


async def test_6_2_2_the_creator_modifies_its_topic_with_its_announcement(
    mesh: PubsubMesh, attach: Attach
) -> None:
    quotes = await attach("quote-service@example.com", pod="b")
    mike = await attach("mike@example.com", pod="b")
    jade = await attach("jade@example.com", pod="a")
    await create_quotes(quotes)
    await jade.pubsub.select(TOPICS, duration=600, cached=True)
    _, _, received = await jade.pubsub.next_match()
    message_id, revision, name, disposition = described(received)
    assert (name, disposition) == (QUOTES, "publish")
    await jade.pubsub.select(QUOTES, duration=600, selector="net-change-pct > 5.0")
    # The 5.3.1 schema refuses a last-trade that is not a decimal.
    with pytest.raises(PubsubError) as refused:
        await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "9.0", last="eleven")))
    assert refused.value.code == 561
    assert isinstance(await quotes.message(), Reply)  # its 561 reply
    # Someone else's createtopic of the topic is still 553 (4.2 step 2).
    await send_op(mike, f"<createtopic topic='{QUOTES}' transID='2'/>")
    answer = await mike.message()
    assert isinstance(answer, Reply)
    assert answer.code == 553
    # The creator's createtopic modifies it: a new description and no message schema.
    await send_op(
        quotes,
        f"<createtopic topic='{QUOTES}' transID='3'><description>Now free-form.</description>"
        "</createtopic>",
    )
    assert await quotes.message() == Reply(code=250, trans_id=3)
    # 6.2.2: announced with the same message-id and a higher revision.
    _, _, received = await jade.pubsub.next_match()
    modified_id, modified_revision, name, disposition = described(received)
    assert (modified_id, name, disposition) == (message_id, QUOTES, "publish")
    assert modified_revision > revision
    assert _description(received.content) == "Now free-form."
    assert b"message-schema" not in received.content
    # The schema is gone, the subscription stayed: the same message is now delivered.
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "9.0", last="eleven")))
    _, received = await jade.publication()
    assert b"<last-trade>eleven</last-trade>" in received.content
    # A description published to WKT=Topics by the creator modifies it too.
    description = (
        f"<ps:message-content transID='105' content='#Content' {PS}>"
        "<ps:topic>WKT=Topics</ps:topic><ps:publisher>quote-service@example.com</ps:publisher>"
        "<ps:publication-date>2026-11-25T12:15:00Z</ps:publication-date>"
        f"<ps:content Name='Content'><topic-name>{QUOTES}</topic-name>"
        "<disposition>publish</disposition><description>Quotes again.</description>"
        "</ps:content></ps:message-content>"
    ).encode()
    await quotes.pubsub.publish(TOPICS, XmlContent(description))
    assert (await quotes.message()).code == 250  # type: ignore[union-attr]
    _, _, received = await jade.pubsub.next_match()
    again_id, again_revision, _, _ = described(received)
    assert (again_id, _description(received.content)) == (message_id, "Quotes again.")
    assert again_revision > modified_revision
    # A later listing gets the latest revision only.
    fred = await attach("fred@example.com", pod="a")
    await fred.pubsub.select(TOPICS, duration=600, cached=True)
    _, _, received = await fred.pubsub.next_match()
    assert described(received)[:2] == (message_id, again_revision)
    await quiet(fred)


async def test_5_2_1_headers_must_name_the_topic_and_the_publisher(
    mesh: PubsubMesh, attach: Attach
) -> None:
    """Nobody can publish under another publisher's name, so nobody can replace its
    cached message with a higher revision (561, Appendix A)."""
    quotes = await attach("quote-service@example.com", pod="b")
    mike = await attach("mike@example.com", pod="b")
    await create_quotes(quotes)
    original = quote("XMPL", "9.0", message_id=5, revision=0)
    await quotes.pubsub.publish(QUOTES, XmlContent(original))
    forged = quote("XMPL", "-50.0", message_id=5, revision=1)  # names quote-service
    with pytest.raises(PubsubError) as refused:
        await mike.pubsub.publish(QUOTES, XmlContent(forged))
    assert refused.value.code == 561
    assert "publisher header" in refused.value.text
    # 5.9.1: "a reply element having code 561 will be sent to the originator",
    # echoing the message's transID.
    reply = await mike.message()
    assert isinstance(reply, Reply)
    assert (reply.code, reply.trans_id) == (561, 101)
    wrong_topic = quote("XMPL", "1.0").replace(
        f"<ps:topic>{QUOTES}</ps:topic>".encode(), b"<ps:topic>news</ps:topic>"
    )
    with pytest.raises(PubsubError) as elsewhere:
        await quotes.pubsub.publish(QUOTES, XmlContent(wrong_topic))
    assert elsewhere.value.code == 561
    assert "topic header" in elsewhere.value.text
    # The cached message is still quote-service's revision 0.
    jade = await attach("jade@example.com", pod="a")
    await jade.pubsub.select(QUOTES, duration=600, cached=True)
    _, received = await jade.publication()
    assert received.content == original
    await quiet(jade)
    # mike publishing under his own name is fine (its own message-id space).
    await mike.pubsub.publish(QUOTES, XmlContent(_from("mike@example.com", forged)))
    _, received = await jade.publication()
    assert b"<ps:publisher>mike@example.com</ps:publisher>" in received.content


async def test_expired_messages_are_not_delivered_and_inre_carries_the_transid(
    mesh: PubsubMesh, attach: Attach
) -> None:
    quotes = await attach("quote-service@example.com", pod="b")
    jade = await attach("jade@example.com", pod="a")
    await create_quotes(quotes)
    sid = await jade.pubsub.select(QUOTES, duration=600, selector="net-change-pct > 5.0")
    # Already expired when published: answered 250, delivered to nobody, not cached.
    gone = quote("XMPL", "9.0", message_id=8, expiry="2020-01-01T00:00:00Z")
    await quotes.pubsub.publish(QUOTES, XmlContent(gone))
    await quiet(jade)
    later = await attach("fred@example.com", pod="a")
    await later.pubsub.select(QUOTES, duration=600, cached=True)
    await quiet(later)
    # 5.10.1.1: the InRe option carries the message's transID (101), not a constant.
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "9.0")))
    _, ids, received = await jade.pubsub.next_match()
    assert ids == (sid,)
    ((option,),) = received.recipient_options.values()
    assert option.trans_id == 101
    other = quote("XMPL", "9.0").replace(b"transID='101'", b"transID='777'")
    await quotes.pubsub.publish(QUOTES, XmlContent(other))
    _, _, received = await jade.pubsub.next_match()
    ((option,),) = received.recipient_options.values()
    assert option.trans_id == 777


async def test_a_topic_whose_selector_schema_has_no_class_is_announced(
    mesh: PubsubMesh, attach: Attach
) -> None:
    """5.5's ``<selector-schema uri='...'/>`` (the DTD gives it no ``class``): the
    topic's announcement used to fail the Topics topic's schema (561) and was dropped."""
    quotes = await attach("quote-service@example.com", pod="b")
    jade = await attach("jade@example.com", pod="a")
    await jade.pubsub.select(TOPICS, duration=600)
    await send_op(
        quotes,
        f"<createtopic topic='{QUOTES}' transID='1'>"
        f"<selector-schema uri='{LOCAL_SCHEMA_URI}'/></createtopic>",
    )
    assert await quotes.message() == Reply(code=250, trans_id=1)
    _, _, received = await jade.pubsub.next_match()
    assert described(received)[2:] == (QUOTES, "publish")
    assert f"uri='{LOCAL_SCHEMA_URI}'".encode() in received.content
    # And the topic selects by it, with any class the service offers.
    sid = await jade.pubsub.select(QUOTES, duration=600, selector="net-change-pct > 5.0")
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "9.0")))
    _, ids, _ = await jade.pubsub.next_match()
    assert ids == (sid,)


def _record(received_content: bytes) -> dict[str, str]:
    record = message_from(_dtd.parse_root(received_content))
    assert record.envelope.topic == SUBSCRIPTIONS
    return {pubsub_tag(c): (c.text or "").strip() for c in _dtd.element_children(record.content)}


async def test_6_3_records_of_plain_subscriptions_renewals_lease_ends_and_7_6(
    mesh: PubsubMesh, attach: Attach
) -> None:
    fred = await attach("fred@example.com", pod="b")
    jade = await attach("jade@example.com", pod="a")
    await fred.pubsub.create_topic("news")
    await fred.pubsub.create_topic("sports")
    await jade.pubsub.select(SUBSCRIPTIONS, duration=600)
    # A plain (draft-schwartz) subscription has its record too (id 0, no selector).
    await jade.pubsub.subscribe("news", duration=600)
    _, _, received = await jade.pubsub.next_match()
    made = _record(received.content)
    assert (made["topic-name"], made["subscription-id"], made["current-status"]) == (
        "news",
        "0",
        "ACTIVE",
    )
    assert (made["selector"], made["duration"]) == ("", "600")
    # Renewed a second later: subscription-date is still the origination date.
    first = datetime.fromisoformat(made["subscription-date"])
    await until_after(first)
    await jade.pubsub.subscribe("news", duration=900)
    _, _, received = await jade.pubsub.next_match()
    renewed = _record(received.content)
    assert (renewed["duration"], renewed["current-status"]) == ("900", "ACTIVE")
    assert renewed["subscription-date"] == made["subscription-date"]
    # A content-based renewal keeps its date as well.
    sid = await jade.pubsub.select("sports", duration=600, selector="x = 1")
    _, _, received = await jade.pubsub.next_match()
    content_made = _record(received.content)
    await until_after(datetime.fromisoformat(content_made["subscription-date"]))
    assert await jade.pubsub.select("sports", duration=1, selector="x = 1") == sid
    _, _, received = await jade.pubsub.next_match()
    assert _record(received.content)["subscription-date"] == content_made["subscription-date"]
    # Its lease (1 s) ends: an EXPIRED record, with the subscription's selector.
    _, _, received = await jade.pubsub.next_match()
    ended = _record(received.content)
    assert (ended["subscription-id"], ended["current-status"]) == (str(sid), "EXPIRED")
    assert ended["selector"] == "x = 1"
    assert ended["subscription-date"] == content_made["subscription-date"]
    # A plain cancel: CANCELLED.
    await jade.pubsub.cancel("news")
    _, _, received = await jade.pubsub.next_match()
    cancelled = _record(received.content)
    assert (cancelled["topic-name"], cancelled["current-status"]) == ("news", "CANCELLED")
    assert cancelled["subscription-date"] == made["subscription-date"]
    # 7.6: a subscribe naming another subscriber, which that subscriber allowed (jade
    # granted mr.slate pubsub:subscribe in her own entry); fred has no such grant.
    slate = await attach("mr.slate@example.com", pod="b")
    behalf = await slate.pubsub.select(
        SUBSCRIPTIONS,
        duration=600,
        subscriber="jade@example.com",
        selector="topic-name = 'sports'",
    )
    with pytest.raises(PubsubError) as foreign:
        await fred.pubsub.select(SUBSCRIPTIONS, duration=600, subscriber="jade@example.com")
    assert foreign.value.code == 537
    await jade.pubsub.subscribe("sports", duration=600)
    _, ids, received = await jade.pubsub.next_match()
    assert _record(received.content)["subscriber"] == "jade@example.com"
    assert len(ids) == 2
    assert behalf in ids
    await quiet(slate)  # the records go to the subject, never to mr.slate
    await quiet(fred)


async def until_after(when: datetime) -> None:
    """Wait until the wall clock's second is past ``when`` (dates have second precision)."""
    await wait_until(
        lambda: datetime.now(UTC).replace(microsecond=0) > when, 5, every=0.05, what="next second"
    )
