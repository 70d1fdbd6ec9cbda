"""The well-known topics (apexmesh/pubsub/wkt.py): their messages conform to the
corrected schemas of 8.3 and 8.4, a topic's revisions share a message-id, and a
Subscriptions subscriber sees only its own subscriptions (6.3.1, 7.6)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from apexmesh.apex import _dtd
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub import core
from apexmesh.pubsub.elements import CreateTopic, DeleteTopic, is_topic, parse_operation
from apexmesh.pubsub.message import Expiry, MessageContent, message_from
from apexmesh.pubsub.schema import LocalSchemas, compile_topic
from apexmesh.pubsub.selection.registry import default_classes
from apexmesh.pubsub.selection.types import MessageView
from apexmesh.pubsub.topic_description import (
    Publisher,
    SchemaSource,
    TopicDescription,
    TopicSettings,
)
from apexmesh.pubsub.wkt import (
    SETTINGS,
    SUBSCRIPTIONS,
    TOPICS,
    SubscriptionRecord,
    own_subscriptions,
    topics_message,
)

pytestmark = pytest.mark.unit

SERVICE = Endpoint.parse("apex=pubsub@example.com")
JADE = Endpoint.parse("jade@example.com")
FRED = Endpoint.parse("fred@example.com")
NOW = datetime(2002, 3, 15, 20, 15, tzinfo=UTC)
XS = "xmlns:xs='http://www.w3.org/2001/XMLSchema'"


def _parsed(envelope: MessageContent) -> MessageView:
    return MessageView.of(message_from(_dtd.parse_root(envelope.to_xml())).root)


def test_topics_messages_conform_and_revise_under_one_id() -> None:
    description = TopicDescription(
        publishers=(Publisher("stock-service@example.com"),),
        description="Delayed quotes",
        settings=TopicSettings(
            message_schema=SchemaSource(inline=f"<xs:element {XS} name='q'/>".encode()),
            selector_schemas=(SchemaSource(selector_class="JMS"),),
        ),
    )
    schema = compile_topic(SETTINGS[TOPICS], LocalSchemas())
    published = topics_message(
        "equity.quote.service", description, service=SERVICE, message_id=10404, revision=0, now=NOW
    )
    cancelled = topics_message(
        "equity.quote.service",
        description,
        service=SERVICE,
        message_id=10404,
        revision=1,
        now=NOW,
        cancelled=True,
    )
    for envelope in (published, cancelled):
        parsed = message_from(_dtd.parse_root(envelope.to_xml()))
        schema.check(parsed.content)
        assert (parsed.envelope.topic, parsed.envelope.expiry) == (TOPICS, Expiry.NEVER)
    assert _parsed(cancelled).texts["disposition"] == ("cancel",)
    assert _parsed(published).texts["disposition"] == ("publish",)


def test_topics_messages_list_the_services_classes_for_the_default_selector_schema() -> None:
    """6.2: a service offering selection "must specify the selector schema and the
    available message selector classes"; 5.5.1: with the default selector schema, one
    ``<selector-schema class='...' />`` per class. A topic's own selector schemas are
    listed as they are."""
    schema = compile_topic(SETTINGS[TOPICS], LocalSchemas())
    plain = topics_message(
        "news",
        TopicDescription(),
        service=SERVICE,
        message_id=1,
        revision=0,
        now=NOW,
        classes=("RFC-2254", "JMS"),
    )
    parsed = message_from(_dtd.parse_root(plain.to_xml()))
    schema.check(parsed.content)
    assert [e.get("class") for e in parsed.content.iter("selector-schema")] == ["RFC-2254", "JMS"]
    own = TopicDescription(
        settings=TopicSettings(selector_schemas=(SchemaSource(selector_class="JMS"),))
    )
    restricted = topics_message(
        "news", own, service=SERVICE, message_id=1, revision=1, now=NOW, classes=("RFC-2254", "JMS")
    )
    parsed = message_from(_dtd.parse_root(restricted.to_xml()))
    assert [e.get("class") for e in parsed.content.iter("selector-schema")] == ["JMS"]
    gone = topics_message(
        "news",
        own,
        service=SERVICE,
        message_id=1,
        revision=2,
        now=NOW,
        cancelled=True,
        classes=("JMS",),
    )
    assert b"selector-schema" not in gone.to_xml()


def test_subscription_records_conform() -> None:
    record = SubscriptionRecord(
        subscriber=JADE,
        subscription_id=1090334,
        topic="equity.quote.service",
        selector_class="JMS",
        selector="net-change-pct > 5.0",
        subscription_date=NOW,
        duration=0,
    )
    envelope = MessageContent(
        trans_id=1,
        topic=SUBSCRIPTIONS,
        publisher=str(SERVICE),
        publication_date=NOW,
        expiry=Expiry.NEVER,
        message_id=1035,
        body=record.to_xml(),
    )
    parsed = message_from(_dtd.parse_root(envelope.to_xml()))
    compile_topic(SETTINGS[SUBSCRIPTIONS], LocalSchemas()).check(parsed.content)


def test_a_subscriber_sees_only_its_own_subscriptions() -> None:
    classes = default_classes()

    def record(subscriber: Endpoint, topic: str) -> MessageView:
        body = SubscriptionRecord(
            subscriber=subscriber,
            subscription_id=1,
            topic=topic,
            selector_class="",
            selector="",
            subscription_date=NOW,
            duration=60,
        ).to_xml()
        return MessageView.of(_dtd.parse_root(b"<content>" + body + b"</content>"))

    mine = own_subscriptions(JADE, None, classes)
    assert mine.matches(record(JADE, "a"))
    assert not mine.matches(record(FRED, "a"))
    narrowed = own_subscriptions(
        JADE,
        classes.compile(
            "JMS", "topic-name = 'b'", compile_topic(SETTINGS[SUBSCRIPTIONS], LocalSchemas()).types
        ),
        classes,
    )
    assert narrowed.matches(record(JADE, "b"))
    assert not narrowed.matches(record(JADE, "a"))
    assert not narrowed.matches(record(FRED, "b"))
    assert len(narrowed.access_predicates()) == 2


def test_well_known_names_are_topics_nobody_creates_or_deletes() -> None:
    assert is_topic(TOPICS)
    assert is_topic(SUBSCRIPTIONS)
    assert not is_topic("WKT=Other")
    for op in (CreateTopic(topic=TOPICS, trans_id=1), DeleteTopic(topic=SUBSCRIPTIONS, trans_id=1)):
        decide = core.create_topic if isinstance(op, CreateTopic) else core.delete_topic
        outcome = decide(op, JADE, allowed=True, exists=False)  # type: ignore[arg-type]
        assert outcome.code == 553
        assert b"reserved" in outcome.sends[0].content


def test_description_order_and_forms() -> None:
    out_of_order = (
        b"<createtopic topic='t' transID='3'><description>d</description>"
        b"<publisher endpoint='a@b.c'/></createtopic>"
    )
    with pytest.raises(ApexError) as caught:
        parse_operation(out_of_order)
    assert (caught.value.code, caught.value.trans_id) == (501, 3)


def test_a_topic_is_never_created_with_a_schema_it_would_ignore() -> None:
    settings = TopicSettings(
        message_schema=SchemaSource(inline=f"<xs:element {XS} name='q'/>".encode())
    )
    op = CreateTopic(topic="quotes", trans_id=4, description=TopicDescription(settings=settings))
    assert core.create_topic(op, JADE, allowed=True, exists=False).code == 504
    accepted = core.create_topic(op, JADE, allowed=True, exists=False, schemas_supported=True)
    assert accepted.code == 250
    described = CreateTopic(
        topic="quotes", trans_id=5, description=TopicDescription(description="d")
    )
    assert core.create_topic(described, JADE, allowed=True, exists=False).code == 250


def test_a_topic_whose_selector_schema_has_no_class_is_described() -> None:
    """5.5's ``<selector-schema uri='...' />`` and the DTD of 8.1 (only ``uri``) give a
    selector schema no class; the Topics topic schema must still take its description
    (8.3 as printed requires ``class``: the announcement was refused with 561)."""
    schema = compile_topic(SETTINGS[TOPICS], LocalSchemas())
    classless = SchemaSource(inline=f"<xs:element {XS} name='pct' type='xs:decimal'/>".encode())
    description = TopicDescription(settings=TopicSettings(selector_schemas=(classless,)))
    message = topics_message(
        "quotes", description, service=SERVICE, message_id=3, revision=0, now=NOW, classes=("JMS",)
    )
    parsed = message_from(_dtd.parse_root(message.to_xml()))
    schema.check(parsed.content)  # raised 561 before
    (element,) = parsed.content.iter("selector-schema")
    assert element.get("class") is None
