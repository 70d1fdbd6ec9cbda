"""Building the BEEP payload of an outgoing ``data`` operation (RFC 3340 sections 4.1
and 4.4.4).

Octet content travels as a MIME part of a ``multipart/related`` whose start part is the
control document, named by a ``cid:`` URL (RFC 2392) with a globally unique Content-ID
(a counter under a random 128-bit prefix drawn once per process); XML content travels
inline as the ``data-content`` element named ``Content`` and referenced as ``#Content``,
exactly as the RFC's examples do. The multipart boundary is random (:mod:`secrets`) and
kept while no part contains it: every part is checked, and a part that happens to contain
it (or was crafted to) gets a fresh random boundary, so a payload is never cut in the
wrong place.

Data after data from one endpoint names the same originator, recipients and options:
the payload around the Content-ID and the body is made once for them (:class:`_Template`,
with the ``data`` element serialized and checked once) and each data joins seven pieces.
"""

from __future__ import annotations

import functools
import itertools
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, NamedTuple, TypeAlias

from apexmesh.apex.content import can_frame, check_framing, one_part_layout
from apexmesh.apex.data import Data, DataContent, Originator, Recipient
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.options import Option
from apexmesh.beep.mime import beep_xml
from apexmesh.beep.xml import Element, to_bytes

#: ``Name`` of the inline data-content, as in RFC 3340 section 4.1.
CONTENT_NAME: Final = "Content"

#: Default media type of octet content (RFC 3080 section 2.2).
OCTET_STREAM: Final = "application/octet-stream"

_MAX_BOUNDARY_ATTEMPTS: Final = 4


@dataclass(frozen=True, slots=True)
class XmlContent:
    """XML content (well-formed element content, UTF-8) to carry inline as the
    ``data-content`` of the data element (RFC 3340 section 4.1)."""

    xml: bytes


#: What :meth:`apexmesh.client.Attachment.send` carries: octets (a MIME part), XML
#: flagged with :class:`XmlContent`, or a parsed element (both inline).
Content: TypeAlias = bytes | XmlContent | Element

#: A recipient: an endpoint (text or parsed), or a ``recipient`` with its own options.
RecipientLike: TypeAlias = Endpoint | str | Recipient


@functools.lru_cache(maxsize=4096)
def _parse_endpoint(text: str) -> Endpoint:
    return Endpoint.parse(text)


def as_endpoint(value: Endpoint | str) -> Endpoint:
    """Parse endpoint text (RFC 3340 section 2.2); raises EndpointError (553).

    Endpoints are immutable, so the parse of each text is cached: applications that
    name their peers as strings do not pay for parsing on every send."""
    return value if isinstance(value, Endpoint) else _parse_endpoint(value)


def as_recipients(values: RecipientLike | Iterable[RecipientLike]) -> tuple[Recipient, ...]:
    """Normalize one or several recipients to ``recipient`` elements."""
    if type(values) is str:
        return _recipient_named(values)
    if isinstance(values, Endpoint | str | Recipient):
        values = (values,)
    return tuple(
        value if isinstance(value, Recipient) else Recipient(identity=as_endpoint(value))
        for value in values
    )


@functools.lru_cache(maxsize=4096)
def _recipient_named(text: str) -> tuple[Recipient, ...]:
    """One recipient named by its text (the common call), parsed once per text."""
    return (Recipient(identity=as_endpoint(text)),)


@functools.lru_cache(maxsize=256)
def _check_media_type(content_type: str) -> None:
    kind, slash, sub = content_type.partition("/")
    if (
        not slash
        or not kind
        or not sub
        or not content_type.isascii()
        or any(c in content_type for c in "\r\n")
    ):
        raise ValueError(f"not a media type: {content_type!r}")


#: The random part of this process's Content-IDs (RFC 2392 asks them to be unique
#: worldwide); a counter makes each one its own.
_CONTENT_ID_PREFIX: Final = secrets.token_hex(16)
_content_ids = itertools.count(1)


def _fresh_boundary() -> str:
    return f"apex-{secrets.token_hex(16)}"


#: The boundary this process writes until a part contains it.
_boundary = _fresh_boundary()


class _Template(NamedTuple):
    """A data payload for octet content, but for its Content-ID (written twice, in the
    ``content`` reference and the part's header) and its body: ``before_id``, ID,
    ``middle``, ID, ``after_id``, body, ``close``."""

    #: What it was made for, compared by identity (see :func:`_template`).
    originator: Endpoint
    recipients: tuple[Recipient, ...]
    options: tuple[Option, ...]
    content_type: str
    boundary: str
    #: Entity header, control part's header, ``<data content='cid:``.
    before_id: bytes
    #: ``'>``, the rest of the data element, the part's header up to its Content-ID.
    middle: bytes
    after_id: bytes
    close: bytes
    #: What must not occur in a body (:func:`check_framing`).
    delimiter: bytes
    #: What follows the counter in a Content-ID: ``.PREFIX@DOMAIN``.
    id_suffix: bytes


@functools.lru_cache(maxsize=1024)
def _make_template(
    originator: Endpoint,
    recipients: tuple[Recipient, ...],
    options: tuple[Option, ...],
    content_type: str,
    boundary: str,
) -> _Template:
    """The template for one sender's data: the ``data`` element serialized (and so
    checked) once for its originator, recipients and options."""
    _check_media_type(content_type)
    data = Data(
        content="cid:x",
        originator=Originator(identity=originator),
        recipients=recipients,
        options=options,
    )
    xml = data.to_xml()
    layout = one_part_layout(content_type, boundary)
    domain = originator.domain if not originator.domain.startswith("[") else "apex.invalid"
    return _Template(
        originator,
        recipients,
        options,
        content_type,
        boundary,
        layout.head + b"<data content='cid:",
        b"'>" + xml[xml.index(b">") + 1 :] + layout.before_id,
        layout.after_id,
        layout.close,
        layout.delimiter,
        f".{_CONTENT_ID_PREFIX}@{domain}".encode("ascii"),
    )


_last_template: _Template | None = None


def _template(
    originator: Endpoint,
    recipients: tuple[Recipient, ...],
    options: tuple[Option, ...],
    content_type: str,
) -> _Template:
    """:func:`_make_template` for the current boundary. The last one made is kept and
    recognized by identity, without hashing its key: an endpoint mostly sends data
    after data to the same recipients (:func:`as_recipients` caches them)."""
    global _last_template  # noqa: PLW0603  (a one-entry memo in front of the cache)
    last = _last_template
    if (
        last is not None
        and last.originator is originator
        and last.recipients is recipients
        and last.options is options
        and last.content_type is content_type
        and last.boundary is _boundary
    ):
        return last
    last = _last_template = _make_template(originator, recipients, options, content_type, _boundary)
    return last


def _octet_payload(
    originator: Endpoint,
    recipients: tuple[Recipient, ...],
    options: tuple[Option, ...],
    content_type: str,
    content: bytes,
) -> bytes:
    global _boundary  # noqa: PLW0603  (one boundary per process, renewed on collision)
    for _ in range(_MAX_BOUNDARY_ATTEMPTS):
        template = _template(originator, recipients, options, content_type)
        if can_frame(template.delimiter, content):
            content_id = b"%d" % next(_content_ids) + template.id_suffix
            return b"".join(
                (
                    template.before_id,
                    content_id,
                    template.middle,
                    content_id,
                    template.after_id,
                    content,
                    template.close,
                )
            )
        _boundary = _fresh_boundary()
    check_framing(template.delimiter, content)  # four random boundaries in one part: 451
    raise AssertionError("unreachable")  # pragma: no cover


def encode_data(
    *,
    originator: Endpoint,
    recipients: tuple[Recipient, ...],
    content: Content,
    content_type: str = OCTET_STREAM,
    options: tuple[Option, ...] = (),
) -> bytes:
    """The complete BEEP payload (entity headers included) of one data operation.

    Raises ApexError (500/501 invalid XML content or element, 554 too many recipients
    or options, 451 when the content contains every boundary tried), ValueError for a
    malformed ``content_type`` and TypeError for content of another type (text must be
    encoded, or wrapped in :class:`XmlContent` if it is XML).
    """
    if isinstance(content, bytes):
        return _octet_payload(originator, recipients, options, content_type, content)
    origin = Originator(identity=originator)
    if isinstance(content, XmlContent):
        xml = content.xml
    elif isinstance(content, Element):
        xml = to_bytes(content)
    else:
        raise TypeError(f"content must be bytes, XmlContent or an element, not {type(content)}")
    data = Data(
        content="#" + CONTENT_NAME,
        originator=origin,
        recipients=recipients,
        options=options,
        data_content=DataContent(name=CONTENT_NAME, content=xml),
    )
    return beep_xml(data.to_xml())


__all__ = [
    "CONTENT_NAME",
    "OCTET_STREAM",
    "Content",
    "RecipientLike",
    "XmlContent",
    "as_endpoint",
    "as_recipients",
    "encode_data",
]
