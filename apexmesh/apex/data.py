"""The ``data`` operation's elements (RFC 3340 sections 4.1, 4.4.4 and 9.1).

``data`` carries content from one ``originator`` to one or more ``recipient`` endpoints,
with per-data, per-originator and per-recipient ``option`` elements (section 5) and, when
the content is itself XML, an inline ``data-content`` referenced as ``#Name``
(section 4.1). These classes are re-exported by :mod:`apexmesh.apex.elements`, whose
:func:`~apexmesh.apex.elements.parse_apex` is the way to read them from a peer.

Relays are "expressly forbidden from modifying the content of the data element"
(section 4.4.4.1): the ``data-content`` is therefore kept as the peer's own octets
whenever they can be cut out of the document unambiguously (:func:`raw_inner`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import Option, check_option_count, options_from, options_xml
from apexmesh.beep.xml import Element

if TYPE_CHECKING:
    from apexmesh.apex.memo import ParseMemo

#: Most ``recipient`` elements accepted in one ``data``. RFC 3340 sets no limit; RFC 2821
#: section 4.5.3.1 asks SMTP servers for at least 100 recipients per message, and ten times
#: that keeps legitimate fan-out in one element while bounding the per-recipient work
#: (access checks, routing, reports) a single hostile element can trigger.
MAX_RECIPIENTS_PER_DATA: Final = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class Originator:
    """``originator`` (RFC 3340 section 4.4.4): the sending endpoint."""

    #: The sending endpoint.
    identity: Endpoint
    #: Per-originator options.
    options: tuple[Option, ...] = ()

    def __post_init__(self) -> None:
        check_option_count(self.options, "originator")

    def to_xml(self) -> bytes:
        head = _dtd.attr("identity", str(self.identity))
        return _dtd.container("originator", head, options_xml(self.options))


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipient:
    """``recipient`` (RFC 3340 section 4.4.4): one destination endpoint."""

    #: The destination endpoint.
    identity: Endpoint
    #: Per-recipient options.
    options: tuple[Option, ...] = ()
    #: The serialization, made on first use: a recipient of a fan-out is serialized
    #: into every publication (shared recipients come from a :class:`ParseMemo`).
    _xml: bytes | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_option_count(self.options, "recipient")

    def to_xml(self) -> bytes:
        xml = self._xml
        if xml is None:
            head = _dtd.attr("identity", str(self.identity))
            xml = _dtd.container("recipient", head, options_xml(self.options))
            object.__setattr__(self, "_xml", xml)
        return xml


@dataclass(frozen=True, slots=True, kw_only=True)
class DataContent:
    """``data-content`` (RFC 3340 sections 4.1 and 9.1): XML content carried inline and
    referenced from ``data``'s ``content`` attribute as ``#Name``.

    ``content`` is the element's content as application/beep+xml text. When parsed from
    a peer it is the peer's own octets whenever they can be cut out of the document
    unambiguously (relays must not modify content, section 4.4.4.1), and the parser's
    serialization otherwise (for instance when the content uses a namespace prefix
    declared on an ancestor).
    """

    #: The ``Name`` attribute (an XML ``ID``), referenced as ``#Name``. RFC 3340 section
    #: 9.1 prints ``<!ATTLIST Name ID #REQUIRED>``, an evident slip for
    #: ``<!ATTLIST data-content Name ID #REQUIRED>``, which its examples follow.
    name: str
    #: The content (DTD ``ANY``): character data and elements, well-formed XML content.
    content: bytes = b""

    def __post_init__(self) -> None:
        if not _dtd.is_name(self.name):
            _dtd.fail(f"data-content: Name {self.name!r} is not an XML name")
        if self.content:
            _dtd.canonical_content(self.content, "data-content")  # well-formed, or 500/501

    def to_xml(self) -> bytes:
        head = _dtd.attr("Name", self.name)
        return f"<data-content{head}>".encode() + self.content + b"</data-content>"


@dataclass(frozen=True, slots=True, kw_only=True)
class Data:
    """``data`` (RFC 3340 section 4.4.4): content from an originator to recipients."""

    #: URI-reference to the content: ``cid:`` (a MIME part) or ``#Name`` (data-content).
    content: str
    #: The sending endpoint and its per-originator options.
    originator: Originator
    #: One or more recipients, at most :data:`MAX_RECIPIENTS_PER_DATA`.
    recipients: tuple[Recipient, ...]
    #: Per-data options.
    options: tuple[Option, ...] = ()
    #: Inline XML content, if any.
    data_content: DataContent | None = None

    def __post_init__(self) -> None:
        if not _dtd.is_uri_reference(self.content):
            _dtd.fail(f"data: content {self.content!r} is not a URI-reference")
        if not self.recipients:
            _dtd.fail("data: at least one recipient is required")
        _check_recipient_count(len(self.recipients))
        check_option_count(self.options, "data")

    def for_recipients(self, recipients: tuple[Recipient, ...]) -> Data:
        """This data for other recipients: only their number is checked again (the rest
        was checked when this data was built), which a fan-out does per recipient."""
        if not recipients:
            _dtd.fail("data: at least one recipient is required")
        _check_recipient_count(len(recipients))
        return self._clone(self.content, recipients)

    def with_content(self, content: str) -> Data:
        """This data with another ``content`` reference (see :func:`document_shape`); the
        caller vouches that ``content`` is a URI-reference."""
        return self._clone(content, self.recipients)

    def with_parts(
        self,
        *,
        content: str,
        originator: Originator,
        recipients: tuple[Recipient, ...],
        options: tuple[Option, ...],
        data_content: DataContent | None,
    ) -> Data:
        """This data's shape with other parts (apexmesh/apex/numbered.py: the same
        document with other numbers), made without the checks of ``__post_init__``: the
        caller vouches for the parts (this data passed the checks, and the parts differ
        from its own in digits only)."""
        clone = _new_object(Data)
        _SET_CONTENT(clone, content)
        _SET_ORIGINATOR(clone, originator)
        _SET_RECIPIENTS(clone, recipients)
        _SET_OPTIONS(clone, options)
        _SET_DATA_CONTENT(clone, data_content)
        return clone

    def _clone(self, content: str, recipients: tuple[Recipient, ...]) -> Data:
        """This data with ``content`` and ``recipients``, made without the checks of
        ``__post_init__`` (the callers have done what they need of them)."""
        clone = _new_object(Data)
        _SET_CONTENT(clone, content)
        _SET_ORIGINATOR(clone, self.originator)
        _SET_RECIPIENTS(clone, recipients)
        _SET_OPTIONS(clone, self.options)
        _SET_DATA_CONTENT(clone, self.data_content)
        return clone

    def to_xml(self) -> bytes:
        parts = [
            f"<data{_dtd.attr('content', self.content)}>".encode(),
            self.originator.to_xml(),
            *(recipient.to_xml() for recipient in self.recipients),
            options_xml(self.options),
        ]
        if self.data_content is not None:
            parts.append(self.data_content.to_xml())
        parts.append(b"</data>")
        return b"".join(parts)


_new_object = object.__new__
#: The setters of Data's slots, which :meth:`Data._clone` calls directly: a frozen
#: dataclass refuses plain assignment, and ``object.__setattr__`` costs twice as much.
_SET_CONTENT: Final = Data.__dict__["content"].__set__
_SET_ORIGINATOR: Final = Data.__dict__["originator"].__set__
_SET_RECIPIENTS: Final = Data.__dict__["recipients"].__set__
_SET_OPTIONS: Final = Data.__dict__["options"].__set__
_SET_DATA_CONTENT: Final = Data.__dict__["data_content"].__set__


def _check_recipient_count(count: int) -> None:
    if count > MAX_RECIPIENTS_PER_DATA:
        _dtd.fail(
            f"data: more than {MAX_RECIPIENTS_PER_DATA} recipients",
            ApexReplyCode.TRANSACTION_FAILED,
        )


def originator_from(element: Element, memo: ParseMemo | None = None) -> Originator:
    return Originator(
        identity=_dtd.endpoint(_identity(element), "originator"),
        options=_options_of(element, "originator", memo),
    )


def recipient_from(element: Element, memo: ParseMemo | None = None) -> Recipient:
    items = element.items()
    if len(items) == 1 and items[0][0] == "identity" and len(element) == 0 and element.text is None:
        # ``<recipient identity='...' />``, every recipient of a fan-out: one shared
        # (immutable) Recipient per identity, from the memo, instead of building it again.
        identity = _dtd.endpoint(str(items[0][1]), "recipient")
        return Recipient(identity=identity) if memo is None else memo.recipient(identity)
    return Recipient(
        identity=_dtd.endpoint(_identity(element), "recipient"),
        options=_options_of(element, "recipient", memo),
    )


def _identity(element: Element) -> str:
    """The ``identity`` attribute, the only one originator and recipient declare."""
    attrib = element.attrib
    identity = attrib.get("identity")
    if identity is not None and len(attrib) == 1:
        return str(identity)
    attrs = _dtd.attributes(element, allowed=("identity",), required=("identity",))
    return attrs["identity"]


def _options_of(element: Element, container: str, memo: ParseMemo | None) -> tuple[Option, ...]:
    """The option children of ``element``; the empty element (most) costs no walk."""
    if len(element) == 0 and not (element.text or "").strip():
        return ()
    return options_from(_dtd.only_options(element), container, memo)


def data_content_from(element: Element, raw: bytes | None = None) -> DataContent:
    """Build a :class:`DataContent`; ``raw`` is the document it came from, used to keep
    the content's own octets (see :func:`raw_inner`)."""
    attrs = _dtd.attributes(element, allowed=("Name",), required=("Name",))
    serialized = _dtd.inner_xml(element)
    content = serialized
    if raw is not None:
        exact = raw_inner(raw, "data-content")
        if exact is not None and _same_content(exact, serialized):
            content = exact
    return DataContent(name=attrs["Name"], content=content)


def data_from(element: Element, raw: bytes | None = None, memo: ParseMemo | None = None) -> Data:
    """Build a :class:`Data`, enforcing the DTD order
    ``(originator, recipient+, option*, data-content?)``; ``memo`` shares the parts seen
    before (recipients, options)."""
    content = element.attrib.get("content")
    if content is None or len(element.attrib) != 1:
        content = _dtd.attributes(element, allowed=("content",), required=("content",))["content"]
    children = _dtd.element_children(element)
    tags = [_dtd.tag_of(child) for child in children]
    if not tags or tags[0] != "originator":
        _dtd.fail("data: the first element must be originator")
    index = 1
    while index < len(tags) and tags[index] == "recipient":
        index += 1
    recipient_elements = children[1:index]
    if not recipient_elements:
        _dtd.fail("data: at least one recipient is required")
    _check_recipient_count(len(recipient_elements))
    first_option = index
    while index < len(tags) and tags[index] == "option":
        index += 1
    option_elements = children[first_option:index]
    data_content: DataContent | None = None
    if index < len(tags) and tags[index] == "data-content":
        data_content = data_content_from(children[index], raw)
        index += 1
    if index < len(tags):
        _dtd.fail(f"data: unexpected element {tags[index]!r} (order or name)")
    return Data(
        content=str(content),
        originator=originator_from(children[0], memo),
        recipients=tuple(recipient_from(child, memo) for child in recipient_elements),
        options=options_from(option_elements, "data", memo),
        data_content=data_content,
    )


#: ``<data content='V'>`` opening a document, with V (1 to :data:`_CONTENT_VALUE_MAX`
#: octets) made only of :data:`_CONTENT_VALUE_OCTETS`, URI characters that XML reads as
#: written (no quote, ampersand, angle bracket, whitespace or control): the element tree
#: of the rest of the document cannot depend on V.
_DATA_OPEN: Final = b"<data content='"
_CONTENT_VALUE_MAX: Final = 1024
_CONTENT_VALUE_OCTETS: Final = (
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/?#[]@!$()*+,;=%"
)
#: Documents whose rest is longer than this are not remembered (bounds the memory).
_KNOWN_REST_MAX: Final = 4096
#: Longest rest :func:`document_shape` cuts out: a document whose options carry numbers
#: (apexmesh/apex/numbered.py) is remembered up to this length, since a relay receives one
#: data for some 50 robust recipients (about 230 octets each); other documents only up
#: to :data:`_KNOWN_REST_MAX`.
SHAPED_REST_MAX: Final = 32768
#: Longest document :func:`document_shape` recognizes (longer ones are never remembered).
_KNOWN_DOCUMENT_MAX: Final = len(_DATA_OPEN) + _CONTENT_VALUE_MAX + len("'>") + SHAPED_REST_MAX
#: How many remembered documents a memo keeps by default (apexmesh/apex/memo.py).
KNOWN_DOCUMENTS: Final = 2048


def _value_end(raw: bytes) -> int:
    """Where V ends in a document opening with ``<data content='V'>`` (see
    :data:`_DATA_OPEN`), else -1. Octets compared, no pattern run: every data a relay or
    an endpoint receives comes through here."""
    if not raw.startswith(_DATA_OPEN) or len(raw) > _KNOWN_DOCUMENT_MAX:
        return -1
    start = len(_DATA_OPEN)
    end = raw.find(b"'>", start, start + _CONTENT_VALUE_MAX + 2)
    if end <= start or raw[start:end].translate(None, _CONTENT_VALUE_OCTETS):
        return -1
    return end


def document_shape(raw: bytes) -> tuple[bytes, str] | None:
    """``raw`` as (the rest of the document after its ``<data content='V'>`` start tag,
    V), when it opens that way with V of plain characters; else None.

    A sender names the same originator, recipients and options data after data; only
    the content reference (a fresh Content-ID) changes. Such a document is an earlier
    one with another attribute value of plain characters, so its tree is the earlier
    tree with that value: a memo keyed by the rest (apexmesh/apex/memo.py) answers it
    without the hardened parser and the DTD checks running again.
    """
    end = _value_end(raw)
    if end < 0:
        return None
    return raw[end + 2 :], raw[len(_DATA_OPEN) : end].decode("ascii")


def rememberable(rest: bytes) -> bool:
    """True when a document with this rest may be remembered (bounds a memo's memory)."""
    return len(rest) <= _KNOWN_REST_MAX


def raw_inner(raw: bytes, tag: str) -> bytes | None:
    """Cut the content of the outermost ``tag`` element out of ``raw``, or None.

    The candidate is the text between the end of the first ``<tag`` start tag and the
    last ``</tag`` end tag. It is only a candidate (the first ``<tag`` could sit inside an
    option's content, a comment or a CDATA section), so callers compare it with the
    parser's view before trusting it (:func:`data_content_from`).
    """
    opening = re.search(rb"<" + re.escape(tag.encode()) + rb"[\s/>]", raw)
    if opening is None:
        return None
    position = opening.end() - 1
    quote = 0
    while position < len(raw):
        octet = raw[position]
        if quote:
            if octet == quote:
                quote = 0
        elif octet in b"'\"":
            quote = octet
        elif octet == ord(">"):
            break
        position += 1
    else:
        return None
    if raw[position - 1] == ord("/"):
        return b""
    closing = raw.rfind(b"</" + tag.encode())
    if closing <= position:
        return None
    return raw[position + 1 : closing]


def _same_content(candidate: bytes, serialized: bytes) -> bool:
    try:
        return _dtd.canonical_content(candidate, "data-content") == serialized
    except ApexError:
        return False


__all__ = [
    "MAX_RECIPIENTS_PER_DATA",
    "Data",
    "DataContent",
    "Originator",
    "Recipient",
    "data_content_from",
    "data_from",
    "KNOWN_DOCUMENTS",
    "SHAPED_REST_MAX",
    "document_shape",
    "originator_from",
    "raw_inner",
    "recipient_from",
    "rememberable",
]
