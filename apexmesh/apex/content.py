"""The content of APEX data: payload structure and ``content`` references (RFC 3340
section 4.1).

A BEEP payload exchanged via APEX is either an application/beep+xml control document
alone, or a ``multipart/related`` (RFC 2387) whose start part is that control document
and whose other parts are arbitrary MIME content named by ``Content-ID``. The ``data``
element's ``content`` attribute is a URI-reference to the content:

* ``cid:2@example.com`` (RFC 2392) names a MIME part of the same payload;
* ``#Content`` names the ``data-content`` element of the same ``data`` (its ``Name``).

The payload is split here, strictly and without the :mod:`email` package's per-line
feed parser (which costs milliseconds a payload): the top-level Content-Type parameters
are read by a small parser (anything unusual, RFC 2231 continuations for instance, falls
back to :class:`email.message.Message`), the body is cut on the delimiter lines of RFC
2046 section 5.1.1 (CRLF ``--boundary``, the close delimiter ending in ``--``, transport
padding allowed after either, preamble and epilogue ignored), and each part's header
block goes through a strict line parser (CRLF line ends, folded lines, names
case-insensitive). Bodies come back octet for octet (BEEP is 8bit-clean and section 4.1
asks for no transformative Content-Transfer-Encoding; base64, quoted-printable and
uuencoded parts are decoded anyway, by the standard library).

RFC 3340 names no reply code for a reference that resolves to nothing; 550 "requested
action not taken" is used, as the RFC does for other unknown references (section 4.4.3,
"unknown transaction-identifier"; section 5.1, "unknown endpoint identity"). A scheme
other than ``cid`` cannot be resolved inside the payload: 504, "parameter not
implemented".
"""

from __future__ import annotations

import email.errors
import email.policy
import functools
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from email.message import Message
from types import MappingProxyType
from typing import Final, NamedTuple, NoReturn

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.data import Data, DataContent
from apexmesh.apex.errors import ApexError
from apexmesh.beep.errors import BeepError
from apexmesh.beep.mime import BEEP_XML, split_entity

#: Most MIME parts accepted in one multipart/related payload. A data operation carries
#: one control document and the content it references (section 4.1); 64 parts leaves
#: room for compound documents while bounding the per-part work of a hostile payload.
MAX_MIME_PARTS: Final = 64

MULTIPART_RELATED: Final = "multipart/related"

#: The parts of a payload that is the control document alone (read-only, shared).
NO_PARTS: Final[Mapping[str, MimePart]] = MappingProxyType({})


class MimePart(NamedTuple):
    """One body part of a multipart/related payload (a NamedTuple, as frames are: two
    are made for every data a relay or an endpoint receives, at C speed)."""

    #: The Content-ID without angle brackets, or None when the part has none.
    content_id: str | None
    #: Media type without parameters, lower-cased (``image/gif``).
    content_type: str
    #: The part's headers in order, as (name, value) pairs.
    headers: tuple[tuple[str, str], ...] = ()
    #: The body octets (transfer encoding removed).
    body: bytes = b""


class Payload(NamedTuple):
    """An APEX payload: the control document and the MIME parts it can reference."""

    #: The application/beep+xml control document (for :func:`parse_apex`).
    control: bytes
    #: The other parts by Content-ID (empty when the payload is the document alone).
    parts: Mapping[str, MimePart] = NO_PARTS


def parse_payload(payload: bytes) -> Payload:
    """Split a BEEP message payload (entity headers, CRLF, body) into an APEX payload.

    Raises :class:`ApexError`: 500 when the MIME structure is broken, 501 when it is
    well-formed but not what section 4.1 describes (another media type, no start part,
    a start part that is not application/beep+xml, duplicate Content-IDs), 504 for a
    nested multipart (or message/*) part, 554 above :data:`MAX_MIME_PARTS`. Lines end in
    CRLF: a bare CR or LF is body data, never the end of a header line or a delimiter.
    """
    if payload.startswith(_CANONICAL_START):
        canonical = _canonical(payload)
        if canonical is not None:
            return canonical
    return _parse_general(payload)


def _parse_general(payload: bytes) -> Payload:
    """:func:`parse_payload` for any layout."""
    try:
        entity = split_entity(payload)
    except BeepError as exc:
        raise ApexError(ApexReplyCode.GENERAL_SYNTAX_ERROR, str(exc)) from None
    if entity.content_type == BEEP_XML:
        return Payload(control=entity.body)
    if entity.content_type != MULTIPART_RELATED:
        _dtd.fail(f"APEX payloads are {BEEP_XML} or {MULTIPART_RELATED}, not {entity.content_type}")
    try:
        return _related(entity.headers, entity.body)
    except (email.errors.MessageError, LookupError, UnicodeError) as exc:
        raise ApexError(ApexReplyCode.GENERAL_SYNTAX_ERROR, f"malformed MIME: {exc}") from None


#: The Content-ID of the control part in the payloads :func:`build_payload` writes.
CONTROL_ID: Final = "apex-control"

_CANONICAL_START: Final = b'Content-Type: multipart/related; boundary="'


#: A content part's header block as :func:`build_payload` writes it: these, around its
#: media type and its Content-ID.
_PART_TYPE: Final = b"\r\nContent-Type: "
_PART_MIDDLE: Final = b"\r\nContent-Transfer-Encoding: binary\r\nContent-ID: <"
_PART_END: Final = b">\r\n\r\n"
#: Longest media type and Content-ID the canonical path reads (longer: general path).
_CANONICAL_FIELD_MAX: Final = 256
_CANONICAL_MEDIA: Final = re.compile(rb"[a-z0-9][a-z0-9!#$&^_.+\-]*/[a-z0-9][a-z0-9!#$&^_.+\-]*")
#: The octets of a canonical Content-ID (deleted by ``bytes.translate``: what remains
#: is not one).
_CANONICAL_ID_OCTETS: Final = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.@-"


#: What :func:`build_payload` writes between the boundary parameter's closing quote and
#: the first delimiter's boundary, and after that boundary up to the control document.
_CANONICAL_PARAMS: Final = f'"; start="<{CONTROL_ID}>"; type="{BEEP_XML}"\r\n\r\n--'.encode()
_CANONICAL_CONTROL: Final = (
    f"\r\nContent-Type: {BEEP_XML}\r\nContent-ID: <{CONTROL_ID}>\r\n\r\n".encode()
)
#: The octets of a boundary :func:`build_payload` writes (deleted by ``bytes.translate``:
#: what remains is not one).
_CANONICAL_BOUNDARY_OCTETS: Final = (
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.-"
)
#: The close delimiter after its dash-boundary.
_CLOSE_END: Final = b"--\r\n"


@functools.lru_cache(maxsize=256)
def _canonical_media(media: bytes) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """The media type and the headers before the Content-ID of a canonical part (a
    lower-case type without parameters); None for anything else and for the types the
    general path gives an error (nested multipart, message/*)."""
    if _CANONICAL_MEDIA.fullmatch(media) is None or media.startswith((b"multipart/", b"message/")):
        return None
    name = media.decode("ascii")
    return name, (("Content-Type", name), ("Content-Transfer-Encoding", "binary"))


_BOUNDARY_START: Final = len(_CANONICAL_START)
_CONTROL_ID_OCTETS: Final = CONTROL_ID.encode()
#: Builds a NamedTuple from a tuple of its fields without its Python-level ``__new__``.
_new_tuple = tuple.__new__


def _canonical(payload: bytes) -> Payload | None:
    """The payload split without the general machinery when it has exactly the layout
    :func:`build_payload` writes with one content part (what every apex-mesh sender and
    relay produces), else None. The result is the one :func:`_related` would return:
    anything that would make the general splitter look further (a delimiter-like line
    in a body, padding, a preamble or epilogue, other headers) takes the general path.

    Every data a relay or an endpoint receives comes through here, so it compares
    octets in place rather than run patterns or build the expected layout: relays
    derive the boundary from the content, a new one for every publication, so nothing
    is made per boundary; a media type is checked once per type, and the tuples are
    built without Python-level constructors."""
    quote = payload.find(b'"', _BOUNDARY_START, _BOUNDARY_START + 71)
    if quote <= _BOUNDARY_START:
        return None
    boundary = payload[_BOUNDARY_START:quote]
    if boundary.translate(None, _CANONICAL_BOUNDARY_OCTETS):
        return None
    at = quote + len(_CANONICAL_PARAMS)
    if not payload.startswith(_CANONICAL_PARAMS, quote) or not payload.startswith(boundary, at):
        return None
    at += len(boundary)
    if not payload.startswith(_CANONICAL_CONTROL, at):
        return None
    control_start = at + len(_CANONICAL_CONTROL)
    # Any CRLF "--" in a part sends the payload to the general splitter, which decides
    # whether it is a delimiter; short needles keep these searches cheap. They start at
    # the CRLF ending a header block: a part beginning with the dash-boundary makes that
    # CRLF part of a delimiter.
    control_end = payload.find(b"\r\n--", control_start - 2)
    at = control_end + 4 + len(boundary)
    if (
        control_end < control_start
        or not payload.startswith(boundary, control_end + 4)
        or not payload.startswith(_PART_TYPE, at)
    ):
        return None
    media_start = at + len(_PART_TYPE)
    media_end = payload.find(b"\r\n", media_start, media_start + _CANONICAL_FIELD_MAX)
    known_media = _canonical_media(payload[media_start:media_end]) if media_end > 0 else None
    if known_media is None or not payload.startswith(_PART_MIDDLE, media_end):
        return None
    id_start = media_end + len(_PART_MIDDLE)
    id_end = payload.find(_PART_END, id_start, id_start + _CANONICAL_FIELD_MAX + len(_PART_END))
    if id_end <= id_start:
        return None
    raw_id = payload[id_start:id_end]
    if raw_id.translate(None, _CANONICAL_ID_OCTETS) or raw_id == _CONTROL_ID_OCTETS:
        return None  # the general path reads it (or gives the control's Content-ID its error)
    body_start = id_end + len(_PART_END)
    body_end = len(payload) - len(boundary) - 8  # CRLF "--" boundary "--" CRLF
    if (
        body_end < body_start
        or payload.find(b"\r\n--", body_start - 2) != body_end
        or not payload.startswith(boundary, body_end + 4)
        or not payload.endswith(_CLOSE_END)
    ):
        return None
    content_type, headers = known_media
    content_id = raw_id.decode("ascii")
    mime = _new_tuple(
        MimePart,
        (
            content_id,
            content_type,
            (*headers, ("Content-ID", f"<{content_id}>")),
            payload[body_start:body_end],
        ),
    )
    return _new_tuple(Payload, (payload[control_start:control_end], {content_id: mime}))


def _broken(reason: str) -> NoReturn:
    raise ApexError(ApexReplyCode.GENERAL_SYNTAX_ERROR, f"malformed MIME: {reason}")


def _related(headers: Mapping[str, str], body: bytes) -> Payload:
    for name, value in headers.items():
        if _HEADER_NAME.fullmatch(name) is None or "\r" in value or "\n" in value:
            _broken(f"bad header line {name!r}")
    encoding = headers.get("content-transfer-encoding")
    if encoding is not None and encoding.strip().lower() not in _IDENTITY_ENCODINGS:
        _broken(f"a multipart cannot have Content-Transfer-Encoding {encoding!r}")
    params = _params(headers["content-type"])
    boundary = params.get("boundary")
    if not isinstance(boundary, str) or not boundary:
        _broken("multipart/related without a boundary")
    spans = _split(body, b"--" + boundary.encode("latin-1"))
    if not spans:
        _broken("multipart/related without parts")
    if len(spans) > MAX_MIME_PARTS:
        _dtd.fail(f"more than {MAX_MIME_PARTS} MIME parts", ApexReplyCode.TRANSACTION_FAILED)
    kind = params.get("type")
    if isinstance(kind, str) and kind.lower() != BEEP_XML:
        _dtd.fail(f"multipart/related type must be {BEEP_XML}")
    start = params.get("start")
    start_id = _content_id(start) if isinstance(start, str) else None
    parts = [_part(body, begin, end) for begin, end in spans]
    if start_id is None:
        root = parts[0]  # RFC 2387 section 3.2: the first part is the root by default
    else:
        found = [part for part in parts if part.content_id == start_id]
        if not found:
            _dtd.fail(f"start part <{start_id}> is missing")
        root = found[0]
    if root.content_type != BEEP_XML:
        _dtd.fail(f"the start part must be {BEEP_XML}, not {root.content_type}")
    by_id: dict[str, MimePart] = {}
    for part in parts:
        if part is root or part.content_id is None:
            continue
        if part.content_id in by_id or part.content_id == root.content_id:
            _dtd.fail(f"duplicate Content-ID <{part.content_id}>")
        by_id[part.content_id] = part
    return Payload(control=root.body, parts=by_id)


#: A header field name (RFC 5322 section 3.6.8): printable US-ASCII except the colon.
_HEADER_NAME: Final = re.compile(r"[!-9;-~]+")
#: One ``; name=value`` parameter, value an RFC 2045 token or a quoted-string without
#: quoted-pairs; RFC 2231 (``name*=``) and quoted-pairs take the slow path.
_PARAM: Final = re.compile(
    r"[ \t]*;[ \t]*([-!#$%&\'+.0-9A-Z^_`a-z{|}~]+)[ \t]*=[ \t]*"
    r'("[^"\\\r\n]*"|[-!#$%&\'*+.0-9A-Z^_`a-z{|}~]+)'
)
_IDENTITY_ENCODINGS: Final = frozenset({"7bit", "8bit", "binary"})
#: The encodings :meth:`email.message.Message.get_payload` decodes.
_DECODED_ENCODINGS: Final = frozenset(
    {"quoted-printable", "base64", "x-uuencode", "uuencode", "uue", "x-uue"}
)
_MESSAGE_PARAMS: Final = ("boundary", "start", "type")


@functools.lru_cache(maxsize=256)
def _params(content_type: str) -> Mapping[str, object]:
    """The boundary, start and type parameters as :class:`email.message.Message` reads
    them (first occurrence wins, quotes removed, boundary right-stripped). Cached: the
    payloads of one fan-out share their Content-Type."""
    params: dict[str, object] = {}
    pos = content_type.find(";")
    while pos >= 0:
        match = _PARAM.match(content_type, pos)
        if match is None:
            rest = content_type[pos:]
            if "*" in rest.partition("=")[0] or "\\" in rest:
                return _slow_params(content_type)
            if rest.strip(" \t;"):
                _broken(f"bad Content-Type parameter {rest[:80]!r}")
            break
        name, value = match.groups()
        # What email.utils.unquote does to the values the pattern admits.
        params.setdefault(name.lower(), value[1:-1] if value[0] == '"' else value)
        pos = match.end()
    boundary = params.get("boundary")
    if isinstance(boundary, str):
        params["boundary"] = boundary.rstrip()
    return params


def _slow_params(content_type: str) -> dict[str, object]:
    message = Message()
    message["Content-Type"] = content_type
    params: dict[str, object] = {name: message.get_param(name) for name in _MESSAGE_PARAMS}
    params["boundary"] = message.get_boundary()
    return params


def _split(body: bytes, dash_boundary: bytes) -> list[tuple[int, int]]:
    """The (start, end) offsets of the body parts of a multipart ``body`` (RFC 2046
    section 5.1.1); an empty list when the first delimiter is the close delimiter."""
    delimiter = b"\r\n" + dash_boundary
    skip = len(delimiter)
    find = body.find
    after = _after_delimiter(body, len(dash_boundary)) if body.startswith(dash_boundary) else None
    search = 0
    while after is None:  # the first delimiter: at the very start or after the preamble
        at = find(delimiter, search)
        if at < 0:
            _broken("no multipart delimiter")
        after = _after_delimiter(body, at + skip)
        search = at + 1
    spans: list[tuple[int, int]] = []
    closed, begin = after
    while not closed:
        search = begin
        while True:
            at = find(delimiter, search)
            if at < 0:
                _broken("no multipart close delimiter")
            after = _after_delimiter(body, at + skip)
            if after is not None:
                break
            search = at + 1
        spans.append((begin, at))
        closed, begin = after
    return spans


def _after_delimiter(body: bytes, pos: int) -> tuple[bool, int] | None:
    """After ``--boundary`` at ``pos``: (close delimiter?, offset past its line), or None
    when this is no delimiter (``--boundaryX``, or text after the padding)."""
    closed = body.startswith(b"--", pos)
    if closed:
        pos += 2
    end = len(body)
    while pos < end and body[pos] in b" \t":  # transport padding
        pos += 1
    if body.startswith(b"\r\n", pos):
        return closed, pos + 2
    if closed and pos == end:
        return closed, pos
    return None


def _part(body: bytes, begin: int, end: int) -> MimePart:
    if body.startswith(b"\r\n", begin):
        header_end, body_begin = begin, begin + 2
    else:
        blank = body.find(b"\r\n\r\n", begin, end)
        if blank >= 0:
            header_end, body_begin = blank, blank + 4
        elif body.endswith(b"\r\n", begin, end):  # headers, then the delimiter's CRLF
            header_end, body_begin = end - 2, end
        else:
            header_end = body_begin = end
    headers = _part_headers(body[begin:header_end])
    content_type = content_id = encoding = None
    for name, value in headers:
        lower = name.lower()
        if lower == "content-type":
            content_type = value if content_type is None else content_type
        elif lower == "content-id":
            content_id = value if content_id is None else content_id
        elif lower == "content-transfer-encoding":
            encoding = value if encoding is None else encoding
    media = "text/plain"
    if content_type is not None:
        media = content_type.split(";", 1)[0].strip().lower()
        if media.count("/") != 1:
            media = "text/plain"
    if media.startswith(("multipart/", "message/")):
        # email parses message/* bodies as nested entities too (is_multipart()).
        raise ApexError(ApexReplyCode.PARAMETER_NOT_IMPLEMENTED, f"nested {media} part")
    octets = body[body_begin:end]
    if encoding is not None and encoding.lower() in _DECODED_ENCODINGS:
        octets = _decode(octets, encoding)
    return MimePart(
        content_id=None if content_id is None else _content_id(content_id),
        content_type=media,
        headers=headers,
        body=octets,
    )


@functools.lru_cache(maxsize=256)
def _part_headers(block: bytes) -> tuple[tuple[str, str], ...]:
    """A part's header block (without its final CRLF) as (name, value) pairs, folded
    lines unfolded; 500 for a line that is neither a field nor a continuation. Cached:
    the parts of the payloads of one fan-out, and most control parts, share theirs."""
    if not block:
        return ()
    text = block.decode("utf-8", "replace")
    lines = text.split("\r\n")
    crlfs = len(lines) - 1
    if text.count("\r") != crlfs or text.count("\n") != crlfs:
        _broken("bare CR or LF in a part's headers")
    fields: list[tuple[str, str]] = []
    for line in lines:
        if line[:1] in (" ", "\t"):
            if not fields:
                _broken("a part's first header line is a continuation")
            name, value = fields[-1]
            fields[-1] = (name, value + line)
            continue
        name, colon, value = line.partition(":")
        if not colon or _HEADER_NAME.fullmatch(name) is None:
            _broken(f"bad header line {line[:80]!r}")
        fields.append((name, value))
    return tuple(
        (name, _header_value(name, value) if "=?" in value else value.strip(" \t"))
        for name, value in fields
    )


def _header_value(name: str, value: str) -> str:
    """RFC 2047 encoded-words decoded, as :data:`email.policy.HTTP` presents them."""
    return str(email.policy.HTTP.header_factory(name, value.strip(" \t")))


def _decode(octets: bytes, encoding: str) -> bytes:
    """Remove a Content-Transfer-Encoding exactly as :mod:`email` does."""
    message = Message()
    message["Content-Transfer-Encoding"] = encoding
    message.set_payload(octets.decode("ascii", "surrogateescape"))
    decoded = message.get_payload(decode=True)
    return decoded if isinstance(decoded, bytes) else b""


def _content_id(value: str) -> str:
    return value.strip().removeprefix("<").removesuffix(">").strip()


def build_payload(data: Data | bytes, parts: Sequence[MimePart], *, boundary: str) -> bytes:
    """A multipart/related payload: ``data`` (or its serialization) as the start part,
    then ``parts``.

    The caller chooses ``boundary`` (this package does not draw random numbers); it must
    not occur in any part. Raises :class:`ApexError` 451 when a part cannot be framed.
    """
    if any(part.content_id in (None, CONTROL_ID) for part in parts):
        raise ApexError(ApexReplyCode.ACTION_ABORTED, "every part needs its own Content-ID")
    head, delimiter, close = _layout(boundary)
    chunks = [head, data if isinstance(data, bytes) else data.to_xml()]
    for part in parts:
        check_framing(delimiter, part.body)
        layout = one_part_layout(part.content_type, boundary)
        chunks += [layout.before_id, str(part.content_id).encode("ascii"), _PART_END, part.body]
    chunks.append(close)
    return b"".join(chunks)


class OnePartLayout(NamedTuple):
    """:func:`build_payload`'s layout of a control document and one part of a given media
    type, as the constant pieces around the control document, the part's Content-ID and
    its body: ``head``, control, ``before_id``, Content-ID, ``after_id``, body,
    ``close``. A sender of octets writes one such payload per data."""

    head: bytes
    before_id: bytes
    after_id: bytes
    close: bytes
    #: What must not occur in the body (:func:`check_framing`).
    delimiter: bytes


@functools.lru_cache(maxsize=256)
def one_part_layout(content_type: str, boundary: str) -> OnePartLayout:
    """The pieces of a one-part payload for ``content_type`` and ``boundary``
    (cached: a sender keeps both data after data)."""
    head, delimiter, close = _layout(boundary)
    before_id = b"".join(
        (b"\r\n", delimiter, _PART_TYPE, content_type.encode("ascii"), _PART_MIDDLE)
    )
    return OnePartLayout(head, before_id, _PART_END, close, delimiter)


def can_frame(delimiter: bytes, body: bytes) -> bool:
    """True when ``body`` does not contain ``delimiter``, so that it can be framed by it."""
    return delimiter not in body


def check_framing(delimiter: bytes, body: bytes) -> None:
    """Raise ApexError 451 when ``body`` contains the ``delimiter`` it is framed by."""
    if not can_frame(delimiter, body):
        raise ApexError(ApexReplyCode.ACTION_ABORTED, "the boundary occurs in a part")


@functools.lru_cache(maxsize=64)
def _layout(boundary: str) -> tuple[bytes, bytes, bytes]:
    """The constant pieces of :func:`build_payload`'s layout for ``boundary``: the head
    up to the control document, the delimiter, the close delimiter line (which the
    canonical-layout splitter reads back). Cached: a sender keeps its boundary until a
    part happens to contain it."""
    delimiter = b"--" + boundary.encode("ascii")
    head = (
        f'Content-Type: {MULTIPART_RELATED}; boundary="{boundary}"; '
        f'start="<{CONTROL_ID}>"; type="{BEEP_XML}"\r\n\r\n'
    ).encode("ascii")
    control = f"\r\nContent-Type: {BEEP_XML}\r\nContent-ID: <{CONTROL_ID}>\r\n\r\n"
    return head + delimiter + control.encode("ascii"), delimiter, b"\r\n" + delimiter + b"--\r\n"


# --------------------------------------------------------------------------- references


def resolve_content(data: Data, parts: Mapping[str, MimePart]) -> MimePart | DataContent:
    """The content ``data``'s ``content`` attribute refers to (RFC 3340 section 4.1).

    ``#Name`` resolves to the ``data-content`` with that Name, ``cid:ID`` (with or without
    a fragment) to the part of ``parts`` with that Content-ID. Raises :class:`ApexError`
    550 when nothing by that name is present, 504 for other absolute URIs, 501 for a
    relative reference that is not a bare fragment.
    """
    reference = data.content
    if reference.startswith("cid:") and "%" not in reference and "#" not in reference:
        part = parts.get(reference[4:])  # the common reference: nothing to unquote or cut
        if part is not None:
            return part
    if reference.startswith("#"):
        content = data.data_content
        if content is None or content.name != reference[1:]:
            _dtd.fail(f"no data-content named {reference[1:]!r}", ApexReplyCode.ACTION_NOT_TAKEN)
        return content
    if not _dtd.is_absolute_uri(reference):
        _dtd.fail(f"content {reference!r} is neither absolute nor a fragment")
    scheme, _, rest = reference.partition(":")
    if scheme.lower() != "cid":
        _dtd.fail(
            f"content scheme {scheme!r} is not resolvable", ApexReplyCode.PARAMETER_NOT_IMPLEMENTED
        )
    content_id = urllib.parse.unquote(rest.partition("#")[0])
    part = parts.get(content_id)
    if part is None:
        _dtd.fail(f"no MIME part <{content_id}> in the payload", ApexReplyCode.ACTION_NOT_TAKEN)
    return part


__all__ = [
    "CONTROL_ID",
    "MAX_MIME_PARTS",
    "MULTIPART_RELATED",
    "MimePart",
    "OnePartLayout",
    "Payload",
    "build_payload",
    "can_frame",
    "check_framing",
    "one_part_layout",
    "parse_payload",
    "resolve_content",
]
