"""The ``blob`` and ``error`` elements of the BEEP SASL profiles (RFC 3080 sections 4.1.2,
4.1.3 and the DTD in 7.3).

A ``blob`` carries base64 octets (RFC 3080 section 4.1.2: SASL data is binary) and a
``status`` of ``abort`` (client gives up), ``complete`` (server: success) or ``continue``
(the default). The server signals failure with an ``error`` element instead. Every text a
peer sends is parsed by :func:`apexmesh.beep.xml.parse_xml`; every problem becomes a
:class:`~apexmesh.beep.sasl.mechanism.SaslError` carrying the reply code to send.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
from typing import Final

from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.sasl.mechanism import SaslError
from apexmesh.beep.xml import XmlError, escape_text, parse_xml

#: Largest decoded blob accepted. RFC 2831 caps a DIGEST-MD5 digest-response at 4096
#: octets, the largest SASL message among our mechanisms (PLAIN is at most 767 octets by
#: RFC 4616, SCRAM messages are a few hundred); a bigger blob is an attack, not a login.
MAX_BLOB_OCTETS: Final = 4096

#: Largest SASL element (blob or error, as XML text) parsed at all: the base64 of
#: MAX_BLOB_OCTETS (5464 characters) plus markup and line breaks, rounded up. Anything
#: larger is refused with 501 before the XML parser sees it.
MAX_SASL_XML_OCTETS: Final = 8192

_BASE64_WHITESPACE: Final = str.maketrans("", "", " \t\r\n")


class BlobStatus(enum.Enum):
    """The ``status`` attribute of ``blob`` (RFC 3080 section 4.1.3)."""

    ABORT = "abort"
    COMPLETE = "complete"
    CONTINUE = "continue"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Blob:
    """One ``blob`` element."""

    #: The decoded octets (empty when the element had no content).
    data: bytes
    #: The element's status (``continue`` when the attribute is absent).
    status: BlobStatus = BlobStatus.CONTINUE


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ErrorElement:
    """One ``error`` element (RFC 3080 section 2.3.1.5)."""

    #: The three-digit reply code.
    code: int
    #: The diagnostic text (possibly empty).
    text: str


def encode_blob(data: bytes | None = None, status: BlobStatus = BlobStatus.CONTINUE) -> str:
    """Serialize a blob; ``data`` None gives an empty element such as ``<blob status='abort'/>``."""
    attr = "" if status is BlobStatus.CONTINUE else f" status='{status.value}'"
    if data is None:
        return f"<blob{attr}/>"
    return f"<blob{attr}>{base64.b64encode(data).decode('ascii')}</blob>"


def encode_error(code: int, text: str = "") -> str:
    """Serialize an ``error`` element."""
    if not text:
        return f"<error code='{code:03d}'/>"
    return f"<error code='{code:03d}'>{escape_text(text)}</error>"


def _syntax(message: str) -> SaslError:
    return SaslError(ReplyCode.PARAMETER_SYNTAX_ERROR, message)


def parse_element(text: bytes | str) -> Blob | ErrorElement:
    """Parse a ``blob`` or ``error`` element from a peer.

    Raises :class:`SaslError` with 500 (poorly-formed XML) or 501 (anything else that is
    wrong: another element, a bad status, child elements, bad base64, too large).
    """
    try:
        root = parse_xml(text, max_octets=MAX_SASL_XML_OCTETS)
    except XmlError as exc:
        raise SaslError(ReplyCode(exc.code), str(exc)) from None
    if len(root):
        raise _syntax(f"<{root.tag}> must not contain elements")
    content = root.text or ""
    if root.tag == "error":
        code = root.get("code", "")
        if len(code) != 3 or not code.isascii() or not code.isdigit():
            raise _syntax("error code must be three digits")
        return ErrorElement(code=int(code), text=content)
    if root.tag != "blob":
        raise _syntax("expected <blob> or <error>")
    raw_status = root.get("status", BlobStatus.CONTINUE.value)
    try:
        status = BlobStatus(raw_status)
    except ValueError:
        raise _syntax("blob status must be abort, complete or continue") from None
    encoded = content.translate(_BASE64_WHITESPACE)
    if not encoded.isascii():
        raise _syntax("blob content is not base64")
    if len(encoded) > 4 * ((MAX_BLOB_OCTETS + 2) // 3):
        raise _syntax(f"blob larger than {MAX_BLOB_OCTETS} octets")
    try:
        data = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise _syntax("blob content is not base64") from None
    if len(data) > MAX_BLOB_OCTETS:
        raise _syntax(f"blob larger than {MAX_BLOB_OCTETS} octets")
    return Blob(data=data, status=status)


def parse_blob(text: bytes | str) -> Blob:
    """Parse an element that must be a ``blob`` (what a server receives). Raises SaslError."""
    element = parse_element(text)
    if isinstance(element, ErrorElement):
        raise _syntax("expected <blob>, got <error>")
    return element


__all__ = [
    "MAX_BLOB_OCTETS",
    "MAX_SASL_XML_OCTETS",
    "Blob",
    "BlobStatus",
    "ErrorElement",
    "encode_blob",
    "encode_error",
    "parse_blob",
    "parse_element",
]
