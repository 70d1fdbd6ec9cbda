"""A topic's description: the children of an extended ``createtopic`` (draft-wyman-apex-
pubsub-00 section 6.2.3, DTD of 8.1) and the body of a Topics-topic message (6.2, 8.3).

``(topic-name?, disposition?, publisher*, description?, message-schema?,
selector-schema*)``: the message schema (5.3) and selector schemas (5.5), each inline or
by URI, are what content-based selection needs; the rest is information for people.

Readings (also in docs/pubsub.md):

- ``publisher`` is EMPTY with an ``endpoint`` attribute in the DTD (8.1) but holds the
  endpoint as text in the example of 6.2.3: both are read, written as the DTD says.
- A schema ``uri`` is only a name: it must be one the operator configured locally (the
  service refuses any other with 553 and never fetches one, see
  :mod:`apexmesh.pubsub.schema`).
- :class:`TopicSettings` is what the service stores and logs (event log schema v2,
  ``topic.created`` field ``settings``): the schemas as JSON text, and a robust topic's
  settings under the key ``robust`` (the attributes of its createtopic, docs/robust.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from apexmesh.apex import _dtd
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import Element, escape_text
from apexmesh.pubsub._fields import PUBSUB_NS, pubsub_tag, text_of
from apexmesh.pubsub.robust.settings import RobustSettings

_ORDER: Final = (
    "topic-name",
    "disposition",
    "publisher",
    "description",
    "message-schema",
    "selector-schema",
)
_REPEATABLE: Final = frozenset({"publisher", "selector-schema"})
#: Dispositions of a Topics-topic message (6.2.2).
DISPOSITIONS: Final = ("publish", "cancel")


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaSource:
    """A message or selector schema (5.3.1, 5.5): inline XML, or a URI naming one."""

    uri: str | None = None
    #: The element's content as application/beep+xml text (an ``xs:schema``, or bare
    #: ``xs:element`` declarations as in 5.3.1); empty with a URI, or for a selector
    #: schema that only names its class (5.5.1: the message schema is used).
    inline: bytes = b""
    #: The selector class (selector schemas only).
    selector_class: str | None = None

    def __post_init__(self) -> None:
        if self.uri is not None and self.inline.strip():
            _dtd.fail("a schema is given inline or by uri, not both")
        if self.uri is not None and not _dtd.is_uri_reference(self.uri):
            _dtd.fail(f"schema uri {self.uri[:64]!r} is not a URI")

    @property
    def is_default(self) -> bool:
        """A selector schema naming only its class: the message schema applies (5.5.1)."""
        return self.uri is None and not self.inline.strip()

    def to_xml(self, tag: str) -> bytes:
        head = ""
        if self.selector_class is not None:
            head += _dtd.attr("class", self.selector_class)
        if self.uri is not None:
            head += _dtd.attr("uri", self.uri)
        return _dtd.container(tag, head, self.inline)

    def to_json(self) -> dict[str, str]:
        found: dict[str, str] = {}
        if self.selector_class is not None:
            found["class"] = self.selector_class
        if self.uri is not None:
            found["uri"] = self.uri
        if self.inline.strip():
            found["inline"] = self.inline.decode("utf-8")
        return found

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SchemaSource:
        return cls(
            uri=data.get("uri"),
            inline=str(data.get("inline", "")).encode("utf-8"),
            selector_class=data.get("class"),
        )


@dataclass(frozen=True, slots=True)
class Publisher:
    endpoint: str
    info: str | None = None

    def to_xml(self) -> bytes:
        head = _dtd.attr("endpoint", self.endpoint)
        if self.info is not None:
            head += _dtd.attr("info", self.info)
        return f"<publisher{head} />".encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSettings:
    """What the service keeps of a topic beyond its name: the message schema and
    selector schemas selection needs, and the robust settings (None: best effort)."""

    message_schema: SchemaSource | None = None
    selector_schemas: tuple[SchemaSource, ...] = ()
    #: XEP-0040 robust delivery (docs/robust.md): the createtopic's robust attributes.
    robust: RobustSettings | None = None

    @property
    def has_schemas(self) -> bool:
        """Whether selection has schemas to compile (robust settings are not schemas)."""
        return self.message_schema is not None or bool(self.selector_schemas)

    @property
    def is_default(self) -> bool:
        return not self.has_schemas and self.robust is None

    def to_json(self) -> str:
        """The event log's ``settings`` text: empty for a topic with the defaults."""
        if self.is_default:
            return ""
        found: dict[str, Any] = {}
        if self.message_schema is not None:
            found["message_schema"] = self.message_schema.to_json()
        if self.selector_schemas:
            found["selector_schema"] = [s.to_json() for s in self.selector_schemas]
        if self.robust is not None:
            found["robust"] = self.robust.to_json()
        return json.dumps(found, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> TopicSettings:
        """Read :meth:`to_json`'s text (empty: the defaults); unknown keys are ignored
        (later settings share the object)."""
        if not text.strip():
            return cls()
        data = json.loads(text)
        message = data.get("message_schema")
        robust = data.get("robust")
        return cls(
            message_schema=None if message is None else SchemaSource.from_json(message),
            selector_schemas=tuple(
                SchemaSource.from_json(item) for item in data.get("selector_schema", ())
            ),
            robust=None if robust is None else RobustSettings.from_json(robust),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicDescription:
    """The children of an extended createtopic, or a Topics-topic message body."""

    topic_name: str | None = None
    disposition: str | None = None
    publishers: tuple[Publisher, ...] = ()
    description: str | None = None
    settings: TopicSettings = field(default_factory=TopicSettings)

    @property
    def is_empty(self) -> bool:
        return (
            self.topic_name is None
            and self.disposition is None
            and not self.publishers
            and self.description is None
            and self.settings.is_default
        )

    def to_xml(self) -> bytes:
        """The children, in the DTD's order."""
        parts: list[bytes] = []
        if self.topic_name is not None:
            parts.append(f"<topic-name>{escape_text(self.topic_name)}</topic-name>".encode())
        if self.disposition is not None:
            parts.append(f"<disposition>{escape_text(self.disposition)}</disposition>".encode())
        parts.extend(publisher.to_xml() for publisher in self.publishers)
        if self.description is not None:
            parts.append(f"<description>{escape_text(self.description)}</description>".encode())
        if self.settings.message_schema is not None:
            parts.append(self.settings.message_schema.to_xml("message-schema"))
        parts.extend(s.to_xml("selector-schema") for s in self.settings.selector_schemas)
        return b"".join(parts)


def _schema_from(element: Element, trans_id: int | None, *, selector: bool) -> SchemaSource:
    allowed = ("uri", "class") if selector else ("uri",)
    attrs = _dtd.attributes(element, allowed=allowed)
    try:
        return SchemaSource(
            uri=attrs.get("uri"),
            inline=_dtd.inner_xml(element).strip(),
            selector_class=attrs.get("class"),
        )
    except ApexError as exc:
        exc.trans_id = trans_id
        raise


def _publisher_from(element: Element, trans_id: int | None) -> Publisher:
    attrs = _dtd.attributes(element, allowed=("endpoint", "info"))
    text = text_of(element, trans_id).strip()
    endpoint = attrs.get("endpoint", text)
    if not endpoint or (text and "endpoint" in attrs):
        _dtd.fail("publisher: the endpoint as attribute or as text", trans_id=trans_id)
    return Publisher(endpoint=endpoint, info=attrs.get("info"))


def description_from(children: list[Element], trans_id: int | None, tag: str) -> TopicDescription:
    """Read the description children of ``tag`` (createtopic, or a Topics-topic
    ``content``): DTD order, each non-repeatable child at most once; 501 otherwise."""
    names = [pubsub_tag(child) for child in children]
    for name in names:
        if name not in _ORDER:
            _dtd.fail(f"{tag}: unexpected element {name[:48]!r}", trans_id=trans_id)
        if name not in _REPEATABLE and names.count(name) > 1:
            _dtd.fail(f"{tag}: more than one {name}", trans_id=trans_id)
    if names != sorted(names, key=_ORDER.index):
        _dtd.fail(f"{tag}: elements out of the DTD's order", trans_id=trans_id)
    single = {pubsub_tag(c): c for c in children if pubsub_tag(c) not in _REPEATABLE}

    def text(name: str) -> str | None:
        element = single.get(name)
        return None if element is None else text_of(element, trans_id).strip()

    disposition = text("disposition")
    if disposition is not None and disposition not in DISPOSITIONS:
        _dtd.fail(
            f"{tag}: disposition {disposition[:32]!r} is not publish or cancel", trans_id=trans_id
        )
    message = single.get("message-schema")
    return TopicDescription(
        topic_name=text("topic-name"),
        disposition=disposition,
        publishers=tuple(
            _publisher_from(c, trans_id) for c in children if pubsub_tag(c) == "publisher"
        ),
        description=text("description"),
        settings=TopicSettings(
            message_schema=None
            if message is None
            else _schema_from(message, trans_id, selector=False),
            selector_schemas=tuple(
                _schema_from(c, trans_id, selector=True)
                for c in children
                if pubsub_tag(c) == "selector-schema"
            ),
        ),
    )


def topics_message_body(description: TopicDescription) -> bytes:
    """The ``content`` children of a Topics-topic message (6.2)."""
    return description.to_xml()


__all__ = [
    "DISPOSITIONS",
    "PUBSUB_NS",
    "Publisher",
    "SchemaSource",
    "TopicDescription",
    "TopicSettings",
    "description_from",
    "topics_message_body",
]
