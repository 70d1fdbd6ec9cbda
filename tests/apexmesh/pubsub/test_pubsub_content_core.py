"""The content-based decisions (apexmesh/pubsub/content_core.py): one table row per
outcome of 5.8 (537, 553, 566, 567, 250 with the id, renewal, cached replay), 5.8.2 (the
four cancel forms and 568), 5.9.1 (561) and 5.10.1 (one delivery per endpoint with all
its matching ids)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from apexmesh.apex import _dtd
from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub import content_core as cc
from apexmesh.pubsub.changes import DataRevoked, Unsubscribed
from apexmesh.pubsub.matcher import Matcher
from apexmesh.pubsub.message import Expiry, MessageContent, message_from, millis
from apexmesh.pubsub.schema import DEFAULTS, LocalSchemas, compile_topic
from apexmesh.pubsub.selection.registry import default_classes
from apexmesh.pubsub.selection.types import MessageView
from apexmesh.pubsub.subscription_elements import (
    ContentCancel,
    ContentSubscribe,
    SelectorSpec,
    subscription_reply_from,
)
from apexmesh.pubsub.topic_description import SchemaSource, TopicSettings

pytestmark = pytest.mark.unit

CLASSES = default_classes()
JADE = Endpoint.parse("jade@example.com")
FRED = Endpoint.parse("fred@example.com")
NOW = 1_000_000
XS = "xmlns:xs='http://www.w3.org/2001/XMLSchema'"


def _subscribe(selector: SelectorSpec | None, **kwargs: object) -> ContentSubscribe:
    fields: dict[str, object] = {
        "topic": "quotes",
        "subscriber": JADE,
        "duration": 60,
        "trans_id": 700,
        "selector": selector,
    }
    fields.update(kwargs)
    return ContentSubscribe(**fields)  # type: ignore[arg-type]


def _decide(op: ContentSubscribe, **kwargs: object) -> cc.SubscribeOutcome:
    facts: dict[str, object] = {
        "allowed": True,
        "exists": True,
        "schemas": DEFAULTS,
        "classes": CLASSES,
        "existing": (),
        "new_id": 100,
        "now_ms": NOW,
    }
    facts.update(kwargs)
    return cc.subscribe(op, JADE, **facts)  # type: ignore[arg-type]


JMS = SelectorSpec(selector_class="JMS", text="symbol = 'XMPL' AND pct > 5")


@pytest.mark.parametrize(
    ("op", "facts", "code", "step"),
    [
        (_subscribe(JMS), {"allowed": False}, 537, "5.8/access"),
        (_subscribe(JMS), {"exists": False}, 553, "5.8/topic"),
        (_subscribe(JMS, duration=0), {}, 553, "5.8/duration"),
        (_subscribe(SelectorSpec(selector_class="XPath", text="/a")), {}, 566, "5.8.1/566"),
        (_subscribe(SelectorSpec(selector_class="JMS", text="symbol >")), {}, 567, "5.8.1/567"),
        (_subscribe(JMS), {}, 250, "5.8"),
        (_subscribe(None), {}, 250, "5.8"),
    ],
)
def test_subscribe_outcomes(
    op: ContentSubscribe, facts: dict[str, object], code: int, step: str
) -> None:
    outcome = _decide(op, **facts)
    assert (outcome.code, outcome.step) == (code, step)
    (send,) = outcome.sends
    assert send.recipient == JADE
    reply = subscription_reply_from(_dtd.parse_root(send.content))
    assert (reply.code, reply.trans_id) == (code, 700)
    assert (reply.subscription_id is not None) == (code == 250)


def test_566_when_the_topic_offers_other_classes_and_567_for_its_schema() -> None:
    settings = TopicSettings(
        message_schema=SchemaSource(
            inline=f"<xs:element {XS} name='pct' type='xs:decimal'/>".encode()
        ),
        selector_schemas=(SchemaSource(selector_class="RFC-2254"),),
    )
    schemas = compile_topic(settings, LocalSchemas())
    assert _decide(_subscribe(JMS), schemas=schemas).code == 566
    bad = SelectorSpec(selector_class="RFC-2254", text="(symbol=XMPL)")
    assert _decide(_subscribe(bad), schemas=schemas).code == 567  # symbol not declared
    good = SelectorSpec(selector_class="RFC-2254", text="(pct>=5)")
    outcome = _decide(_subscribe(good), schemas=schemas)
    assert outcome.code == 250
    assert outcome.selector is not None


def test_a_new_subscription_and_its_renewal() -> None:
    outcome = _decide(_subscribe(JMS))
    assert outcome.change is not None
    subscription = outcome.change.subscription
    assert (subscription.subscription_id, outcome.change.renewed) == (100, False)
    assert subscription.expires_ms == NOW + 60_000
    assert (subscription.selector_class, subscription.selector) == ("JMS", JMS.text)
    again = _decide(
        _subscribe(JMS, trans_id=701), existing=(subscription,), new_id=101, now_ms=NOW + 5
    )
    assert again.change is not None
    assert (again.change.subscription.subscription_id, again.change.renewed) == (100, True)
    other = SelectorSpec(selector_class="JMS", text="pct > 9")
    third = _decide(_subscribe(other), existing=(subscription,), new_id=101)
    assert third.change is not None
    assert (third.change.subscription.subscription_id, third.change.renewed) == (101, False)


def _cached(
    symbol: str, pct: str, expiry: Expiry = Expiry.NEVER, message_id: int = 1
) -> cc.CachedMessage:
    envelope = MessageContent(
        trans_id=1,
        topic="quotes",
        publisher="q@example.com",
        publication_date=datetime(2002, 3, 15, tzinfo=UTC),
        expiry=expiry,
        message_id=message_id,
        body=f"<quote symbol='{symbol}'><pct>{pct}</pct></quote>".encode(),
    )
    parsed = message_from(_dtd.parse_root(envelope.to_xml()))
    return cc.CachedMessage(parsed, envelope.expires_ms(None))


def test_cached_messages_are_replayed_through_the_selector() -> None:
    cached = [
        _cached("XMPL", "7", message_id=1),
        _cached("XMPL", "1", message_id=2),
        _cached("TEST", "9", message_id=3),
        _cached("XMPL", "8", Expiry.ONCE, message_id=4),  # expired at publication
    ]
    later = millis(datetime(2002, 3, 15, 1, tzinfo=UTC))
    outcome = _decide(_subscribe(JMS, cached=True), cached=cached, now_ms=later)
    assert [c.message.envelope.message_id for c in outcome.replay] == [1]
    assert _decide(_subscribe(JMS), cached=cached, now_ms=later).replay == ()  # not asked
    everything = _decide(_subscribe(None, cached=True), cached=cached, now_ms=later)
    assert [c.message.envelope.message_id for c in everything.replay] == [1, 2, 3]


def _subscription(
    subscriber: Endpoint, topic: str, identifier: int | None
) -> cc.ContentSubscription:
    return cc.ContentSubscription(
        topic=topic,
        subscriber=subscriber,
        subscription_id=identifier,
        originator=subscriber,
        trans_id=1,
        expires_ms=NOW + 1000,
    )


SUBSCRIPTIONS = (
    _subscription(JADE, "quotes", 100),
    _subscription(JADE, "quotes", 101),
    _subscription(JADE, "news", 102),
)


@pytest.mark.parametrize(
    ("op", "code", "cancelled"),
    [
        (ContentCancel(trans_id=5, topic="quotes", subscription_id=101), 250, {101}),
        (ContentCancel(trans_id=5, topic="quotes"), 250, {100, 101}),
        (ContentCancel(trans_id=5, subscription_id=102), 250, {102}),
        (ContentCancel(trans_id=5), 250, {100, 101, 102}),
        (ContentCancel(trans_id=5, topic="news", subscription_id=101), 568, set()),
        (ContentCancel(trans_id=5, topic="weather"), 568, set()),
        (ContentCancel(trans_id=5, subscription_id=7), 568, set()),
        (ContentCancel(trans_id=5, subscriber=FRED), 568, set()),
    ],
)
def test_the_four_cancel_forms_and_568(op: ContentCancel, code: int, cancelled: set[int]) -> None:
    outcome = cc.cancel(op, JADE, allowed=True, subscriptions=SUBSCRIPTIONS)
    assert outcome.code == code
    assert {c.subscription.subscription_id for c in outcome.changes} == cancelled
    reply = subscription_reply_from(_dtd.parse_root(outcome.sends[0].content))
    assert (reply.code, reply.trans_id) == (code, 5)
    denied = cc.cancel(op, JADE, allowed=False, subscriptions=SUBSCRIPTIONS)
    assert (denied.code, denied.changes) == (537, ())


WITH_PLAIN = (
    *SUBSCRIPTIONS,
    _subscription(JADE, "quotes", None),
    _subscription(JADE, "weather", None),
)


@pytest.mark.parametrize(
    ("op", "cancelled"),
    [
        # 5.8.2: "cancel all outstanding subscriptions to that topic" ...
        (
            ContentCancel(trans_id=5, topic="quotes"),
            {("quotes", 100), ("quotes", 101), ("quotes", None)},
        ),
        # ... "to all topics from the subscriber endpoint": the plain ones too.
        (
            ContentCancel(trans_id=5),
            {
                ("quotes", 100),
                ("quotes", 101),
                ("news", 102),
                ("quotes", None),
                ("weather", None),
            },
        ),
        (ContentCancel(trans_id=5, topic="weather"), {("weather", None)}),
        # A plain subscription has no id: the forms naming one never cover it.
        (ContentCancel(trans_id=5, subscription_id=101), {("quotes", 101)}),
        (ContentCancel(trans_id=5, topic="weather", subscription_id=0), set()),
    ],
)
def test_cancels_without_an_id_end_plain_subscriptions_too(
    op: ContentCancel, cancelled: set[tuple[str, int | None]]
) -> None:
    outcome = cc.cancel(op, JADE, allowed=True, subscriptions=WITH_PLAIN)
    assert outcome.code == (250 if cancelled else 568)
    assert {(c.subscription.topic, c.subscription.subscription_id) for c in outcome.changes} == (
        cancelled
    )


def test_cancel_changes_by_topic_revoke_the_grant_of_plain_subscriptions_only() -> None:
    on_behalf = ContentCancel(trans_id=5, subscriber=JADE)
    outcome = cc.cancel(on_behalf, FRED, allowed=True, subscriptions=WITH_PLAIN[:1])
    assert cc.cancel_changes(outcome, FRED) == {
        "quotes": (Unsubscribed("quotes", JADE, "cancel", FRED, 100),)
    }
    everything = cc.cancel(ContentCancel(trans_id=5), JADE, allowed=True, subscriptions=WITH_PLAIN)
    by_topic = cc.cancel_changes(everything, JADE, grant_data=True)
    assert list(by_topic) == ["news", "quotes", "weather"]  # one commit per topic, sorted
    assert by_topic["weather"] == (
        Unsubscribed("weather", JADE, "cancel", JADE),
        DataRevoked("weather", JADE),
    )
    assert DataRevoked("quotes", JADE) in by_topic["quotes"]
    assert by_topic["news"] == (Unsubscribed("news", JADE, "cancel", JADE, 102),)
    assert not any(
        isinstance(c, DataRevoked) for c in cc.cancel_changes(everything, JADE)["weather"]
    )


def test_operations_for_a_redistributed_domain_are_forwarded_before_any_class_check() -> None:
    """5.7 with draft-schwartz 4.5 step 4 / 4.6 step 3: the server redistributing the topic
    to the subject's domain selects for it, with its own classes: the operation goes
    there as it is, after the access, topic and duration steps, whatever its class."""
    redistributor = Endpoint.parse("apex=pubsub/quotes@redistr.com")
    unknown = _subscribe(SelectorSpec(selector_class="XPath", text="/a"))
    outcome = _decide(unknown, forward_to=redistributor)
    assert (outcome.code, outcome.step, outcome.change) == (0, "5.7/4.5/4", None)
    ((send,),) = (outcome.sends,)
    assert send.recipient == redistributor
    assert send.content == unknown.to_xml()
    assert _decide(unknown, forward_to=redistributor, allowed=False).code == 537
    assert _decide(unknown, forward_to=redistributor, exists=False).code == 553
    cancel = ContentCancel(trans_id=5, topic="quotes", subscription_id=7)
    forwarded = cc.cancel(cancel, JADE, allowed=True, subscriptions=(), forward_to=redistributor)
    assert (forwarded.code, forwarded.step, forwarded.changes) == (0, "5.7/4.6/3", ())
    (sent,) = forwarded.sends
    assert sent.recipient == redistributor
    assert (
        sent.content
        == ContentCancel(trans_id=5, topic="quotes", subscription_id=7, subscriber=JADE).to_xml()
    )  # names its subject: the redistributing server answers it
    everything = ContentCancel(trans_id=6)  # no topic: this service's own subscriptions
    kept = cc.cancel(
        everything, JADE, allowed=True, subscriptions=SUBSCRIPTIONS, forward_to=redistributor
    )
    assert kept.code == 250


def test_publish_delivers_once_per_endpoint_with_every_matching_id() -> None:
    matcher: Matcher[cc.SubscriptionKey] = Matcher()
    subscriptions: dict[cc.SubscriptionKey, cc.ContentSubscription] = {}
    user2 = Endpoint.parse("user2@example.com")
    plain = Endpoint.parse("plain@example.com")
    gone = Endpoint.parse("gone@example.com")
    redistributor = Endpoint.parse("apex=pubsub/quotes@other.example")
    rows = [
        (JADE, 100, "symbol = 'XMPL'"),
        (JADE, 101, "pct > 5"),
        (JADE, 102, "pct > 50"),
        (user2, 200, "(symbol=XMPL)"),
        (plain, None, None),
        (gone, 300, "pct > 1"),
        (redistributor, None, None),
    ]
    for endpoint, identifier, text in rows:
        sub = _subscription(endpoint, "quotes", identifier)
        if endpoint == gone:  # its lease ran out; the index has not heard yet
            sub = dataclasses.replace(sub, expires_ms=NOW - 1)
        subscriptions[sub.key] = sub
        selector = None
        if text is not None:
            selector = CLASSES.compile(
                "RFC-2254" if text.startswith("(") else "JMS", text, DEFAULTS.types
            )
        matcher.add(sub.key, selector)
    root = _dtd.parse_root(b"<quote symbol='XMPL'><pct>7</pct></quote>")
    plan = cc.publish(
        redistributor,
        root,
        MessageView.of(root),
        exists=True,
        allowed=True,
        schemas=DEFAULTS,
        matcher=matcher,
        subscriptions=subscriptions,
        now_ms=NOW,
    )
    assert plan.code == 250
    assert plan.deliveries == {JADE: (100, 101), user2: (200,), plain: ()}


def test_publish_refusals() -> None:
    root = _dtd.parse_root(b"<quote><pct>7</pct></quote>")
    facts = {
        "exists": True,
        "allowed": True,
        "schemas": DEFAULTS,
        "matcher": Matcher(),
        "subscriptions": {},
        "now_ms": NOW,
    }
    view = MessageView.of(root)
    assert cc.publish(JADE, root, view, **{**facts, "exists": False}).code == 550  # type: ignore[arg-type]
    assert cc.publish(JADE, root, view, **{**facts, "allowed": False}).code == 537  # type: ignore[arg-type]
    schemas = compile_topic(
        TopicSettings(
            message_schema=SchemaSource(
                inline=(
                    f"<xs:element {XS} name='quote'><xs:complexType><xs:sequence>"
                    "<xs:element name='pct' type='xs:decimal'/></xs:sequence>"
                    "<xs:attribute name='symbol' use='required'/></xs:complexType></xs:element>"
                ).encode()
            )
        ),
        LocalSchemas(),
    )
    plan = cc.publish(JADE, root, view, **{**facts, "schemas": schemas})  # type: ignore[arg-type]
    assert (plan.code, plan.step) == (561, "5.9.1")
    assert "symbol" in plan.text


def test_cache_actions() -> None:
    def envelope(**kwargs: object) -> MessageContent:
        fields: dict[str, object] = {
            "trans_id": 1,
            "topic": "t",
            "publisher": "p",
            "publication_date": datetime(2002, 3, 15, tzinfo=UTC),
            "message_id": 9,
            "revision_id": 2,
        }
        fields.update(kwargs)
        return MessageContent(**fields)  # type: ignore[arg-type]

    now = millis(datetime(2002, 3, 15, tzinfo=UTC))
    assert cc.cache_action(envelope(), None, now) is cc.CacheAction.STORE
    assert cc.cache_action(envelope(), 1, now) is cc.CacheAction.REPLACE
    assert cc.cache_action(envelope(), 2, now) is cc.CacheAction.STALE
    assert cc.cache_action(envelope(), 3, now) is cc.CacheAction.STALE
    assert cc.cache_action(envelope(message_id=None), None, now) is cc.CacheAction.SKIP
    assert cc.cache_action(envelope(expiry=Expiry.ONCE), None, now) is cc.CacheAction.SKIP
    past = datetime(2002, 3, 14, tzinfo=UTC)
    gone = envelope(expiry=Expiry.AT, expiration_date=past)
    assert cc.cache_action(gone, None, now) is cc.CacheAction.SKIP


def _envelope_message(topic: str, publisher: str, expiry: str = "*") -> object:
    body = (
        "<ps:message-content transID='4242' content='#Content' "
        "xmlns:ps='http://www.example.com/pubsub'>"
        f"<ps:topic>{topic}</ps:topic><ps:publisher>{publisher}</ps:publisher>"
        "<ps:publication-date>2002-03-15T12:15:00Z</ps:publication-date>"
        f"<ps:expiration-date>{expiry}</ps:expiration-date><ps:message-id>7</ps:message-id>"
        "<ps:content Name='Content'><quote symbol='XMPL'><pct>7</pct></quote></ps:content>"
        "</ps:message-content>"
    ).encode()
    return message_from(_dtd.parse_root(body))


def _publish_envelope(
    originator: Endpoint, message: object, now_ms: int = NOW
) -> cc.ContentPublishPlan:
    matcher: Matcher[cc.SubscriptionKey] = Matcher()
    sub = dataclasses.replace(_subscription(JADE, "quotes", 100), expires_ms=now_ms + 1000)
    matcher.add(sub.key, None)
    return cc.publish(
        originator,
        message,  # type: ignore[arg-type]
        MessageView.of(message.root),  # type: ignore[attr-defined]
        exists=True,
        allowed=True,
        schemas=DEFAULTS,
        matcher=matcher,
        subscriptions={sub.key: sub},
        now_ms=now_ms,
        topic="quotes",
    )


def test_publish_checks_the_envelope_topic_and_publisher_headers() -> None:
    """5.2.1: the headers name the topic published to and its publisher; otherwise 561
    (Appendix A), so nobody replaces another publisher's cached message."""
    fine = _publish_envelope(FRED, _envelope_message("quotes", "fred@example.com"))
    assert (fine.code, fine.deliveries, fine.trans_id) == (250, {JADE: (100,)}, 4242)
    other_topic = _publish_envelope(FRED, _envelope_message("other.topic", "fred@example.com"))
    assert (other_topic.code, other_topic.step) == (561, "5.9.1")
    assert "topic header" in other_topic.text
    assert not other_topic.deliveries
    assert other_topic.trans_id == 4242  # the 561 reply echoes it
    impostor = _publish_envelope(FRED, _envelope_message("quotes", "jade@example.com"))
    assert (impostor.code, impostor.step) == (561, "5.9.1")
    assert "publisher header" in impostor.text
    unparsable = _publish_envelope(FRED, _envelope_message("quotes", "not an endpoint"))
    assert unparsable.code == 561
    # A redistributing server forwards others' messages: its publisher is not itself.
    upstream = Endpoint.parse("apex=pubsub/quotes@other.example")
    assert _publish_envelope(upstream, _envelope_message("quotes", "jade@example.com")).code == 250


def test_a_message_already_expired_is_answered_250_and_delivered_to_nobody() -> None:
    message = _envelope_message("quotes", "fred@example.com", expiry="2002-03-15T12:15:00Z")
    now = millis(datetime(2002, 3, 15, 12, 15, tzinfo=UTC))
    plan = _publish_envelope(FRED, message, now_ms=now)
    assert (plan.code, plan.step, plan.deliveries) == (250, "5.2.1/expired", {})
    live = _publish_envelope(FRED, message, now_ms=now - 1)
    assert live.deliveries == {JADE: (100,)}
    once = _envelope_message("quotes", "fred@example.com", expiry="0")  # distributed once
    assert _publish_envelope(FRED, once, now_ms=now + 10**9).deliveries == {JADE: (100,)}
