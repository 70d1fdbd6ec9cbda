"""The content of APEX data: payload structure and ``content`` references (RFC 3340
section 4.1).

A BEEP payload exchanged via APEX is either an application/beep+xml control document
alone, or a ``multipart/related`` (RFC 2387) whose start part is that control document
and whose other parts are arbitrary MIME content named by ``Content-ID``. The ``data``
element's ``content`` attribute is a URI-reference to the content:

* ``cid:2@example.com`` (RFC 2392) names a MIME part of the same payload;
* ``#Content`` names the ``data-content`` element of the same ``data`` (its ``Name``).

MIME is parsed with the standard library's :mod:`email` package, never by hand; bodies
come back octet for octet (BEEP is 8bit-clean and section 4.1 asks for no transformative
Content-Transfer-Encoding; base64 and quoted-printable parts are decoded anyway).

RFC 3340 names no reply code for a reference that resolves to nothing; 550 "requested
action not taken" is used, as the RFC does for other unknown references (section 4.4.3,
"unknown transaction-identifier"; section 5.1, "unknown endpoint identity"). A scheme
other than ``cid`` cannot be resolved inside the payload: 504, "parameter not
implemented".
"""

from __future__ import annotations

import email.errors
import email.policy
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message
from email.parser import BytesParser
from typing import Final

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

_POLICY: Final = email.policy.HTTP


@dataclass(frozen=True, slots=True, kw_only=True)
class MimePart:
    """One body part of a multipart/related payload."""

    #: The Content-ID without angle brackets, or None when the part has none.
    content_id: str | None
    #: Media type without parameters, lower-cased (``image/gif``).
    content_type: str
    #: The part's headers in order, as (name, value) pairs.
    headers: tuple[tuple[str, str], ...] = ()
    #: The body octets (transfer encoding removed).
    body: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class Payload:
    """An APEX payload: the control document and the MIME parts it can reference."""

    #: The application/beep+xml control document (for :func:`parse_apex`).
    control: bytes
    #: The other parts by Content-ID (empty when the payload is the document alone).
    parts: Mapping[str, MimePart] = field(default_factory=dict)


def parse_payload(payload: bytes) -> Payload:
    """Split a BEEP message payload (entity headers, CRLF, body) into an APEX payload.

    Raises :class:`ApexError`: 500 when the MIME structure is broken, 501 when it is
    well-formed but not what section 4.1 describes (another media type, no start part,
    a start part that is not application/beep+xml, duplicate Content-IDs), 504 for a
    nested multipart part, 554 above :data:`MAX_MIME_PARTS`.
    """
    try:
        entity = split_entity(payload)
    except BeepError as exc:
        raise ApexError(ApexReplyCode.GENERAL_SYNTAX_ERROR, str(exc)) from None
    if entity.content_type == BEEP_XML:
        return Payload(control=entity.body)
    if entity.content_type != MULTIPART_RELATED:
        _dtd.fail(f"APEX payloads are {BEEP_XML} or {MULTIPART_RELATED}, not {entity.content_type}")
    try:
        message = BytesParser(policy=_POLICY).parsebytes(payload)
        return _related(message)
    except (email.errors.MessageError, LookupError, UnicodeError) as exc:
        raise ApexError(ApexReplyCode.GENERAL_SYNTAX_ERROR, f"malformed MIME: {exc}") from None


def _related(message: Message) -> Payload:
    if message.defects:
        raise ApexError(ApexReplyCode.GENERAL_SYNTAX_ERROR, f"malformed MIME: {message.defects}")
    subparts = message.get_payload()
    if not isinstance(subparts, list) or not subparts:
        raise ApexError(ApexReplyCode.GENERAL_SYNTAX_ERROR, "multipart/related without parts")
    if len(subparts) > MAX_MIME_PARTS:
        _dtd.fail(f"more than {MAX_MIME_PARTS} MIME parts", ApexReplyCode.TRANSACTION_FAILED)
    kind = message.get_param("type")
    if isinstance(kind, str) and kind.lower() != BEEP_XML:
        _dtd.fail(f"multipart/related type must be {BEEP_XML}")
    start = message.get_param("start")
    start_id = _content_id(start) if isinstance(start, str) else None
    parts = [_part(sub) for sub in subparts if isinstance(sub, Message)]
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


def _part(message: Message) -> MimePart:
    if message.defects:
        raise ApexError(
            ApexReplyCode.GENERAL_SYNTAX_ERROR, f"malformed MIME part: {message.defects}"
        )
    if message.is_multipart():
        raise ApexError(ApexReplyCode.PARAMETER_NOT_IMPLEMENTED, "nested multipart parts")
    body = message.get_payload(decode=True)
    raw_id = message.get("Content-ID")
    return MimePart(
        content_id=None if raw_id is None else _content_id(str(raw_id)),
        content_type=message.get_content_type(),
        headers=tuple((str(name), str(value)) for name, value in message.items()),
        body=body if isinstance(body, bytes) else b"",
    )


def _content_id(value: str) -> str:
    return value.strip().removeprefix("<").removesuffix(">").strip()


def build_payload(data: Data, parts: Sequence[MimePart], *, boundary: str) -> bytes:
    """A multipart/related payload: ``data`` as the start part, then ``parts``.

    The caller chooses ``boundary`` (this package does not draw random numbers); it must
    not occur in any part. Raises :class:`ApexError` 451 when a part cannot be framed.
    """
    control_id = "apex-control"
    if any(part.content_id in (None, control_id) for part in parts):
        raise ApexError(ApexReplyCode.ACTION_ABORTED, "every part needs its own Content-ID")
    delimiter = b"--" + boundary.encode("ascii")
    chunks = [
        (
            f'Content-Type: {MULTIPART_RELATED}; boundary="{boundary}"; '
            f'start="<{control_id}>"; type="{BEEP_XML}"\r\n\r\n'
        ).encode("ascii"),
        delimiter,
        f"\r\nContent-Type: {BEEP_XML}\r\nContent-ID: <{control_id}>\r\n\r\n".encode("ascii"),
        data.to_xml(),
    ]
    for part in parts:
        if delimiter in part.body:
            raise ApexError(ApexReplyCode.ACTION_ABORTED, "the boundary occurs in a part")
        head = f"\r\nContent-Type: {part.content_type}\r\nContent-Transfer-Encoding: binary"
        head += f"\r\nContent-ID: <{part.content_id}>\r\n\r\n"
        chunks += [b"\r\n", delimiter, head.encode("ascii"), part.body]
    chunks += [b"\r\n", delimiter, b"--\r\n"]
    return b"".join(chunks)


# --------------------------------------------------------------------------- references


def resolve_content(data: Data, parts: Mapping[str, MimePart]) -> MimePart | DataContent:
    """The content ``data``'s ``content`` attribute refers to (RFC 3340 section 4.1).

    ``#Name`` resolves to the ``data-content`` with that Name, ``cid:ID`` (with or without
    a fragment) to the part of ``parts`` with that Content-ID. Raises :class:`ApexError`
    550 when nothing by that name is present, 504 for other absolute URIs, 501 for a
    relative reference that is not a bare fragment.
    """
    reference = data.content
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
    "MAX_MIME_PARTS",
    "MULTIPART_RELATED",
    "MimePart",
    "Payload",
    "build_payload",
    "parse_payload",
    "resolve_content",
]
