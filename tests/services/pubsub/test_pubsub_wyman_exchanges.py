"""The example exchanges of draft-wyman-apex-pubsub-00 over real TCP against the running
mesh (two relay pods, a pubsub pod behind each: subscribe through one, publish through
the other, so every subscription reaches the publishing pod by the event log).

The draft's elements are sent as printed (with the repairs named in
tests/apexmesh/pubsub/test_pubsub_wyman_examples.py); the service allocates the
subscription ids (the draft's 100, 101 are examples), so the ids are checked by what
they identify.
"""

from __future__ import annotations

import re

import pytest

from apexmesh.apex import _dtd
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.client.errors import PubsubError
from apexmesh.client.outgoing import XmlContent
from apexmesh.client.received import ReceivedData
from apexmesh.pubsub._fields import pubsub_tag
from apexmesh.pubsub.inre import INRE
from apexmesh.pubsub.message import message_from
from apexmesh.pubsub.subscription_elements import ContentCancel, SubscriptionReply
from apexmesh.pubsub.wkt import SUBSCRIPTIONS, TOPICS
from tests.apexmesh.pubsub.test_pubsub_wyman_examples import (
    CANCEL_5_8_2,
    MESSAGE_5_2,
    MESSAGE_SCHEMA_5_3_1,
    SELECTOR_JMS,
    SELECTOR_RFC_2254,
    SUBSCRIBE_5_8,
)
from tests.services.pubsub.conftest import QUOTES, Attach, Party, PubsubMesh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

SERVICE = "apex=pubsub@example.com"
#: 5.2's message as printed expires on 2003-03-15: published today it is no longer
#: valid and delivered to nobody (5.2.1; issue #29). The same message, a century later.
LIVE_5_2 = MESSAGE_5_2.replace(b"2003-03-15T12:15:00-08:00", b"2103-03-15T12:15:00-08:00")
PS = "xmlns:ps='http://www.example.com/pubsub'"


async def send_op(party: Party, xml: bytes | str) -> None:
    """Send an operation exactly as given (the draft's data-content)."""
    body = xml.encode() if isinstance(xml, str) else xml
    await party.attachment.send(SERVICE, XmlContent(body))


def quote(
    symbol: str,
    pct: str,
    *,
    last: str = "11.0",
    message_id: int | None = None,
    revision: int | None = None,
    expiry: str | None = "*",
) -> bytes:
    """A message of 5.2's shape (the 5.3.1 schema's body)."""
    headers = ""
    if expiry is not None:
        headers += f"<ps:expiration-date>{expiry}</ps:expiration-date>"
    if message_id is not None:
        headers += f"<ps:message-id>{message_id}</ps:message-id>"
    if revision is not None:
        headers += f"<ps:revision-id>{revision}</ps:revision-id>"
    return (
        f"<ps:message-content transID='101' content='#Content' {PS}>"
        f"<ps:topic>{QUOTES}</ps:topic><ps:publisher>quote-service@example.com</ps:publisher>"
        f"<ps:publication-date>2026-11-25T12:15:00Z</ps:publication-date>{headers}"
        f"<ps:content Name='Content'><equity-quote symbol='{symbol}'>"
        f"<issue-name>Example, Inc.</issue-name><last-trade>{last}</last-trade>"
        "<last-trade-datetime>October 18, 2001 11:12:00</last-trade-datetime>"
        f"<net-change-price>1.0</net-change-price><net-change-pct>{pct}</net-change-pct>"
        "<best-bid-price>11.0</best-bid-price><best-ask-price>12.0</best-ask-price>"
        "</equity-quote></ps:content></ps:message-content>"
    ).encode()


def subscribe_xml(trans_id: int, subscriber: str, selector: bytes | None, **extra: str) -> bytes:
    """5.8's subscribe with another selector element (5.6's are used as printed)."""
    cached = "<ps:cached>true</ps:cached>" if extra.get("cached") else ""
    return (
        f"<ps:subscribe transID='{trans_id}' {PS}><ps:topic>{extra.get('topic', QUOTES)}"
        f"</ps:topic><ps:subscriber>{subscriber}</ps:subscriber><ps:duration>86400"
        f"</ps:duration>{cached}".encode()
        + (selector or b"")
        + b"</ps:subscribe>"
    )


async def subscribed(party: Party, trans_id: int) -> int:
    answer = await party.message()
    assert isinstance(answer, SubscriptionReply), answer
    assert (answer.code, answer.trans_id) == (250, trans_id)
    assert answer.subscription_id is not None
    return answer.subscription_id


async def create_quotes(owner: Party, schema: str = MESSAGE_SCHEMA_5_3_1) -> None:
    """6.2.3's createtopic with 5.3.1's message schema (inline)."""
    await send_op(owner, f"<createtopic topic='{QUOTES}' transID='1'>{schema}</createtopic>")
    assert await owner.message() == Reply(code=250, trans_id=1)


async def quiet(party: Party, within: float = 0.5) -> None:
    """Nothing more arrives for ``party`` within ``within`` seconds."""
    with pytest.raises(TimeoutError):
        await party.publication(within)


async def test_5_2_5_6_5_8_5_9_1_and_inre_for_one_recipient(
    mesh: PubsubMesh, attach: Attach
) -> None:
    quotes = await attach("quote-service@example.com", pod="b")
    jade = await attach("jade@example.com", pod="a")
    await create_quotes(quotes)
    # 5.8: the subscribe as printed (cached asked, nothing cached yet); the reply
    # carries the subscription id.
    await send_op(jade, SUBSCRIBE_5_8)
    in_list = await subscribed(jade, 700)
    # 5.6: the same interest in both classes, as two more subscriptions of jade.
    await send_op(jade, subscribe_xml(701, "jade@example.com", SELECTOR_RFC_2254))
    ldap = await subscribed(jade, 701)
    await send_op(jade, subscribe_xml(702, "jade@example.com", SELECTOR_JMS))
    jms = await subscribed(jade, 702)
    assert len({in_list, ldap, jms}) == 3
    # 5.2's message (XMPL, +10 %) satisfies all three: one delivery, InRe naming all
    # three ids (5.10.1.1, one recipient).
    await quotes.pubsub.publish(QUOTES, XmlContent(LIVE_5_2))
    topic, ids, received = await jade.pubsub.next_match()
    assert topic == QUOTES
    assert received.content == LIVE_5_2  # content untouched
    assert ids == tuple(sorted((in_list, ldap, jms)))
    ((option,),) = received.recipient_options.values()
    assert (option.internal, option.must_understand, option.target_hop.value) == (
        INRE,
        False,
        "final",
    )
    # +1 % matches nothing; TEST -6 % only 5.8's IN list.
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "1.0")))
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("TEST", "-6.0")))
    _, ids, received = await jade.pubsub.next_match()
    assert ids == (in_list,)
    assert b"symbol='TEST'" in received.content
    await quiet(jade)
    # 5.9.1: a message that does not conform to the topic's schema is refused with 561
    # and the validator's first error, and delivered to nobody.
    with pytest.raises(PubsubError) as refused:
        await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "9.0", last="eleven")))
    assert refused.value.code == 561
    assert "last-trade" in refused.value.text
    await quiet(jade)


async def test_5_8_1_codes_5_8_2_cancels_and_inre_for_two_recipients(
    mesh: PubsubMesh, attach: Attach
) -> None:
    quotes = await attach("quote-service@example.com", pod="b")
    user1 = await attach("user1@example.com", pod="a")
    user2 = await attach("user2@example.com", pod="b")
    await create_quotes(quotes)
    # 5.8.1: a class the service does not offer is 566, a selector that does not parse
    # (or names what the selector schema does not allow) 567.
    xpath = b"<ps:selector class='XPath'>//equity-quote</ps:selector>"
    await send_op(user1, subscribe_xml(10, "user1@example.com", xpath))
    answer = await user1.message()
    assert isinstance(answer, Reply)
    assert (answer.code, answer.trans_id) == (566, 10)
    assert "XPath" in answer.text
    with pytest.raises(PubsubError) as bad:
        await user1.pubsub.select(QUOTES, duration=60, selector="symbol = ")
    assert bad.value.code == 567
    # 5.10.1.1 with two recipients: user1 with two matching subscriptions, user2 one.
    first = await user1.pubsub.select(QUOTES, duration=600, selector="symbol = 'XMPL'")
    second = await user1.pubsub.select(
        QUOTES, duration=600, selector="(net-change-pct>=5)", selector_class="RFC-2254"
    )
    other = await user2.pubsub.select(QUOTES, duration=600, selector="net-change-pct > 5")
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "10.0")))
    _, ids1, got1 = await user1.pubsub.next_match()
    _, ids2, got2 = await user2.pubsub.next_match()
    assert ids1 == tuple(sorted((first, second)))
    assert ids2 == (other,)
    # Each recipient sees only its own envelope and InRe (anonymity, 5.10.1).
    assert list(got1.recipient_options) == [Endpoint.parse("user1@example.com")]
    assert list(got2.recipient_options) == [Endpoint.parse("user2@example.com")]
    # 5.8.2, the four forms. Topic and id (as printed, with user1's id):
    printed = re.sub(
        rb"<ps:subscription-id>100<", f"<ps:subscription-id>{first}<".encode(), CANCEL_5_8_2
    )
    await send_op(user1, printed)
    assert await user1.message() == Reply(code=250, trans_id=102)
    # the same again: nothing left to cancel, 568.
    await send_op(user1, printed)
    answer = await user1.message()
    assert isinstance(answer, Reply)
    assert (answer.code, answer.trans_id) == (568, 102)
    # id only:
    await user1.pubsub.unselect(subscription_id=second)
    # topic only (user2's one subscription):
    await user2.pubsub.unselect(topic=QUOTES)
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "10.0")))
    await quiet(user1)
    await quiet(user2, 0.1)
    # neither: every subscription of the subject, whatever its topic.
    again = await user1.pubsub.select(QUOTES, duration=600)
    more = await user1.pubsub.select(QUOTES, duration=600, selector="symbol = 'TEST'")
    assert again != more
    await user1.pubsub.unselect()
    with pytest.raises(PubsubError) as none_left:
        await user1.pubsub.unselect()
    assert none_left.value.code == 568
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("TEST", "10.0")))
    await quiet(user1)


async def test_cached_messages_replayed_through_the_selector(
    mesh: PubsubMesh, attach: Attach
) -> None:
    quotes = await attach("quote-service@example.com", pod="b")
    await create_quotes(quotes)
    # Cached: message-id 7 (revision 0, then 1 replacing it), 8 (TEST); not cached:
    # expiration 0, an expired date, no message-id.
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "1.0", message_id=7, revision=0)))
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "2.0", message_id=7, revision=1)))
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "3.0", message_id=7, revision=0)))
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("TEST", "4.0", message_id=8)))
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "5.0", message_id=9, expiry="0")))
    expired = quote("XMPL", "6.0", message_id=10, expiry="2003-03-15T12:15:00-08:00")
    await quotes.pubsub.publish(QUOTES, XmlContent(expired))
    await quotes.pubsub.publish(QUOTES, XmlContent(quote("XMPL", "7.0")))
    jade = await attach("jade@example.com", pod="a")
    sid = await jade.pubsub.select(QUOTES, duration=600, selector="symbol = 'XMPL'", cached=True)
    _, ids, received = await jade.pubsub.next_match()
    assert ids == (sid,)
    assert b"<net-change-pct>2.0<" in received.content  # the higher revision only
    await quiet(jade)
    # Without cached, nothing is replayed.
    fred = await attach("fred@example.com", pod="b")
    await fred.pubsub.select(QUOTES, duration=600)
    await quiet(fred)


async def test_lease_end_cancels_the_subscription_by_id(mesh: PubsubMesh, attach: Attach) -> None:
    quotes = await attach("quote-service@example.com", pod="b")
    await create_quotes(quotes)
    jade = await attach("jade@example.com", pod="a")
    sid = await jade.pubsub.select(QUOTES, duration=1, selector="symbol = 'XMPL'")
    message = await jade.message(within=10)
    assert message == ContentCancel(
        trans_id=message.trans_id or 0,
        topic=QUOTES,
        subscription_id=sid,
        subscriber=Endpoint.parse("jade@example.com"),
    )


def described(received: ReceivedData) -> tuple[int, int, str, str]:
    """(message-id, revision, topic-name, disposition) of a Topics-topic message."""
    message = message_from(_dtd.parse_root(received.content))
    children = {pubsub_tag(c): c for c in _dtd.element_children(message.content)}
    envelope = message.envelope
    assert envelope.topic == TOPICS
    assert envelope.publisher == SERVICE
    return (
        envelope.message_id or 0,
        envelope.revision,
        (children["topic-name"].text or "").strip(),
        (children["disposition"].text or "").strip(),
    )


async def test_6_2_topics_listing_updates_and_createtopic(mesh: PubsubMesh, attach: Attach) -> None:
    quotes = await attach("quote-service@example.com", pod="b")
    mike = await attach("mike@example.com", pod="b")
    jade = await attach("jade@example.com", pod="a")
    await create_quotes(quotes)
    # 6.2.1: subscribing to the Topics topic with cached lists the topics.
    await jade.pubsub.select(TOPICS, duration=600, cached=True)
    _, _, received = await jade.pubsub.next_match()
    quotes_id, _, name, disposition = described(received)
    assert (name, disposition) == (QUOTES, "publish")
    assert b"</message-schema>" in received.content  # the description carries the schema
    await quiet(jade)
    # 6.2.2: a topic created, then cancelled: same message-id, higher revision.
    await mike.pubsub.create_topic("news.extra")
    _, _, received = await jade.pubsub.next_match()
    made_id, made_revision, name, disposition = described(received)
    assert (name, disposition) == ("news.extra", "publish")
    assert made_id != quotes_id
    await mike.pubsub.delete_topic("news.extra")
    _, _, received = await jade.pubsub.next_match()
    gone_id, gone_revision, name, disposition = described(received)
    assert (gone_id, name, disposition) == (made_id, "news.extra", "cancel")
    assert gone_revision > made_revision
    # 6.2: a topic created by publishing its description to the Topics topic.
    description = (
        f"<ps:message-content transID='105' content='#Content' {PS}>"
        "<ps:topic>WKT=Topics</ps:topic><ps:publisher>mike@example.com</ps:publisher>"
        "<ps:publication-date>2026-11-25T12:15:00Z</ps:publication-date>"
        "<ps:content Name='Content'><topic-name>sports.extra</topic-name>"
        "<disposition>publish</disposition><description>Scores.</description>"
        "</ps:content></ps:message-content>"
    ).encode()
    await mike.pubsub.publish(TOPICS, XmlContent(description))
    created = await mike.message()  # the createtopic it made is answered as one
    assert isinstance(created, Reply)
    assert created.code == 250
    _, _, received = await jade.pubsub.next_match()
    assert described(received)[2:] == ("sports.extra", "publish")
    assert await mike.pubsub.list_topics() == (QUOTES, "sports.extra")  # no WKT= names
    # A later listing: the live topics only, each once.
    fred = await attach("fred@example.com", pod="a")
    await fred.pubsub.select(TOPICS, duration=600, cached=True)
    listed = set()
    for _ in range(2):
        _, _, received = await fred.pubsub.next_match()
        listed.add(described(received)[2:])
    assert listed == {(QUOTES, "publish"), ("sports.extra", "publish")}
    await quiet(fred)
    # Reserved: the Topics topic cannot be created or deleted by anyone.
    with pytest.raises(PubsubError) as reserved:
        await mike.pubsub.delete_topic(TOPICS)
    assert reserved.value.code == 553


async def test_6_3_subscriptions_topic_shows_only_ones_own(
    mesh: PubsubMesh, attach: Attach
) -> None:
    quotes = await attach("quote-service@example.com", pod="b")
    await create_quotes(quotes)
    jade = await attach("jade@example.com", pod="a")
    fred = await attach("fred@example.com", pod="b")
    await jade.pubsub.select(SUBSCRIPTIONS, duration=600)
    await fred.pubsub.select(SUBSCRIPTIONS, duration=600)
    # 6.3.1: subscribing for someone else's records is refused.
    with pytest.raises(PubsubError) as foreign:
        await fred.pubsub.select(SUBSCRIPTIONS, duration=600, subscriber="jade@example.com")
    assert foreign.value.code == 537
    sid = await jade.pubsub.select(QUOTES, duration=600, selector="net-change-pct > 5.0")
    _, _, received = await jade.pubsub.next_match()
    record = message_from(_dtd.parse_root(received.content))
    fields = {pubsub_tag(c): (c.text or "").strip() for c in _dtd.element_children(record.content)}
    assert record.envelope.topic == SUBSCRIPTIONS
    assert fields["subscriber"] == "jade@example.com"
    assert fields["subscription-id"] == str(sid)
    assert fields["topic-name"] == QUOTES
    assert fields["selector"] == "net-change-pct > 5.0"
    assert fields["current-status"] == "ACTIVE"
    await quiet(fred)  # fred's default selector: subscriber = 'fred@example.com'
    await fred.pubsub.select(QUOTES, duration=600, selector="symbol = 'XMPL'")
    _, _, received = await fred.pubsub.next_match()
    assert b"<subscriber>fred@example.com</subscriber>" in received.content
    await quiet(jade)
    # A later cached subscription lists one's own records only.
    await jade.pubsub.select(SUBSCRIPTIONS, duration=600, cached=True)
    _, _, received = await jade.pubsub.next_match()
    assert received.content.count(b"<subscriber>") == 1
    assert b"<subscriber>jade@example.com</subscriber>" in received.content
    assert f"<subscription-id>{sid}</subscription-id>".encode() in received.content
    await quiet(jade)


async def test_5_8_2_cancels_naming_no_topic_end_plain_subscriptions_too(
    mesh: PubsubMesh, attach: Attach
) -> None:
    """5.8.2: a cancel "containing neither a topic name nor a subscription identifier"
    cancels "all outstanding subscriptions to all topics from the subscriber endpoint":
    its draft-schwartz subscriptions as well as its content-based ones. A cancel naming
    an id covers only that subscription (a plain one has no id)."""
    fred = await attach("fred@example.com", pod="b")
    mike = await attach("mike@example.com", pod="a")
    for topic in ("news", "sports"):
        await fred.pubsub.create_topic(topic)
        await mike.pubsub.subscribe(topic, duration=600)  # plain
    tagged = await mike.pubsub.select("news", duration=600, selector="x = 1")
    await mike.pubsub.unselect(subscription_id=tagged)  # that one only
    await fred.pubsub.publish("news", XmlContent(b"<m x='1'/>"))
    topic, ids, _ = await mike.pubsub.next_match()
    assert (topic, ids) == ("news", ())  # the plain subscription still runs
    await mike.pubsub.unselect()  # neither topic nor id
    store = mesh.pubsub["p1"].store
    for topic in ("news", "sports"):
        view = await store.read_topic("example.com", topic)
        assert Endpoint.parse("mike@example.com") not in view.subscriptions
        await fred.pubsub.publish(topic, XmlContent(b"<m x='1'/>"))
    await quiet(mike)
    with pytest.raises(PubsubError) as none_left:
        await mike.pubsub.unselect()
    assert none_left.value.code == 568
