"""A topic's message schema and selector schemas, compiled once and applied
(draft-wyman-apex-pubsub-00 sections 5.3, 5.5 and 5.9.1).

- Publishing to a topic with a message schema validates the message body with lxml's
  XMLSchema (through :func:`apexmesh.beep.xml.compile_schema`): 561 with the validator's
  first error when it does not conform. Without one, the default message schema of 5.3.2
  applies, which admits any body.
- The selector schema gives identifiers their types (:class:`TypeMap`); without one the
  message schema is the selector schema (5.5.1); without either every identifier is
  allowed, untyped. The header fields of 5.2.1 are always selectable.
- Schemas by URI are names of schemas the operator configured (:class:`LocalSchemas`);
  any other URI is refused (553) and nothing is ever fetched. Imports and includes may
  name only configured schemas too. Inline schemas arrive inside XML that the hardened
  parser already read (no DOCTYPE, so no entity expansion).

Compiling costs milliseconds, so :class:`SchemaCache` keeps each topic version's
compiled schemas (a :class:`BoundedCache`); a topic's schemas change only with its
version, so a stale entry is never used.

Readings: the body a message schema describes is the one element inside ``content``; a
schema that declares a global ``content`` element (as the Topics and Subscriptions
schemas of 8.3 and 8.4 do) describes ``content`` itself. Schemas in the pre-Recommendation
namespace the draft uses (``http://www.w3.org/2000/10/XMLSchema``) are read as XML Schema
1.0; bare ``xsd:element`` declarations (5.3.1's example) are wrapped in a schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import ELEMENT_NODES, Element, XmlError, XmlSchema, compile_schema, to_bytes
from apexmesh.common.cache import BoundedCache
from apexmesh.pubsub.selection.types import TypeMap, local_name
from apexmesh.pubsub.topic_description import SchemaSource, TopicSettings

XSD_NS: Final = "http://www.w3.org/2001/XMLSchema"
#: The namespace of the draft's schemas (a 2000 working draft of XML Schema).
XSD_2000_NS: Final = "http://www.w3.org/2000/10/XMLSchema"
_XSD_NAMESPACES: Final = frozenset({XSD_NS, XSD_2000_NS})
_IMPORTS: Final = frozenset({"import", "include", "redefine", "override"})

#: Compiled topic schemas kept per pod (topics with a schema; the rest need none).
DEFAULT_SCHEMA_CACHE_LIMIT: Final = 1024


def _bad_schema(message: str) -> ApexError:
    """553: the createtopic's schema parameter cannot be used."""
    return ApexError(ApexReplyCode.PARAMETER_INVALID, message)


class LocalSchemas:
    """The schemas an operator configured, by the URI topics may name them with."""

    __slots__ = ("documents",)

    def __init__(self, documents: Mapping[str, bytes] | None = None) -> None:
        """Raises ValueError for a document the hardened parser refuses (a DOCTYPE, an
        entity, too large or deep): an operator's mistake, reported at start-up."""
        for uri, text in (documents or {}).items():
            try:
                _dtd.parse_root(text)
            except ApexError as exc:
                raise ValueError(f"configured schema {uri}: {exc}") from None
        self.documents: Mapping[str, bytes] = MappingProxyType(dict(documents or {}))

    def document(self, uri: str) -> bytes:
        text = self.documents.get(uri)
        if text is None:
            raise _bad_schema(
                f"schema {uri[:128]!r} is not one this service has (schemas are never fetched)"
            )
        return text


def _namespace(element: Element) -> str:
    tag = _dtd.tag_of(element)
    return tag[1:].partition("}")[0] if tag.startswith("{") else ""


def schema_text(source: SchemaSource, local: LocalSchemas) -> bytes:
    """The XML Schema document a source stands for: the configured document for a URI,
    the inline text (wrapped in ``xs:schema`` when it is bare declarations) otherwise,
    with the draft's 2000 namespace read as the 2001 one."""
    text = local.document(source.uri) if source.uri is not None else source.inline
    text = text.replace(XSD_2000_NS.encode(), XSD_NS.encode())
    root = _dtd.parse_root(b"<wrapper>" + text + b"</wrapper>")
    children = list(root.iterchildren(ELEMENT_NODES))
    if len(children) == 1 and local_name(_dtd.tag_of(children[0])) == "schema":
        return to_bytes(children[0]).strip()
    if not children or any(_namespace(c) != XSD_NS for c in children):
        raise _bad_schema("a schema holds an xs:schema or XML Schema declarations only")
    body = b"".join(to_bytes(child) for child in children)
    return f"<xs:schema xmlns:xs='{XSD_NS}'>".encode() + body + b"</xs:schema>"


def declarations(text: bytes) -> list[tuple[str, str | None]]:
    """(name, type local name) of every named element and attribute declaration."""
    found: list[tuple[str, str | None]] = []
    for element in _dtd.parse_root(text).iter(ELEMENT_NODES):
        if _namespace(element) not in _XSD_NAMESPACES:
            continue
        kind = local_name(_dtd.tag_of(element))
        name = element.get("name")
        if kind in ("element", "attribute") and name:
            type_name = element.get("type")
            found.append((name, None if type_name is None else type_name.rpartition(":")[2]))
    return found


def _check_imports(text: bytes, local: LocalSchemas) -> None:
    for element in _dtd.parse_root(text).iter(ELEMENT_NODES):
        if _namespace(element) in _XSD_NAMESPACES and local_name(_dtd.tag_of(element)) in _IMPORTS:
            location = element.get("schemaLocation")
            if location is not None:
                local.document(location)


def _global_names(text: bytes) -> frozenset[str]:
    root = _dtd.parse_root(text)
    return frozenset(
        str(child.get("name"))
        for child in root.iterchildren(ELEMENT_NODES)
        if local_name(_dtd.tag_of(child)) == "element" and child.get("name")
    )


@dataclass(frozen=True, slots=True)
class MessageSchema:
    """A compiled message schema."""

    schema: XmlSchema
    #: True when it declares ``content`` itself (8.3, 8.4), else it describes the body.
    describes_content: bool

    def check(self, content: Element) -> None:
        """561 with the validator's first error when the body inside ``content`` does
        not conform."""
        if self.describes_content:
            target = _dtd.parse_root(b"<content>" + _dtd.inner_xml(content) + b"</content>")
        else:
            bodies = list(content.iterchildren(ELEMENT_NODES))
            if len(bodies) != 1 or (content.text or "").strip():
                raise ApexError(
                    ApexReplyCode.INVALID_MESSAGE,
                    "the content must be one element described by the topic's message schema",
                )
            target = bodies[0]
        self.check_body(target)

    def check_body(self, body: Element) -> None:
        """561 when ``body`` (a message's body element) does not conform."""
        error = self.schema.first_error(body)
        if error is not None:
            raise ApexError(ApexReplyCode.INVALID_MESSAGE, f"message does not conform: {error}")


@dataclass(frozen=True, slots=True)
class TopicSchemas:
    """What publishing and subscribing to one topic version need."""

    message: MessageSchema | None
    types: TypeMap
    #: Selector classes the topic's selector schemas name; None: every class the
    #: service supports (no selector schema restricts them).
    classes: frozenset[str] | None

    def check(self, content: Element) -> None:
        """561 unless the body inside an envelope's ``content`` conforms."""
        if self.message is not None:
            self.message.check(content)

    def check_body(self, body: Element) -> None:
        """561 unless a body sent without an envelope conforms."""
        if self.message is not None:
            self.message.check_body(body)

    def allows_class(self, name: str) -> bool:
        return self.classes is None or name.casefold() in self.classes


DEFAULTS: Final = TopicSchemas(message=None, types=TypeMap(), classes=None)


def compile_topic(settings: TopicSettings, local: LocalSchemas) -> TopicSchemas:
    """Compile a topic's schemas; 553 when one cannot be used (not XML Schema, an
    unconfigured URI or import)."""
    if not settings.has_schemas:
        return DEFAULTS
    message = None
    message_decls: list[tuple[str, str | None]] = []
    if settings.message_schema is not None:
        text = schema_text(settings.message_schema, local)
        _check_imports(text, local)
        try:
            compiled = compile_schema(text, documents=local.documents)
        except XmlError as exc:
            raise _bad_schema(f"message-schema: {exc}") from None
        message = MessageSchema(compiled, "content" in _global_names(text))
        message_decls = declarations(text)
    selector_decls: list[tuple[str, str | None]] = []
    explicit = False
    for source in settings.selector_schemas:
        if source.is_default:
            continue
        explicit = True
        selector_decls += declarations(schema_text(source, local))
    types = TypeMap.from_declarations(selector_decls if explicit else message_decls)
    classes = frozenset(
        s.selector_class.casefold() for s in settings.selector_schemas if s.selector_class
    )
    return TopicSchemas(message=message, types=types, classes=classes or None)


class SchemaCache:
    """Compiled schemas per (domain, topic, version): a topic's settings change only
    with its version, so an entry is never stale."""

    __slots__ = ("_cache", "local")

    def __init__(self, local: LocalSchemas, limit: int = DEFAULT_SCHEMA_CACHE_LIMIT) -> None:
        self.local = local
        self._cache: BoundedCache[tuple[str, str, int], TopicSchemas] = BoundedCache(
            "pubsub.topic_schemas", limit
        )

    def get(self, domain: str, topic: str, version: int, settings: TopicSettings) -> TopicSchemas:
        if not settings.has_schemas:
            return DEFAULTS
        return self._cache.get_or_build(
            (domain, topic, version), lambda: compile_topic(settings, self.local)
        )


__all__ = [
    "DEFAULTS",
    "DEFAULT_SCHEMA_CACHE_LIMIT",
    "XSD_2000_NS",
    "XSD_NS",
    "LocalSchemas",
    "MessageSchema",
    "SchemaCache",
    "TopicSchemas",
    "compile_topic",
    "declarations",
    "schema_text",
]
