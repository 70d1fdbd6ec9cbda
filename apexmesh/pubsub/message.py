"""The ``message-content`` envelope of content-based pubsub (draft-wyman-apex-pubsub-00
sections 5.2 and 5.2.1, schema of 8.2).

A published message is the headers (topic, publisher, publication-date, and optionally
expiration-date, message-id, revision-id) followed by ``content``, which holds the body
the topic's message schema describes. Dates are RFC 3339 date-times (section 4);
expiration-date may also be ``0`` ("distributed once and then immediately expires") or
``*`` ("never expires"). Revision numbers are 0..2,147,483,647 (5.2.1).

Readings (also in docs/pubsub.md): the header elements are taken in the 8.2 schema's
order (a sequence), each at most once; ``content`` is named by the envelope's
``content='#Name'`` attribute and its ``Name`` (6.2.2's example writes ``name``, read
too); message-id is a non-negative xs:int.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.apex.presence import check_timestamp
from apexmesh.beep.xml import Element, escape_text
from apexmesh.pubsub._fields import PUBSUB_NS, fields_of, naming, number, pubsub_tag, text_of
from apexmesh.pubsub.elements import check_topic

#: Largest revision-id and message-id (5.2.1: "within the range 0-2,147,483,647").
MAX_REVISION: Final = 2_147_483_647

_HEADERS: Final = (
    "topic",
    "publisher",
    "publication-date",
    "expiration-date",
    "message-id",
    "revision-id",
    "content",
)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class Expiry(enum.Enum):
    """How a message expires (section 5.2.1)."""

    #: No expiration-date: the service's default applies.
    UNSPECIFIED = "unspecified"
    #: ``0``: distributed once, never cached.
    ONCE = "0"
    #: ``*``: never expires.
    NEVER = "*"
    #: An absolute date-time.
    AT = "at"


def millis(when: datetime) -> int:
    return int((when - _EPOCH).total_seconds() * 1000)


def format_date(when: datetime) -> str:
    """RFC 3339 text of ``when`` as given (its own offset), seconds precision or finer."""
    text = when.isoformat()
    return text.replace("+00:00", "Z") if when.utcoffset() is not None else text + "Z"


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageContent:
    """A ``message-content`` envelope; ``body`` is the ``content`` element's inner XML
    (application/beep+xml text), ``content`` the element itself when parsed."""

    trans_id: int
    topic: str
    publisher: str
    publication_date: datetime
    expiry: Expiry = Expiry.UNSPECIFIED
    expiration_date: datetime | None = None
    message_id: int | None = None
    revision_id: int | None = None
    content_name: str = "Content"
    body: bytes = b""

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "message-content")
        check_topic(self.topic, trans_id=self.trans_id)
        if (self.expiry is Expiry.AT) != (self.expiration_date is not None):
            _dtd.fail("message-content: an expiration date goes with Expiry.AT")
        for what, value in (("message-id", self.message_id), ("revision-id", self.revision_id)):
            if value is not None and not 0 <= value <= MAX_REVISION:
                _dtd.fail(f"message-content: {what} {value} out of range")

    @property
    def revision(self) -> int:
        """The revision number, 0 when the header is absent."""
        return self.revision_id or 0

    def expires_ms(self, default_ms: int | None) -> int | None:
        """When the message stops being valid (ms since the epoch): None for never,
        the publication time for ``0``; ``default_ms`` when unspecified."""
        if self.expiry is Expiry.NEVER:
            return None
        if self.expiry is Expiry.ONCE:
            return millis(self.publication_date)
        if self.expiration_date is not None:
            return millis(self.expiration_date)
        return default_ms

    def cacheable(self, now_ms: int) -> bool:
        """True when the message may be kept for later subscribers: not ``0`` and not
        already expired."""
        if self.expiry is Expiry.ONCE:
            return False
        expires = self.expires_ms(None)
        return expires is None or expires > now_ms

    def to_xml(self) -> bytes:
        def header(tag: str, text: str) -> str:
            return f"<ps:{tag}>{escape_text(text)}</ps:{tag}>"

        parts = [
            header("topic", self.topic),
            header("publisher", self.publisher),
            header("publication-date", format_date(self.publication_date)),
        ]
        if self.expiration_date is not None:
            parts.append(header("expiration-date", format_date(self.expiration_date)))
        elif self.expiry is not Expiry.UNSPECIFIED:
            parts.append(header("expiration-date", self.expiry.value))
        if self.message_id is not None:
            parts.append(header("message-id", str(self.message_id)))
        if self.revision_id is not None:
            parts.append(header("revision-id", str(self.revision_id)))
        head = (
            _dtd.attr("transID", str(self.trans_id))
            + _dtd.attr("content", f"#{self.content_name}")
            + f" xmlns:ps='{PUBSUB_NS}'"
        )
        content = f"<ps:content{_dtd.attr('Name', self.content_name)}>".encode()
        return (
            f"<ps:message-content{head}>{''.join(parts)}".encode()
            + content
            + self.body
            + b"</ps:content></ps:message-content>"
        )


@dataclass(frozen=True, slots=True)
class ParsedMessage:
    """An envelope with its ``content`` element, for selection and validation."""

    envelope: MessageContent
    root: Element
    content: Element


def _date(text: str, what: str, trans_id: int) -> datetime:
    return check_timestamp(text.strip(), f"message-content: {what}", trans_id=trans_id)


def message_from(root: Element) -> ParsedMessage:
    """Read a ``message-content`` element: 501 for what the 8.2 schema does not allow
    (missing or repeated headers, headers out of order, bad dates or numbers), 553 for a
    malformed topic."""
    if pubsub_tag(root) != "message-content":
        _dtd.fail(f"expected message-content, not {pubsub_tag(root)[:48]!r}")
    raw = root.attrib.get("transID")
    trans_id = _dtd.trans_id(None if raw is None else str(raw), "message-content")
    with naming(trans_id):
        return _envelope(root, trans_id)


def _envelope(root: Element, trans_id: int) -> ParsedMessage:
    attrs, children = fields_of(
        root, attributes=("transID", "content"), children=_HEADERS, trans_id=trans_id
    )
    order = [pubsub_tag(child) for child in _dtd.element_children(root)]
    if order != sorted(order, key=_HEADERS.index):
        _dtd.fail("message-content: headers out of the schema's order", trans_id=trans_id)
    for required in ("topic", "publisher", "publication-date", "content"):
        if required not in children:
            _dtd.fail(f"message-content: missing {required}", trans_id=trans_id)
    content = children["content"]
    content_attrs = _dtd.attributes(content, allowed=("Name", "name"))
    name = content_attrs.get("Name", content_attrs.get("name", ""))
    reference = attrs.get("content")
    if reference is None or reference != f"#{name}":
        _dtd.fail("message-content: content attribute must name the content", trans_id=trans_id)

    def header(tag: str) -> str | None:
        element = children.get(tag)
        return None if element is None else text_of(element, trans_id).strip()

    expiry, expiration = Expiry.UNSPECIFIED, None
    raw_expiry = header("expiration-date")
    if raw_expiry in ("0", "*"):
        expiry = Expiry(raw_expiry)
    elif raw_expiry is not None:
        expiry, expiration = Expiry.AT, _date(raw_expiry, "expiration-date", trans_id)
    identifiers = {
        tag: None
        if (text := header(tag)) is None
        else number(text, tag, trans_id, low=0, high=MAX_REVISION)
        for tag in ("message-id", "revision-id")
    }
    envelope = MessageContent(
        trans_id=trans_id,
        topic=check_topic(header("topic") or "", trans_id=trans_id),
        publisher=header("publisher") or "",
        publication_date=_date(header("publication-date") or "", "publication-date", trans_id),
        expiry=expiry,
        expiration_date=expiration,
        message_id=identifiers["message-id"],
        revision_id=identifiers["revision-id"],
        content_name=name,
        body=_dtd.inner_xml(content),
    )
    return ParsedMessage(envelope=envelope, root=root, content=content)


def parse_message(body: bytes | str, *, max_octets: int) -> ParsedMessage:
    """Parse a published message of at most ``max_octets``: 554 over the limit (a
    policy of the service, "transaction failed (e.g., policy violation)", RFC 3340
    section 10), 500/501 for XML that is not well-formed or not an envelope."""
    octets = _dtd.raw_bytes(body)
    if len(octets) > max_octets:
        raise ApexError(
            ApexReplyCode.TRANSACTION_FAILED,
            f"message of {len(octets)} octets exceeds the topic's limit of {max_octets}",
        )
    return message_from(_dtd.parse_root(octets))


__all__ = [
    "MAX_REVISION",
    "Expiry",
    "MessageContent",
    "ParsedMessage",
    "format_date",
    "message_from",
    "millis",
    "parse_message",
]
