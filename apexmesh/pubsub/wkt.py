"""The well-known topics (draft-wyman-apex-pubsub-00 sections 6 and 7.5-7.6): names,
message schemas (8.3, 8.4, corrected) and the messages the service publishes to them.

- ``WKT=Topics`` (6.2): one message per topic, message-id fixed per topic, a higher
  revision for each change, disposition ``publish`` or ``cancel`` (6.2.2).
- ``WKT=Subscriptions`` (6.3): one message per subscription. A subscriber sees only its
  own (7.6, 6.3.1): its selector is combined (AND) with ``subscriber = '<endpoint>'``.

The draft's schemas cannot be compiled as printed: 8.3 declares the ``endpoint`` attribute
twice (the DTD of 8.1 makes the second ``info``) and ``message-schema`` twice, both use a
2000 working-draft namespace and a target namespace the examples' content is not in, and
``xs:any`` stands directly in ``xs:complexType``; 8.3 makes a selector schema's
``class`` required where the DTD of 8.1 declares only ``uri`` for it and 5.5's example
(``<selector-schema uri='...' />``) has none (every class the service offers then
applies): a topic
created so must still be announced, so ``class`` is optional here. :data:`TOPICS_SCHEMA` and
:data:`SUBSCRIPTIONS_SCHEMA` are the evident intent, in XML Schema 1.0, describing the
``content`` element (see :mod:`apexmesh.pubsub.schema`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from apexmesh.apex.endpoint import Endpoint
from apexmesh.beep.xml import escape_attr, escape_text
from apexmesh.pubsub.elements import WELL_KNOWN_TOPICS
from apexmesh.pubsub.message import Expiry, MessageContent, format_date
from apexmesh.pubsub.selection.registry import SelectorClasses
from apexmesh.pubsub.selection.types import AccessPredicate, MessageView, Selector, TypeMap
from apexmesh.pubsub.topic_description import SchemaSource, TopicDescription, TopicSettings

TOPICS: Final = "WKT=Topics"
SUBSCRIPTIONS: Final = "WKT=Subscriptions"
WELL_KNOWN: Final = WELL_KNOWN_TOPICS

TOPICS_SCHEMA: Final = b"""<xs:schema xmlns:xs='http://www.w3.org/2001/XMLSchema'>
  <xs:element name='content'>
    <xs:complexType>
      <xs:sequence>
        <xs:element name='topic-name' type='xs:string'/>
        <xs:element name='disposition' minOccurs='0'>
          <xs:simpleType>
            <xs:restriction base='xs:string'>
              <xs:enumeration value='publish'/>
              <xs:enumeration value='cancel'/>
            </xs:restriction>
          </xs:simpleType>
        </xs:element>
        <xs:element name='publisher' minOccurs='0' maxOccurs='unbounded'>
          <xs:complexType>
            <xs:attribute name='endpoint' type='xs:string' use='required'/>
            <xs:attribute name='info' type='xs:string'/>
          </xs:complexType>
        </xs:element>
        <xs:element name='description' type='xs:string' minOccurs='0'/>
        <xs:element name='message-schema' minOccurs='0'>
          <xs:complexType>
            <xs:sequence>
              <xs:any processContents='skip' minOccurs='0' maxOccurs='unbounded'/>
            </xs:sequence>
            <xs:attribute name='uri' type='xs:string'/>
          </xs:complexType>
        </xs:element>
        <xs:element name='selector-schema' minOccurs='0' maxOccurs='unbounded'>
          <xs:complexType>
            <xs:sequence>
              <xs:any processContents='skip' minOccurs='0' maxOccurs='unbounded'/>
            </xs:sequence>
            <xs:attribute name='class' type='xs:string'/>
            <xs:attribute name='uri' type='xs:string'/>
          </xs:complexType>
        </xs:element>
      </xs:sequence>
    </xs:complexType>
  </xs:element>
</xs:schema>"""

SUBSCRIPTIONS_SCHEMA: Final = b"""<xs:schema xmlns:xs='http://www.w3.org/2001/XMLSchema'>
  <xs:element name='content'>
    <xs:complexType>
      <xs:sequence>
        <xs:element name='subscriber' type='xs:string'/>
        <xs:element name='subscription-id' type='xs:int'/>
        <xs:element name='topic-name' type='xs:string'/>
        <xs:element name='selector'>
          <xs:complexType>
            <xs:simpleContent>
              <xs:extension base='xs:string'>
                <xs:attribute name='class' type='xs:string'/>
              </xs:extension>
            </xs:simpleContent>
          </xs:complexType>
        </xs:element>
        <xs:element name='subscription-date' type='xs:dateTime'/>
        <xs:element name='duration' type='xs:int'/>
        <xs:element name='current-status' type='xs:string' minOccurs='0'/>
      </xs:sequence>
    </xs:complexType>
  </xs:element>
</xs:schema>"""

#: The settings the service gives the two topics.
SETTINGS: Final = {
    TOPICS: TopicSettings(message_schema=SchemaSource(inline=TOPICS_SCHEMA)),
    SUBSCRIPTIONS: TopicSettings(message_schema=SchemaSource(inline=SUBSCRIPTIONS_SCHEMA)),
}


def is_well_known(topic: str) -> bool:
    return topic in WELL_KNOWN


def topics_message(
    topic: str,
    description: TopicDescription,
    *,
    service: Endpoint,
    message_id: int,
    revision: int,
    now: datetime,
    cancelled: bool = False,
    trans_id: int = 1,
    classes: Sequence[str] = (),
) -> MessageContent:
    """The Topics-topic message describing ``topic`` (6.2), or its cancellation (6.2.2:
    the same message-id, a higher revision, disposition ``cancel``).

    A service offering selection "must specify the selector schema and the available
    message selector classes" of each topic (6.2): a topic without a selector schema
    is described with one ``<selector-schema class='...' />`` per class in ``classes``
    (the service's), the default selector schema of 5.5.1. That is how a subscriber, or
    a redistributing service (5.7), learns which classes each service applies."""
    if cancelled:
        body = f"<topic-name>{escape_text(topic)}</topic-name><disposition>cancel</disposition>"
        content = body.encode()
    else:
        settings = description.settings
        if not settings.selector_schemas and classes:
            defaults = tuple(SchemaSource(selector_class=name) for name in classes)
            settings = dataclasses.replace(settings, selector_schemas=defaults)
        content = TopicDescription(
            topic_name=topic,
            disposition="publish",
            publishers=description.publishers,
            description=description.description,
            settings=settings,
        ).to_xml()
    return MessageContent(
        trans_id=trans_id,
        topic=TOPICS,
        publisher=str(service),
        publication_date=now,
        expiry=Expiry.NEVER,
        message_id=message_id,
        revision_id=revision,
        body=content,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionRecord:
    """The body of a Subscriptions-topic message (6.3, 8.4)."""

    subscriber: Endpoint
    subscription_id: int
    topic: str
    selector_class: str
    selector: str
    subscription_date: datetime
    duration: int
    current_status: str | None = "ACTIVE"

    def to_xml(self) -> bytes:
        status = (
            ""
            if self.current_status is None
            else f"<current-status>{escape_text(self.current_status)}</current-status>"
        )
        return (
            f"<subscriber>{escape_text(str(self.subscriber))}</subscriber>"
            f"<subscription-id>{self.subscription_id}</subscription-id>"
            f"<topic-name>{escape_text(self.topic)}</topic-name>"
            f"<selector class='{escape_attr(self.selector_class)}'>"
            f"{escape_text(self.selector)}</selector>"
            f"<subscription-date>{format_date(self.subscription_date)}</subscription-date>"
            f"<duration>{self.duration}</duration>{status}"
        ).encode()


@dataclass(frozen=True, slots=True)
class AllOf:
    """Selects what every one of ``selectors`` selects (6.3.1's combination)."""

    selectors: tuple[Selector, ...]
    selector_class: str
    text: str

    def matches(self, view: MessageView) -> bool:
        return all(selector.matches(view) for selector in self.selectors)

    def access_predicates(self) -> tuple[AccessPredicate, ...]:
        return tuple(p for selector in self.selectors for p in selector.access_predicates())


def own_subscriptions(
    subscriber: Endpoint, selector: Selector | None, classes: SelectorClasses
) -> Selector:
    """The selector of a subscription to ``WKT=Subscriptions`` (6.3.1, 7.6): the
    default selector ``subscriber = '<endpoint>'`` AND the subscriber's own."""
    quoted = str(subscriber).replace("'", "''")
    own = classes.compile("JMS", f"subscriber = '{quoted}'", TypeMap())
    if own is None:  # the text is never empty
        raise ValueError("no default selector")
    if selector is None:
        return own
    return AllOf((own, selector), selector.selector_class, selector.text)


__all__ = [
    "SETTINGS",
    "SUBSCRIPTIONS",
    "SUBSCRIPTIONS_SCHEMA",
    "TOPICS",
    "TOPICS_SCHEMA",
    "WELL_KNOWN",
    "AllOf",
    "SubscriptionRecord",
    "is_well_known",
    "own_subscriptions",
    "topics_message",
]
