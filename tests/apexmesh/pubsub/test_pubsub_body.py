"""How a published body is read for selection (apexmesh/pubsub/body.py): draft-wyman
7.2 and 7.3 ("text processing for the text/* types (e.g. text/html) and will not process
application or binary content types") with the default message schema of 5.3.2 (the body
"in its entirety" enclosed in ``message-content``): a text body is the text of
``message-content``, searched by both classes; a body not processed selects nothing and
reaches only the subscriptions without a selector; a topic with a message schema takes
XML only (561)."""

from __future__ import annotations

import pytest

from apexmesh.apex.content import MimePart
from apexmesh.apex.data import DataContent
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub import content_core as cc
from apexmesh.pubsub.body import (
    Body,
    BodyKind,
    charset_of,
    decoded,
    kind_of_media,
    read_body,
)
from apexmesh.pubsub.changes import Subscription
from apexmesh.pubsub.matcher import Matcher
from apexmesh.pubsub.message import ParsedMessage
from apexmesh.pubsub.schema import DEFAULTS, LocalSchemas, compile_topic
from apexmesh.pubsub.selection.registry import default_classes
from apexmesh.pubsub.selection.types import DEFAULT_ROOT, MessageView, TypeMap
from apexmesh.pubsub.topic_description import SchemaSource, TopicSettings

pytestmark = pytest.mark.unit

CLASSES = default_classes()
NOW = 1_000_000
XS = "xmlns:xs='http://www.w3.org/2001/XMLSchema'"


def part(content_type: str, body: bytes, *, params: str = "") -> MimePart:
    header = content_type + (f"; {params}" if params else "")
    return MimePart("1@example.com", content_type, (("Content-Type", header),), body)


def text_body(text: str, content_type: str = "text/plain") -> Body:
    return read_body(part(content_type, text.encode()), text.encode())


# --------------------------------------------------------------------------- media types


@pytest.mark.parametrize(
    ("media", "kind"),
    [
        ("application/beep+xml", BodyKind.XML),
        ("application/xml", BodyKind.XML),
        ("text/xml", BodyKind.XML),  # XML, not text: the draft's messages are XML (5.2)
        ("image/svg+xml", BodyKind.XML),
        ("application/atom+xml", BodyKind.XML),
        ("text/plain", BodyKind.TEXT),
        ("text/html", BodyKind.TEXT),  # 7.2's own example of a text/* type
        ("text/csv", BodyKind.TEXT),
        ("text/enriched", BodyKind.TEXT),
        ("application/octet-stream", BodyKind.OPAQUE),
        ("application/json", BodyKind.OPAQUE),  # an application type: not processed
        ("image/gif", BodyKind.OPAQUE),
        ("audio/basic", BodyKind.OPAQUE),
        ("multipart/mixed", BodyKind.OPAQUE),
    ],
)
def test_kind_by_media_type(media: str, kind: BodyKind) -> None:
    assert kind_of_media(media) is kind


def test_charset_and_decoding() -> None:
    assert charset_of("text/plain; charset=ISO-8859-1") == "iso-8859-1"
    assert charset_of('text/plain; charset="utf-16"') == "utf-16"
    assert charset_of("text/plain") == "utf-8"
    assert charset_of("") == "utf-8"
    assert decoded("café".encode("iso-8859-1"), "iso-8859-1") == "café"
    assert decoded(b"caf\xe9", "utf-8") == "caf\ufffd"  # undecodable octets replaced
    assert decoded(b"x", "no-such-charset") is None
    assert decoded(b"x", "zlib") is None  # a codec, but not a text encoding


# --------------------------------------------------------------------------- reading


def test_a_text_body_is_the_text_of_message_content() -> None:
    body = text_body("  XMPL rose 7 percent\n")
    assert body.kind is BodyKind.TEXT
    assert body.message is None
    view = body.view()
    assert view is not None
    # The layout around a text body is not its text (body.py); selectors used to trim
    # every string they compared, they now compare XML text exactly (issue #34).
    assert view.texts == {DEFAULT_ROOT: ("XMPL rose 7 percent",)}


def test_html_markup_is_text_too() -> None:
    body = text_body("<p class='x'>XMPL <b>up</b></p>", "text/html")
    view = body.view()
    assert view is not None
    assert set(view.texts) == {DEFAULT_ROOT}  # no element or attribute names from HTML
    assert "<b>up</b>" in view.texts[DEFAULT_ROOT][0]


def test_a_text_body_in_its_charset() -> None:
    octets = "Société Générale".encode("iso-8859-1")
    body = read_body(part("text/plain", octets, params="charset=iso-8859-1"), octets)
    view = body.view()
    assert view is not None
    assert view.texts[DEFAULT_ROOT] == ("Société Générale",)
    unknown = read_body(part("text/plain", b"x", params="charset=x-unknown"), b"x")
    assert unknown.kind is BodyKind.OPAQUE


def test_xml_bodies_are_elements() -> None:
    inline = read_body(DataContent(name="Content", content=b"<q s='A'/>"), b"<q s='A'/>")
    assert inline.kind is BodyKind.XML
    view = inline.view()
    assert view is not None
    assert view.texts == {"q": ("",), "s": ("A",)}
    as_part = read_body(part("application/xml", b"<q s='A'/>"), b"<q s='A'/>")
    assert as_part.view() is not None
    assert as_part.view().texts == view.texts  # type: ignore[union-attr]


def test_xml_content_that_is_not_one_element_is_enclosed_as_5_3_2_says() -> None:
    text = read_body(DataContent(name="Content", content=b"XMPL up"), b"XMPL up")
    assert text.kind is BodyKind.XML
    view = text.view()
    assert view is not None
    assert view.texts == {DEFAULT_ROOT: ("XMPL up",)}
    several = read_body(part("text/xml", b"<a>1</a><b>2</b>"), b"<a>1</a><b>2</b>")
    view = several.view()
    assert view is not None
    assert view.texts == {DEFAULT_ROOT: (), "a": ("1",), "b": ("2",)}


def test_xml_that_is_not_well_formed_and_other_types_are_not_processed() -> None:
    assert read_body(part("application/xml", b"<a><b></a>"), b"<a><b></a>").kind is (
        BodyKind.OPAQUE
    )
    octets = b"<q s='A'/>"  # XML octets, but sent as octets: not processed (7.2, 7.3)
    opaque = read_body(part("application/octet-stream", octets), octets)
    assert opaque.kind is BodyKind.OPAQUE
    assert opaque.view() is None
    assert read_body(part("image/gif", b"GIF89a"), b"GIF89a").view() is None


def test_an_envelope_is_read_as_one() -> None:
    envelope = (
        b"<ps:message-content transID='1' content='#C' xmlns:ps='http://www.example.com/pubsub'>"
        b"<ps:topic>t</ps:topic><ps:publisher>p@example.com</ps:publisher>"
        b"<ps:publication-date>2002-03-15T12:15:00Z</ps:publication-date>"
        b"<ps:content Name='C'>text inside</ps:content></ps:message-content>"
    )
    body = read_body(DataContent(name="Content", content=envelope), envelope)
    assert isinstance(body.message, ParsedMessage)
    view = body.view()
    assert view is not None
    # The envelope's content='#C' attribute is an instance of "content" too (7.2).
    assert view.texts["content"] == ("#C", "text inside")
    broken = envelope.replace(b"<ps:topic>t</ps:topic>", b"")
    with pytest.raises(ApexError) as refused:
        read_body(DataContent(name="Content", content=broken), broken)
    assert refused.value.code == 501


# --------------------------------------------------------------------------- selection

TEXT = "  Example, Inc. (XMPL) rose 7.5 percent; *stars* (parens) \\ back\n"


@pytest.mark.parametrize(
    ("selector_class", "selector", "selected"),
    [
        # RFC-2254 (7.2): substrings search the text, = compares all of it.
        ("RFC-2254", "(message-content=*XMPL*)", True),
        ("RFC-2254", "(message-content=*MSFT*)", False),
        ("RFC-2254", "(message-content=Example*)", True),  # outer white space is not text
        ("RFC-2254", "(message-content=*back)", True),
        ("RFC-2254", "(message-content=Example*rose*percent*back)", True),
        ("RFC-2254", "(message-content=*percent*rose*)", False),  # in order
        ("RFC-2254", r"(message-content=*\2astars\2a*)", True),  # escaped '*'
        ("RFC-2254", r"(message-content=*\28parens\29*)", True),  # escaped '(' ')'
        ("RFC-2254", r"(message-content=*\5c back*)", True),  # escaped '\'
        ("RFC-2254", "(message-content=*xmpl*)", False),  # case-sensitive
        ("RFC-2254", "(message-content=*)", True),  # present
        ("RFC-2254", "(symbol=*)", False),  # a text body has no other identifier
        ("RFC-2254", "(symbol=XMPL)", False),
        ("RFC-2254", "(!(symbol=XMPL))", True),  # two-valued logic (ldap.py)
        ("RFC-2254", "(&(message-content=*XMPL*)(message-content=*7.5*))", True),
        ("RFC-2254", "(|(message-content=*MSFT*)(message-content=*rose*))", True),
        ("RFC-2254", "(message-content=Example, Inc. (XMPL) rose)", 567),  # '(' unescaped
        (
            "RFC-2254",
            (
                r"(message-content=Example, Inc. \28XMPL\29 rose 7.5 percent; \2astars\2a "
                r"\28parens\29 \5c back)"
            ),
            True,  # the whole text, outer white space removed
        ),
        ("RFC-2254", "(message-content~=example, inc.*)", 567),  # ~= has no wildcards
        (
            "RFC-2254",
            (
                r"(message-content~=EXAMPLE,  INC. \28XMPL\29 ROSE 7.5 PERCENT; \2aSTARS\2a"
                r" \28PARENS\29 \5c BACK)"
            ),
            True,  # ~= ignores case and runs of spaces
        ),
        # JMS (7.3): the same text, LIKE for searching.
        ("JMS", "message-content LIKE '%XMPL%'", True),
        ("JMS", "message-content LIKE '%xmpl%'", False),
        ("JMS", "message-content NOT LIKE '%MSFT%'", True),
        ("JMS", "message-content LIKE 'Example%back'", True),
        ("JMS", r"message-content LIKE '%\%%' ESCAPE '\'", False),  # no '%' in the text
        ("JMS", "message-content LIKE '%*stars*%'", True),
        ("JMS", "message-content LIKE '%7_5 percent%'", True),
        ("JMS", "message-content IS NOT NULL", True),
        ("JMS", "symbol IS NULL", True),
        ("JMS", "symbol = 'XMPL'", False),  # NULL: UNKNOWN, not selected
        ("JMS", "message-content LIKE '%XMPL%' AND symbol IS NULL", True),
    ],
)
def test_both_classes_search_a_text_body(
    selector_class: str, selector: str, selected: bool | int
) -> None:
    if selected == 567:
        with pytest.raises(ApexError) as refused:
            CLASSES.compile(selector_class, selector, TypeMap())
        assert refused.value.code == 567
        return
    compiled = CLASSES.compile(selector_class, selector, TypeMap())
    assert compiled is not None
    view = text_body(TEXT).view()
    assert view is not None
    assert compiled.matches(view) is selected


def test_a_number_in_a_text_body_compares_as_a_number() -> None:
    view = text_body(" 42 ").view()
    assert view is not None
    for text, selected in (
        ("(message-content>=41.5)", True),
        ("(message-content<=41)", False),
        ("(message-content=42)", True),
    ):
        compiled = CLASSES.compile("RFC-2254", text, TypeMap())
        assert compiled is not None
        assert compiled.matches(view) is selected
    jms = CLASSES.compile("JMS", "message-content BETWEEN 40 AND 50", TypeMap())
    assert jms is not None
    assert jms.matches(view)


# --------------------------------------------------------------------------- publishing


Topic = tuple[Matcher[cc.SubscriptionKey], dict[cc.SubscriptionKey, Subscription]]


def _topic(*rows: tuple[str, int | None, str | None]) -> Topic:
    matcher: Matcher[cc.SubscriptionKey] = Matcher()
    subs: dict[cc.SubscriptionKey, Subscription] = {}
    for who, identifier, text in rows:
        endpoint = Endpoint.parse(who)
        sub = Subscription(
            topic="news",
            subscriber=endpoint,
            originator=endpoint,
            trans_id=1,
            expires_ms=NOW + 60_000,
            subscription_id=identifier,
            selector_class="" if text is None else ("RFC-2254" if text[0] == "(" else "JMS"),
            selector=text or "",
        )
        subs[sub.key] = sub
        selector = None if text is None else CLASSES.compile(sub.selector_class, text, TypeMap())
        matcher.add(sub.key, selector)
    return matcher, subs


ROWS = (
    ("ldap@example.com", 1, "(message-content=*XMPL*)"),
    ("jms@example.com", 1, "message-content LIKE '%XMPL%'"),
    ("other@example.com", 1, "(message-content=*MSFT*)"),
    ("absent@example.com", 1, "(!(symbol=XMPL))"),  # true of a message without symbol
    ("null@example.com", 1, "symbol IS NULL"),
    ("everything@example.com", 1, None),
    ("plain@example.com", None, None),
)


def test_publishing_a_text_body_selects_by_its_text() -> None:
    matcher, subs = _topic(*ROWS)
    body = text_body("XMPL rose")
    plan = cc.publish(
        Endpoint.parse("fred@example.com"),
        body.message,
        body.view(),
        exists=True,
        allowed=True,
        schemas=DEFAULTS,
        matcher=matcher,
        subscriptions=subs,
        now_ms=NOW,
    )
    assert plan.code == 250
    assert plan.deliveries is not None
    assert {str(e): ids for e, ids in plan.deliveries.items()} == {
        "ldap@example.com": (1,),
        "jms@example.com": (1,),
        "absent@example.com": (1,),
        "null@example.com": (1,),
        "everything@example.com": (1,),
        "plain@example.com": (),
    }


def test_a_body_not_processed_reaches_only_subscriptions_without_a_selector() -> None:
    matcher, subs = _topic(*ROWS)
    octets = b"\x89PNG XMPL"
    body = read_body(part("image/png", octets), octets)
    plan = cc.publish(
        Endpoint.parse("fred@example.com"),
        body.message,
        body.view(),
        exists=True,
        allowed=True,
        schemas=DEFAULTS,
        matcher=matcher,
        subscriptions=subs,
        now_ms=NOW,
    )
    assert plan.code == 250
    assert plan.deliveries is not None
    # Not even the selectors that are true of a message without identifiers.
    assert {str(e): ids for e, ids in plan.deliveries.items()} == {
        "everything@example.com": (1,),
        "plain@example.com": (),
    }


def test_a_topic_with_a_message_schema_takes_xml_only() -> None:
    schemas = compile_topic(
        TopicSettings(message_schema=SchemaSource(inline=f"<xs:element {XS} name='q'/>".encode())),
        LocalSchemas(),
    )
    matcher, subs = _topic(*ROWS)
    for body in (text_body("XMPL"), read_body(part("image/gif", b"GIF"), b"GIF")):
        plan = cc.publish(
            Endpoint.parse("fred@example.com"),
            body.message,
            body.view(),
            exists=True,
            allowed=True,
            schemas=schemas,
            matcher=matcher,
            subscriptions=subs,
            now_ms=NOW,
        )
        assert (plan.code, plan.step) == (561, "5.9.1")
    assert MessageView.of_text("x").texts == {DEFAULT_ROOT: ("x",)}
