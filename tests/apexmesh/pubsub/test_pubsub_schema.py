"""Topic schemas (apexmesh/pubsub/schema.py): 561 with the validator's first error,
schemas by URI only when configured, imports never fetched, entity expansion refused,
compiled once per topic version."""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest

from apexmesh.apex import _dtd
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import XmlError, compile_schema
from apexmesh.pubsub.elements import CreateTopic, parse_operation
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.pubsub.schema import DEFAULTS, LocalSchemas, SchemaCache, compile_topic
from apexmesh.pubsub.selection.types import Kind
from apexmesh.pubsub.topic_description import SchemaSource, TopicSettings

pytestmark = pytest.mark.unit

XS = "xmlns:xs='http://www.w3.org/2001/XMLSchema'"
QUOTE = f"""<xs:schema {XS}>
  <xs:element name='quote'>
    <xs:complexType>
      <xs:sequence><xs:element name='price' type='xs:decimal'/></xs:sequence>
      <xs:attribute name='symbol' type='xs:string' use='required'/>
    </xs:complexType>
  </xs:element>
</xs:schema>""".encode()


def _content(inner: str) -> _dtd.Element:
    return _dtd.parse_root(f"<content>{inner}</content>".encode())


def _settings(text: bytes) -> TopicSettings:
    return TopicSettings(message_schema=SchemaSource(inline=text))


def test_561_carries_the_validators_first_error() -> None:
    schemas = compile_topic(_settings(QUOTE), LocalSchemas())
    schemas.check(_content("<quote symbol='X'><price>1.5</price></quote>"))
    cases = [
        ("<quote><price>1.5</price></quote>", "symbol"),
        ("<quote symbol='X'><price>cheap</price></quote>", "cheap"),
        ("<quote symbol='X'/>", "price"),
        ("<other/>", "other"),
        (
            "<quote symbol='X'><price>1</price></quote><quote symbol='Y'><price>2</price></quote>",
            "one element",
        ),
        ("text", "one element"),
    ]
    for body, mentioned in cases:
        with pytest.raises(ApexError) as caught:
            schemas.check(_content(body))
        assert caught.value.code == 561, body
        assert mentioned in str(caught.value), body


def test_a_body_without_an_envelope_is_validated_itself() -> None:
    schemas = compile_topic(_settings(QUOTE), LocalSchemas())
    schemas.check_body(_dtd.parse_root(b"<quote symbol='X'><price>2</price></quote>"))
    with pytest.raises(ApexError) as caught:
        schemas.check_body(_dtd.parse_root(b"<quote><price>2</price></quote>"))
    assert caught.value.code == 561
    DEFAULTS.check_body(_dtd.parse_root(b"<anything/>"))  # 5.3.2: any body


def test_an_unconfigured_uri_is_553_and_a_configured_one_is_used() -> None:
    settings = TopicSettings(message_schema=SchemaSource(uri="http://127.0.0.1:9/q.xsd"))
    with pytest.raises(ApexError) as caught:
        compile_topic(settings, LocalSchemas())
    assert caught.value.code == 553
    assert "never fetched" in str(caught.value)
    schemas = compile_topic(settings, LocalSchemas({"http://127.0.0.1:9/q.xsd": QUOTE}))
    assert schemas.types.kind_of("price") is Kind.APPROX


@pytest.mark.parametrize(
    "location", ["http://127.0.0.1:9/evil.xsd", "file:///etc/passwd", "evil.xsd", "//x/y"]
)
def test_imports_and_includes_of_unconfigured_locations_are_553(location: str) -> None:
    for element in ("import namespace='urn:x'", "include"):
        text = (
            f"<xs:schema {XS}><xs:{element} schemaLocation='{location}'/>"
            "<xs:element name='a'/></xs:schema>"
        )
        with pytest.raises(ApexError) as caught:
            compile_topic(_settings(text.encode()), LocalSchemas())
        assert caught.value.code == 553


def test_a_configured_import_is_resolved_locally() -> None:
    imported = (
        f"<xs:schema {XS} targetNamespace='urn:x'><xs:element name='y' type='xs:int'/></xs:schema>"
    )
    text = (
        f"<xs:schema {XS} xmlns:x='urn:x'><xs:import namespace='urn:x' schemaLocation='x.xsd'/>"
        "<xs:element name='a'><xs:complexType><xs:sequence><xs:element ref='x:y'/>"
        "</xs:sequence></xs:complexType></xs:element></xs:schema>"
    )
    schemas = compile_topic(_settings(text.encode()), LocalSchemas({"x.xsd": imported.encode()}))
    schemas.check(_content("<a><y xmlns='urn:x'>1</y></a>"))
    with pytest.raises(ApexError):
        schemas.check(_content("<a><y xmlns='urn:x'>one</y></a>"))


def test_the_compiler_never_opens_a_connection() -> None:
    """Even past the pre-check, the resolver answers an unknown location with a document
    that is no schema: a listening socket on loopback sees no connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    accepted: list[object] = []

    def watch() -> None:
        with contextlib.suppress(OSError):
            accepted.append(server.accept())

    watcher = threading.Thread(target=watch)
    watcher.start()
    text = (
        f"<xs:schema {XS}><xs:include schemaLocation='http://127.0.0.1:{port}/x.xsd'/></xs:schema>"
    )
    with pytest.raises(XmlError):
        compile_schema(text.encode())
    watcher.join()
    server.close()
    assert accepted == []


def test_entity_expansion_is_refused_inline_and_in_configuration() -> None:
    bomb = (
        "<!DOCTYPE x [<!ENTITY a 'aaaaaaaaaa'><!ENTITY b '&a;&a;&a;&a;&a;&a;&a;&a;'>]>"
        "<createtopic topic='t' transID='1'><message-schema>"
        f"<xs:schema {XS}><xs:element name='a' fixed='&b;'/></xs:schema>"
        "</message-schema></createtopic>"
    )
    with pytest.raises(ApexError) as caught:
        parse_operation(bomb.encode())
    assert caught.value.code == 501
    with pytest.raises(ValueError, match="configured schema"):
        LocalSchemas({"x.xsd": b"<!DOCTYPE x [<!ENTITY a 'a'>]><xs:schema/>"})


def test_what_is_not_a_schema_is_553() -> None:
    for text in (b"<notaschema/>", f"<xs:schema {XS}><xs:element/></xs:schema>".encode(), b""):
        with pytest.raises(ApexError) as caught:
            compile_topic(_settings(text), LocalSchemas())
        assert caught.value.code == 553, text


def test_the_2000_namespace_and_bare_declarations_are_read() -> None:
    old = (
        b"<xs:schema xmlns:xs='http://www.w3.org/2000/10/XMLSchema'>"
        b"<xs:element name='n' type='xs:int'/></xs:schema>"
    )
    compile_topic(_settings(old), LocalSchemas()).check(_content("<n>3</n>"))
    bare = f"<xs:element {XS} name='n' type='xs:boolean'/>".encode()
    schemas = compile_topic(_settings(bare), LocalSchemas())
    assert schemas.types.kind_of("n") is Kind.BOOLEAN
    with pytest.raises(ApexError):
        schemas.check(_content("<n>3</n>"))


def test_selector_schemas_type_identifiers_and_restrict_classes() -> None:
    settings = TopicSettings(
        message_schema=SchemaSource(inline=QUOTE),
        selector_schemas=(
            SchemaSource(
                selector_class="RFC-2254",
                inline=f"<xs:element {XS} name='industry' type='xs:string'/>".encode(),
            ),
        ),
    )
    schemas = compile_topic(settings, LocalSchemas())
    assert schemas.types.kind_of("industry") is Kind.STRING
    with pytest.raises(ApexError) as caught:
        schemas.types.kind_of("price")  # the message schema no longer the selector schema
    assert caught.value.code == 567
    assert schemas.allows_class("rfc-2254")
    assert not schemas.allows_class("JMS")
    default = compile_topic(
        TopicSettings(message_schema=SchemaSource(inline=QUOTE)), LocalSchemas()
    )
    assert default.types.kind_of("price") is Kind.APPROX  # 5.5.1: the message schema
    assert default.allows_class("JMS")


def test_the_cache_compiles_once_per_topic_version() -> None:
    cache = SchemaCache(LocalSchemas(), limit=2)
    settings = _settings(QUOTE)
    first = cache.get("d", "t", 1, settings)
    assert cache.get("d", "t", 1, settings) is first
    assert cache.get("d", "t", 2, settings) is not first
    assert cache.get("d", "u", 1, TopicSettings()) is DEFAULTS


def test_createtopic_settings_survive_the_event_log_text() -> None:
    op = parse_operation(
        f"<createtopic topic='t' transID='1'><message-schema>{QUOTE.decode()}</message-schema>"
        "<selector-schema class='JMS'/></createtopic>".encode()
    )
    assert isinstance(op, CreateTopic)
    text = op.description.settings.to_json()
    assert TopicSettings.from_json(text) == op.description.settings
    assert TopicSettings.from_json("") == TopicSettings()
    assert TopicSettings().to_json() == ""
    # Keys of later settings are ignored; the robust settings (issue #19) are read, and
    # unreadable ones are an error, never guessed at.
    assert TopicSettings.from_json('{"later": {"x": 1}}') == TopicSettings()
    robust = TopicSettings(robust=RobustSettings(heartbeat_ms=200))
    assert TopicSettings.from_json(robust.to_json()) == robust
    with pytest.raises(ValueError, match="robust"):
        TopicSettings.from_json('{"robust": {"x": 1}}')
