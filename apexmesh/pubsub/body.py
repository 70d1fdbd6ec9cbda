"""How a published body is read for selection (draft-wyman-apex-pubsub-00 sections 5.2,
5.3.2, 7.2 and 7.3), sans I/O.

Both registered selector classes say the same of content that is not the draft's XML:
"When processing arbitrary mime-typed content, this class will use text processing for
the text/* types (e.g. text/html) and will not process application or binary content
types" (7.2, 7.3). What identifiers mean then follows from the draft's own rules:

- identifiers are element or attribute names (7.2, 7.3), and without a message schema a
  body is read by the default message schema of 5.3.2: "a root element
  'message-content'. The message body, in its entirety, will be enclosed within the
  root element";
- so a ``text/*`` body is the text of one element, ``message-content``
  (:data:`~apexmesh.pubsub.selection.types.DEFAULT_ROOT`): ``(message-content=*XMPL*)``
  or ``message-content LIKE '%XMPL%'`` search it, ``=`` compares the whole text. The
  white space around a text body (indentation, the final newline of a text file) is
  not part of the text searched: "text processing" reads the document, not its layout.
  Inside an XML body, by contrast, an element's text is compared exactly as its type
  keeps it (:func:`~apexmesh.pubsub.selection.types.convert`). Markup in a text body
  (``text/html``) is text too: "text processing", not an HTML parser guessing at
  elements;
- XML is what the draft's messages are (5.2): inline ``data-content``
  (application/beep+xml) and the XML media types (``*/xml``, ``*/*+xml``) are read as
  elements, one root as it is (the ``message-content`` envelope, or a bare body), XML
  content that is not one element (text, several elements) enclosed in
  ``message-content`` as 5.3.2 says;
- anything else (``application/octet-stream``, ``image/*`` ...), and XML that is not
  well-formed, is *not processed*: no selector reads it, so it selects nothing, and only
  the subscriptions without a selector receive it (5.6: they match every message).

A topic with a message schema takes XML only: a body that is not XML is 561 there
(:func:`apexmesh.pubsub.content_core.publish`). A ``text/*`` body is decoded by its
``charset`` parameter, UTF-8 when there is none (a superset of RFC 2046's US-ASCII
default, which senders rarely mean literally); octets the charset cannot decode become
U+FFFD; a charset Python does not know leaves the body not processed.
"""

from __future__ import annotations

import codecs
import enum
from dataclasses import dataclass
from email.message import Message
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.content import MimePart
from apexmesh.apex.data import DataContent
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import Element
from apexmesh.pubsub._fields import pubsub_tag
from apexmesh.pubsub.message import ParsedMessage, message_from
from apexmesh.pubsub.selection.types import DEFAULT_ROOT, XML_WHITESPACE, MessageView

#: The media type of inline content (RFC 3340 section 4.1).
INLINE_TYPE: Final = "application/beep+xml"

#: The charset of a ``text/*`` body that names none.
DEFAULT_CHARSET: Final = "utf-8"


class BodyKind(enum.Enum):
    """How selectors read a body."""

    #: Elements and attributes (5.2, 7.2, 7.3).
    XML = "xml"
    #: The text of ``message-content`` (text/*, 7.2, 7.3, 5.3.2).
    TEXT = "text"
    #: Not processed: selects nothing (application and binary types, 7.2, 7.3).
    OPAQUE = "opaque"


def kind_of_media(media_type: str) -> BodyKind:
    """The kind of a body by its media type (lower-case, no parameters)."""
    main, _, sub = media_type.partition("/")
    if sub == "xml" or sub.endswith("+xml"):
        return BodyKind.XML
    if main == "text":
        return BodyKind.TEXT
    return BodyKind.OPAQUE


def charset_of(content_type: str) -> str:
    """The ``charset`` parameter of a Content-Type header value (lower-case), or
    :data:`DEFAULT_CHARSET` when it names none."""
    header = Message()
    header["Content-Type"] = content_type
    return header.get_content_charset() or DEFAULT_CHARSET


def decoded(octets: bytes, charset: str) -> str | None:
    """``octets`` as text of ``charset``; None for a charset Python does not know (or a
    codec that is not a text encoding)."""
    try:
        codecs.lookup(charset)
        return octets.decode(charset, errors="replace")
    except (LookupError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Body:
    """A published body as selection reads it: the parsed envelope or element for XML,
    the text for ``text/*``, nothing for a body not processed."""

    kind: BodyKind
    message: ParsedMessage | Element | None = None
    text: str = ""

    def view(self) -> MessageView | None:
        """The identifiers selectors read; None for a body not processed."""
        if self.kind is BodyKind.TEXT:
            return MessageView.of_text(self.text.strip(XML_WHITESPACE))  # module docstring
        if isinstance(self.message, ParsedMessage):
            return MessageView.of(self.message.root)
        if self.message is not None:
            return MessageView.of(self.message)
        return None


OPAQUE: Final = Body(BodyKind.OPAQUE)

_CLOSE: Final = f"</{DEFAULT_ROOT}>".encode()


def _xml(octets: bytes) -> Body:
    """One root as it is, an envelope read as one (500/501 for a broken envelope); other
    well-formed content enclosed in ``message-content`` (5.3.2); otherwise opaque."""
    try:
        root = _dtd.parse_root(octets)
    except ApexError:
        try:
            enclosed = _dtd.parse_root(f"<{DEFAULT_ROOT}>".encode() + octets + _CLOSE)
        except ApexError:
            return OPAQUE
        return Body(BodyKind.XML, enclosed)
    if pubsub_tag(root) == "message-content":
        return Body(BodyKind.XML, message_from(root))
    return Body(BodyKind.XML, root)


def read_body(content: MimePart | DataContent, octets: bytes) -> Body:
    """The body ``octets`` of a publication whose content is ``content`` (the resolved
    ``data-content`` or MIME part). Raises ApexError 500/501 only for a
    ``message-content`` envelope that does not follow section 8.2."""
    media = INLINE_TYPE if isinstance(content, DataContent) else content.content_type
    kind = kind_of_media(media)
    if kind is BodyKind.XML:
        return _xml(octets)
    if kind is BodyKind.TEXT and isinstance(content, MimePart):
        header = next((v for n, v in content.headers if n.lower() == "content-type"), "")
        text = decoded(octets, charset_of(header))
        return OPAQUE if text is None else Body(BodyKind.TEXT, text=text)
    return OPAQUE


__all__ = [
    "DEFAULT_CHARSET",
    "INLINE_TYPE",
    "OPAQUE",
    "Body",
    "BodyKind",
    "charset_of",
    "decoded",
    "kind_of_media",
    "read_body",
]
