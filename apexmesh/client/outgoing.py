"""Building the BEEP payload of an outgoing ``data`` operation (RFC 3340 sections 4.1
and 4.4.4).

Octet content travels as a MIME part of a ``multipart/related`` whose start part is the
control document, named by a ``cid:`` URL (RFC 2392) with a globally unique, random
Content-ID; XML content travels inline as the ``data-content`` element named
``Content`` and referenced as ``#Content``, exactly as the RFC's examples do. The
multipart boundary is random too (:mod:`secrets`), so no content can be crafted to
collide with it; :func:`apexmesh.apex.content.build_payload` still checks.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TypeAlias

from apexmesh.apex.content import MimePart, build_payload
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
    if isinstance(values, Endpoint | str | Recipient):
        values = (values,)
    return tuple(
        value if isinstance(value, Recipient) else Recipient(identity=as_endpoint(value))
        for value in values
    )


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


def _content_id(originator: Endpoint) -> str:
    domain = originator.domain if not originator.domain.startswith("[") else "apex.invalid"
    return f"{secrets.token_hex(16)}@{domain}"


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
    origin = Originator(identity=originator)
    if isinstance(content, bytes):
        _check_media_type(content_type)
        content_id = _content_id(originator)
        data = Data(
            content=f"cid:{content_id}",
            originator=origin,
            recipients=recipients,
            options=options,
        )
        part = MimePart(content_id=content_id, content_type=content_type, body=content)
        for attempt in range(_MAX_BOUNDARY_ATTEMPTS):
            try:
                return build_payload(data, (part,), boundary=f"apex-{secrets.token_hex(16)}")
            except ApexError:
                if attempt == _MAX_BOUNDARY_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover
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
