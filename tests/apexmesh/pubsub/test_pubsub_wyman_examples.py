"""Every XML example of draft-wyman-apex-pubsub-00, parsed and written back.

The examples are copied from the draft with the minimum repair that lets an XML parser
read them, each named where it is made: 5.2, 6.2, 6.2.2 and 6.3 lack the closing quote
of ``xmlns:ps='http://www.example.com/pubsub``; 5.8.2 closes ``<ps:subscription-id>``
with ``</subscription-id>``; 5.3.1, 5.3.2 and 5.5 use the ``xsd`` prefix without
declaring it; 5.5's selector schemas put ``xsd:element`` straight in
``xsd:complexType`` (kept: selector schemas are read for their declarations only).
Each parsed element is written with ``to_xml`` and parsed again to the same value.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from apexmesh.apex import _dtd
from apexmesh.apex.data import data_from
from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub._fields import PUBSUB_NS
from apexmesh.pubsub.elements import CreateTopic, parse_operation
from apexmesh.pubsub.inre import subscription_ids_of
from apexmesh.pubsub.message import Expiry, message_from, parse_message
from apexmesh.pubsub.schema import LocalSchemas, compile_topic
from apexmesh.pubsub.selection.registry import default_classes
from apexmesh.pubsub.selection.types import MessageView, TypeMap
from apexmesh.pubsub.subscription_elements import (
    ContentCancel,
    ContentSubscribe,
    content_cancel_from,
    content_subscribe_from,
    selector_from,
    subscription_reply_from,
)
from apexmesh.pubsub.topic_description import TopicSettings, description_from
from apexmesh.pubsub.wkt import SETTINGS, SUBSCRIPTIONS, TOPICS

pytestmark = pytest.mark.unit

XSD = "xmlns:xsd='http://www.w3.org/2001/XMLSchema'"
PST = timezone(timedelta(hours=-8))

# 5.2 (repaired: the closing quote of xmlns:ps)
MESSAGE_5_2 = b"""<ps:message-content transID='101'
                       content='#Content'
                       xmlns:ps='http://www.example.com/pubsub'>
      <ps:topic>equity.quote.service</ps:topic>
      <ps:publisher>quote-service@example.com</ps:publisher>
      <ps:publication-date>2002-03-15T12:15:00-08:00
      </ps:publication-date>
      <ps:expiration-date>2003-03-15T12:15:00-08:00
      </ps:expiration-date>
      <ps:message-id>1029</ps:message-id>
      <ps:revision-id>0</ps:revision-id>
      <ps:content Name='Content'>
         <equity-quote symbol='XMPL'>
            <issue-name>Example, Inc.</issue-name>
            <last-trade>11.0</last-trade>
            <last-trade-datetime>October 18, 2001 11:12:00
            </last-trade-datetime>
            <net-change-price>1.0</net-change-price>
            <net-change-pct>10.0</net-change-pct>
            <best-bid-price>11.0</best-bid-price>
            <best-ask-price>12.0</best-ask-price>
         </equity-quote>
      </ps:content>
   </ps:message-content>"""

# 5.3.1 (repaired: xsd declared)
MESSAGE_SCHEMA_5_3_1 = f"""<message-schema>
      <xsd:element name='equity-quote' {XSD}>
         <xsd:complexType>
            <xsd:sequence>
               <xsd:element name='issue-name' type='xsd:string'/>
               <xsd:element name='last-trade' type='xsd:decimal'/>
               <xsd:element name='last-trade-datetime' type='xsd:string'/>
               <xsd:element name='net-change-price' type='xsd:decimal'/>
               <xsd:element name='net-change-pct' type='xsd:decimal'/>
               <xsd:element name='best-bid-price' type='xsd:decimal'/>
               <xsd:element name='best-ask-price' type='xsd:decimal'/>
            </xsd:sequence>
            <xsd:attribute name='symbol' type='xsd:string' use='required'/>
         </xsd:complexType>
      </xsd:element>
   </message-schema>"""
MESSAGE_SCHEMA_URI = "<message-schema uri='http://www.example.com/schema/service.xsd' />"
# 5.3.2 (repaired: xsd declared)
DEFAULT_MESSAGE_SCHEMA = f"""<message-schema>
      <xsd:element name='message-content' {XSD}>
          <xsd:complexType>
              <xsd:sequence><xsd:any/></xsd:sequence>
          </xsd:complexType>
      </xsd:element>
   </message-schema>"""
# 5.5 (repaired: xsd declared)
SELECTOR_SCHEMAS_5_5 = [
    f"""<selector-schema class='JMS'>
       <xsd:element name='equity-quote' {XSD}>
           <xsd:complexType>
               <xsd:element name='net-change-pct' type='xsd:decimal'/>
               <xsd:attribute name='symbol' type='xsd:string'/>
           </xsd:complexType>
       </xsd:element>
   </selector-schema>""",
    "<selector-schema uri='http://www.example.com/schema/service-selector.xsd' />",
    f"""<selector-schema class='JMS'>
       <xsd:element name='equity-quote' {XSD}>
           <xsd:complexType>
               <xsd:element name='industry-group'
                            type='xsd:string'/>
           </xsd:complexType>
       </xsd:element>
   </selector-schema>""",
    f"""<selector-schema class='JMS'>
       <xsd:element name='message-content' {XSD}>
           <xsd:complexType>
               <xsd:element name='equity-quote'>
                   <xsd:complexType>
                       <xsd:attribute name='symbol'
                                      type='xsd:string'/>
                   </xsd:complexType>
               </xsd:element>
               <xsd:attribute name='publisher'
                              type='xsd:string'/>
           </xsd:complexType>
       </xsd:element>
   </selector-schema>""",
    "<selector-schema class='JMS' />",  # 5.5.1
]
# 5.6
SELECTOR_RFC_2254 = b"""<selector Name='Select' class='RFC-2254'>
       &amp;(symbol='XMPL')
        (|(net-change-pct &gt; 5.0)(net-change-pct &lt; -5.0))
   </selector>"""
SELECTOR_JMS = b"""<selector Name='Select' class='JMS'>
       symbol='XMPL' AND
       (net-change-pct &gt; 5.0 OR net-change-pct &lt; -5.0)
   </selector>"""
# 5.8
SUBSCRIBE_5_8 = b"""<ps:subscribe transID='700'
                               selector='#Select'
                               xmlns:ps='http://www.example.com/pubsub'>
                    <ps:topic>equity.quote.service</ps:topic>
                    <ps:subscriber>jade@example.com</ps:subscriber>
                    <ps:duration>86400</ps:duration>
                    <ps:cached>true</ps:cached>
                    <ps:selector Name='Select' class='JMS'>
                          symbol IN ('XMPL', 'TEST', 'SMPL')
                          AND (net-change-pct &gt; 5.0
                          OR net-change-pct &lt; -5.0)
                    </ps:selector>
                 </ps:subscribe>"""
REPLY_5_8 = b"""<reply code='250' transID='700'>
                     <subscription-id>100</subscription-id>
                  </reply>"""
# 5.8.2 (repaired: </ps:subscription-id>); the same element the service sends (105)
CANCEL_5_8_2 = b"""<ps:cancel transID='102'
                            xmlns:ps='http://www.example.com/pubsub'>
                    <ps:topic>equity.quote.service</ps:topic>
                    <ps:subscription-id>100</ps:subscription-id>
                 </ps:cancel>"""
# 5.10.1.1
INRE_ONE = b"""<data content='#Content'>
              <originator identity='apex=pubsub@example.com' />
              <recipient identity='jade@example.com'>
                  <option internal='InRe'
                          targetHop='final'
                          mustUnderstand='false'
                          transID='105'>
                      <subscription-id>100</subscription-id>
                      <subscription-id>101</subscription-id>
                  </option>
              </recipient>
              <data-content Name='Content'>x</data-content>
          </data>"""
INRE_TWO = b"""<data content='#Content'>
              <originator identity='apex=pubsub@example.com' />
              <recipient identity='user1@example.com'>
                  <option internal='InRe' targetHop='final' mustUnderstand='false'
                          transID='105'>
                      <subscription-id>100</subscription-id>
                      <subscription-id>101</subscription-id>
                  </option>
              </recipient>
              <recipient identity='user2@example.com'>
                  <option internal='InRe' targetHop='final' mustUnderstand='false'
                          transID='105'>
                      <subscription-id>200</subscription-id>
                  </option>
              </recipient>
              <data-content Name='Content'>x</data-content>
          </data>"""
# 6.2 (repaired: the closing quote of xmlns:ps)
TOPICS_6_2 = b"""<ps:message-content transID='105'
                       content='#Content'
                       xmlns:ps='http://www.example.com/pubsub'>
      <ps:topic>WKT=Topics</ps:topic>
      <ps:publisher>apex=pubsub@example.com</ps:publisher>
      <ps:publication-date>
         2002-03-15T12:15:00-08:00
      </ps:publication-date>
      <ps:expiration-date>*</ps:expiration-date>
      <ps:message-id>10404</ps:message-id>
      <ps:revision-id>0</ps:revision-id>
      <ps:content Name='Content'>

         <topic-name>equity.quote.service</topic-name>
         <disposition>publish</disposition>
         <publisher>stock-service@example.com</publisher>
         <description>
            This service provides delayed stock price information
            for issues traded on the U.S. public markets.
         </description>

         <message-schema>
            <xs:schema xmlns:xs="http://www.w3.org/2000/10/XMLSchema"
                       xmlns:fs="http://www.firstrain.com/stock"
                       targetNamespace="http://www.firstrain.com/stock">
               <xs:complexType name="equity-quote">
                  <xs:sequence>
                     <xs:element name="issue-name" type="xs:string"/>
                     <xs:element name="last-trade" type="xs:decimal"/>
                     <xs:element name="last-trade-datetime"
                                 type="xs:string"/>
                     <xs:element name="net-change-price"
                                 type="xs:decimal"/>
                     <xs:element name="net-change-pct"
                                 type="xs:decimal"/>
                  </xs:sequence>
                  <xs:attribute name="symbol" type="xs:string"/>
               </xs:complexType>
            </xs:schema>
         </message-schema>

         <selector-schema class='JMS'>
            <xs:complexType name="equity-quote" xmlns:xs="http://www.w3.org/2000/10/XMLSchema">
               <xs:sequence>
                  <xs:element name="net-change-price"
                              type="xs:decimal"/>
                  <xs:element name="net-change-pct" type="xs:decimal"/>
                  <xs:element name="industry-group" type="xs:string"/>
               </xs:sequence>
               <xs:attribute name="symbol" type="xs:string"/>
            </xs:complexType>
         </selector-schema>

      </ps:content>
   </ps:message-content>"""
# 6.2.2 (repaired: the closing quote of xmlns:ps)
TOPICS_CANCEL_6_2_2 = b"""<ps:message-content transID='105'
                       content='#Content'
                       xmlns:ps='http://www.example.com/pubsub'>
      <ps:topic>WKT=Topics</ps:topic>
      <ps:publisher>apex=pubsub@example.com</ps:publisher>
      <ps:publication-date>2002-03-15T12:15:00-08:00</ps:publication-date>
      <ps:expiration-date>*</ps:expiration-date>
      <ps:message-id>10404</ps:message-id>
      <ps:revision-id>1</ps:revision-id>
      <ps:content name='Content'>
         <topic-name>equity.quote.service</topic-name>
         <disposition>cancel</disposition>
      </ps:content>
   </ps:message-content>"""
# 6.2.3
CREATETOPIC_6_2_3 = b"""<createtopic topic='equity.quote.service'
                               transID='105' >
                      <publisher>stock-service@example.com
                      </publisher>
                      <description>
                          This service provides delayed stock
                          price information for issues traded
                          on the U.S. public markets.
                      </description>
                      <message-schema>
                      </message-schema>
                      <selector-schema class='JMS'>
                      </selector-schema>
                  </createtopic>"""
# 6.3 (repaired: the closing quote of xmlns:ps)
SUBSCRIPTIONS_6_3 = b"""<ps:message-content transID='105'
                       content='#Content'
                       xmlns:ps='http://www.example.com/pubsub'>
      <ps:topic>WKT=Subscriptions</ps:topic>
      <ps:publisher>apex=pubsub@example.com</ps:publisher>
      <ps:publication-date>2002-03-15T12:15:00-08:00</ps:publication-date>
      <ps:expiration-date>*</ps:expiration-date>
      <ps:message-id>1035</ps:message-id>
      <ps:revision-id>1</ps:revision-id>
      <ps:content name='Content'>

         <subscriber>jade@example.com</subscriber>
         <subscription-id>1090334</subscription-id>
         <topic-name>equity.quote.service</topic-name>
         <selector class='JMS'>
             net-change-pct &gt; 5.0
         </selector>
         <subscription-date>2002-03-10T08:00:00-08:00
         </subscription-date>
         <duration>0</duration>
         <current-status>ACTIVE</current-status>

      </ps:content>
   </ps:message-content>"""

MAX = 1 << 20


def test_5_2_message_content() -> None:
    parsed = parse_message(MESSAGE_5_2, max_octets=MAX)
    envelope = parsed.envelope
    assert envelope.topic == "equity.quote.service"
    assert envelope.publisher == "quote-service@example.com"
    assert envelope.publication_date == datetime(2002, 3, 15, 12, 15, tzinfo=PST)
    assert envelope.expiry is Expiry.AT
    assert envelope.expiration_date == datetime(2003, 3, 15, 12, 15, tzinfo=PST)
    assert (envelope.message_id, envelope.revision_id, envelope.trans_id) == (1029, 0, 101)
    view = MessageView.of(parsed.root)
    assert view.texts["symbol"] == ("XMPL",)
    assert view.texts["publisher"] == ("quote-service@example.com",)
    again = message_from(_dtd.parse_root(envelope.to_xml())).envelope
    assert again == envelope


def test_5_3_and_5_5_schemas_on_a_createtopic() -> None:
    body = (
        "<createtopic topic='equity.quote.service' transID='9'>"
        + MESSAGE_SCHEMA_5_3_1
        + "".join(s for s in SELECTOR_SCHEMAS_5_5 if "uri=" not in s)
        + "</createtopic>"
    ).encode()
    op = parse_operation(body)
    assert isinstance(op, CreateTopic)
    settings = op.description.settings
    assert settings.message_schema is not None
    assert len(settings.selector_schemas) == 4
    assert settings.selector_schemas[-1].is_default
    assert parse_operation(op.to_xml()) == op
    assert TopicSettings.from_json(settings.to_json()) == settings
    schemas = compile_topic(settings, LocalSchemas())
    assert schemas.types.kind_of("net-change-pct").value == "approx"
    assert schemas.types.kind_of("industry-group").value == "string"
    assert schemas.types.kind_of("publisher").value == "string"
    schemas.check(parse_message(MESSAGE_5_2, max_octets=MAX).content)


def test_5_3_1_and_5_5_schemas_by_uri_name_configured_schemas() -> None:
    body = (
        "<createtopic topic='equity.quote.service' transID='9'>"
        + MESSAGE_SCHEMA_URI
        + SELECTOR_SCHEMAS_5_5[1]
        + "</createtopic>"
    ).encode()
    op = parse_operation(body)
    assert isinstance(op, CreateTopic)
    assert parse_operation(op.to_xml()) == op
    inline = MESSAGE_SCHEMA_5_3_1.split(">", 1)[1].rsplit("</message-schema>", 1)[0]
    local = LocalSchemas(
        {
            "http://www.example.com/schema/service.xsd": (
                f"<xsd:schema {XSD}>{inline}</xsd:schema>".encode()
            ),
            "http://www.example.com/schema/service-selector.xsd": (
                f"<xsd:schema {XSD}><xsd:element name='symbol' type='xsd:string'/></xsd:schema>"
            ).encode(),
        }
    )
    schemas = compile_topic(op.description.settings, local)
    assert schemas.types.kind_of("symbol").value == "string"
    schemas.check(parse_message(MESSAGE_5_2, max_octets=MAX).content)


def test_5_3_2_default_message_schema_compiles() -> None:
    body = f"<createtopic topic='t' transID='9'>{DEFAULT_MESSAGE_SCHEMA}</createtopic>"
    op = parse_operation(body.encode())
    assert isinstance(op, CreateTopic)
    compile_topic(op.description.settings, LocalSchemas())


@pytest.mark.parametrize("element", [SELECTOR_RFC_2254, SELECTOR_JMS])
def test_5_6_selectors_select_the_5_2_message(element: bytes) -> None:
    spec = selector_from(_dtd.parse_root(element), None)
    assert spec.name == "Select"
    selector = default_classes().compile(spec.selector_class, spec.text, TypeMap())
    assert selector is not None
    assert selector.matches(MessageView.of(parse_message(MESSAGE_5_2, max_octets=MAX).root))
    wrapped = f"<w xmlns:ps='{PUBSUB_NS}'>{spec.to_xml()}</w>".encode()
    assert selector_from(_dtd.element_children(_dtd.parse_root(wrapped))[0], None) == spec


def test_5_8_subscribe_and_its_reply() -> None:
    op = content_subscribe_from(_dtd.parse_root(SUBSCRIBE_5_8))
    assert op.topic == "equity.quote.service"
    assert op.subscriber == Endpoint.parse("jade@example.com")
    assert (op.duration, op.trans_id, op.cached) == (86400, 700, True)
    assert op.selector is not None
    assert op.selector.selector_class == "JMS"
    assert "symbol IN ('XMPL', 'TEST', 'SMPL')" in op.selector.text
    assert content_subscribe_from(_dtd.parse_root(op.to_xml())) == op
    reply = subscription_reply_from(_dtd.parse_root(REPLY_5_8))
    assert (reply.code, reply.trans_id, reply.subscription_id) == (250, 700, 100)
    assert subscription_reply_from(_dtd.parse_root(reply.to_xml())) == reply


def test_5_8_2_cancel() -> None:
    op = content_cancel_from(_dtd.parse_root(CANCEL_5_8_2))
    assert op == ContentCancel(trans_id=102, topic="equity.quote.service", subscription_id=100)
    assert content_cancel_from(_dtd.parse_root(op.to_xml())) == op


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        (INRE_ONE, {"jade@example.com": (100, 101)}),
        (INRE_TWO, {"user1@example.com": (100, 101), "user2@example.com": (200,)}),
    ],
)
def test_5_10_1_1_inre(example: bytes, expected: dict[str, tuple[int, ...]]) -> None:
    data = data_from(_dtd.parse_root(example))
    found = {str(r.identity): subscription_ids_of(r.options[0]) for r in data.recipients}
    assert found == expected


def test_6_2_topics_message_describes_a_topic() -> None:
    parsed = parse_message(TOPICS_6_2, max_octets=MAX)
    assert parsed.envelope.topic == TOPICS
    assert parsed.envelope.expiry is Expiry.NEVER
    children = _dtd.element_children(parsed.content)
    description = description_from(children, None, "content")
    assert description.topic_name == "equity.quote.service"
    assert description.disposition == "publish"
    assert description.publishers[0].endpoint == "stock-service@example.com"
    settings = description.settings
    schemas = compile_topic(settings, LocalSchemas())  # the 2000 namespace read as 2001
    assert schemas.types.kind_of("industry-group").value == "string"
    wkt = compile_topic(SETTINGS[TOPICS], LocalSchemas())
    wkt.check(
        parse_message(
            TOPICS_6_2.replace(
                b"<publisher>stock-service@example.com</publisher>",
                b"<publisher endpoint='stock-service@example.com'/>",
            ),
            max_octets=MAX,
        ).content
    )
    again = message_from(_dtd.parse_root(parsed.envelope.to_xml()))
    assert again.envelope == parsed.envelope


def test_6_2_2_topics_cancellation() -> None:
    parsed = parse_message(TOPICS_CANCEL_6_2_2, max_octets=MAX)
    assert (parsed.envelope.message_id, parsed.envelope.revision_id) == (10404, 1)
    description = description_from(_dtd.element_children(parsed.content), None, "content")
    assert description.disposition == "cancel"
    compile_topic(SETTINGS[TOPICS], LocalSchemas()).check(parsed.content)


def test_6_2_3_createtopic() -> None:
    op = parse_operation(CREATETOPIC_6_2_3)
    assert isinstance(op, CreateTopic)
    description = op.description
    assert description.publishers[0].endpoint == "stock-service@example.com"
    assert description.description is not None
    assert description.description.startswith("This service provides")
    assert [s.selector_class for s in description.settings.selector_schemas] == ["JMS"]
    assert parse_operation(op.to_xml()) == op


def test_6_3_subscriptions_message() -> None:
    parsed = parse_message(SUBSCRIPTIONS_6_3, max_octets=MAX)
    assert parsed.envelope.topic == SUBSCRIPTIONS
    compile_topic(SETTINGS[SUBSCRIPTIONS], LocalSchemas()).check(parsed.content)
    view = MessageView.of(parsed.root)
    assert view.texts["subscription-id"] == ("1090334",)
    assert view.texts["class"] == ("JMS",)


def test_old_subscribe_and_cancel_forms_still_parse() -> None:
    old = b"<subscribe subscriber='jade@example.com' topic='t' transID='7' duration='60' />"
    assert content_subscribe_from(_dtd.parse_root(old)) == ContentSubscribe(
        topic="t",
        subscriber=Endpoint.parse("jade@example.com"),
        duration=60,
        trans_id=7,
    )
    cancel = b"<cancel topic='t' transID='8' />"
    assert content_cancel_from(_dtd.parse_root(cancel)) == ContentCancel(trans_id=8, topic="t")


def test_dates_keep_their_instant() -> None:
    parsed = parse_message(MESSAGE_5_2, max_octets=MAX)
    assert parsed.envelope.publication_date.astimezone(UTC) == datetime(
        2002, 3, 15, 20, 15, tzinfo=UTC
    )
