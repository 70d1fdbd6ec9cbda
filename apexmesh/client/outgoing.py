"""Building the BEEP payload of an outgoing ``data`` operation (RFC 3340 sections 4.1
and 4.4.4).

Octet content travels as a MIME part of a ``multipart/related`` whose start part is the
control document, named by a ``cid:`` URL (RFC 2392) with a globally unique Content-ID
(a counter under a random 128-bit prefix drawn once per process); XML content travels
inline as the ``data-content`` element named ``Content`` and referenced as ``#Content``,
exactly as the RFC's examples do. The multipart boundary is random (:mod:`secrets`) and
kept while no part contains it: :func:`apexmesh.apex.content.build_one_part` checks every
part, and a part that happens to contain it (or was crafted to) gets a fresh random
boundary, so a payload is never cut in the wrong place.

Data after data from one endpoint names the same originator, recipients and options: the
``data`` element around its content reference is serialized once for them
(:func:`_envelope`) and the payload assembled from ready pieces.
"""

from __future__ import annotations

import functools
import itertools
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TypeAlias

from apexmesh.apex.content import build_one_part
from apexmesh.apex.data import Data, DataContent, Originator, Recipient
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
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
        value if isinstance(value, Recipient) else Recipient.plain(as_endpoint(value))
        for value in values
    )


@functools.lru_cache(maxsize=4096)
def _recipient_named(text: str) -> tuple[Recipient, ...]:
    """One recipient named by its text (the common call), parsed once per text."""
    return (Recipient.plain(as_endpoint(text)),)


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


def _content_id(originator: Endpoint) -> str:
    domain = originator.domain if not originator.domain.startswith("[") else "apex.invalid"
    return f"{next(_content_ids)}.{_CONTENT_ID_PREFIX}@{domain}"


def _fresh_boundary() -> str:
    return f"apex-{secrets.token_hex(16)}"


#: The boundary this process writes until a part contains it.
_boundary = _fresh_boundary()


@functools.lru_cache(maxsize=1024)
def _envelope(
    originator: Endpoint, recipients: tuple[Recipient, ...], options: tuple[Option, ...]
) -> bytes:
    """The ``data`` element after its start tag (originator, recipients, options, end
    tag): built and checked once per originator, recipients and options."""
    data = Data(
        content="cid:x",
        originator=Originator(identity=originator),
        recipients=recipients,
        options=options,
    )
    xml = data.to_xml()
    return xml[xml.index(b">") + 1 :]


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
    or options), ValueError for a malformed ``content_type`` and TypeError for content of
    another type (text must be encoded, or wrapped in :class:`XmlContent` if it is XML).
    """
    global _boundary  # noqa: PLW0603  (one boundary per process, renewed on collision)
    if isinstance(content, bytes):
        _check_media_type(content_type)
        content_id = _content_id(originator)
        control = b"".join(
            (
                b"<data content='cid:",
                content_id.encode("ascii"),
                b"'>",
                _envelope(originator, recipients, options),
            )
        )
        for attempt in range(_MAX_BOUNDARY_ATTEMPTS):
            try:
                return build_one_part(
                    control, content_id, content_type, content, boundary=_boundary
                )
            except ApexError:
                if attempt == _MAX_BOUNDARY_ATTEMPTS - 1:
                    raise
                _boundary = _fresh_boundary()
        raise AssertionError("unreachable")  # pragma: no cover
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
