"""MIME entity headers of BEEP messages (RFC 3080 section 2.2).

Every BEEP message is a MIME entity: optional entity headers, an empty line, the body.
Absent headers take the defaults of section 2.2: ``Content-Type:
application/octet-stream`` and ``Content-Transfer-Encoding: binary``. The core never
parses the entity of a message it only relays; these helpers are for the layer that
consumes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from apexmesh.beep.errors import RemoteProtocolError

DEFAULT_CONTENT_TYPE: Final = "application/octet-stream"
DEFAULT_TRANSFER_ENCODING: Final = "binary"
BEEP_XML: Final = "application/beep+xml"

#: Header block larger than this is refused: entity headers of BEEP messages are a line
#: or two; an endless header block is an attack on memory.
MAX_ENTITY_HEADER_OCTETS: Final = 8192

_BEEP_XML_PREFIX: Final = b"Content-Type: application/beep+xml\r\n\r\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Entity:
    """A parsed MIME entity."""

    #: Header names in lower case mapped to their (unfolded) values.
    headers: dict[str, str] = field(default_factory=dict)
    #: The body octets.
    body: bytes = b""

    @property
    def content_type(self) -> str:
        """Media type without parameters, lower-cased, with the RFC 3080 default."""
        value = self.headers.get("content-type", DEFAULT_CONTENT_TYPE)
        return value.split(";", 1)[0].strip().lower()

    @property
    def transfer_encoding(self) -> str:
        """Content-Transfer-Encoding with the RFC 3080 default."""
        return self.headers.get("content-transfer-encoding", DEFAULT_TRANSFER_ENCODING).lower()


def build_entity(body: bytes, content_type: str | None = None) -> bytes:
    """Return a message payload: entity headers (if any), CRLF, body."""
    if content_type is None:
        return b"\r\n" + body
    if content_type == BEEP_XML:
        return _BEEP_XML_PREFIX + body
    return b"".join((b"Content-Type: ", content_type.encode("ascii"), b"\r\n\r\n", body))


def beep_xml(body: bytes) -> bytes:
    """Return an application/beep+xml message payload."""
    return _BEEP_XML_PREFIX + body


def split_entity(payload: bytes) -> Entity:
    """Split a message payload into entity headers and body.

    Raises :class:`RemoteProtocolError` (code 500) if the header block is not terminated
    by an empty line within :data:`MAX_ENTITY_HEADER_OCTETS`.
    """
    if payload.startswith(_BEEP_XML_PREFIX):
        return Entity(headers={"content-type": BEEP_XML}, body=payload[len(_BEEP_XML_PREFIX) :])
    if payload.startswith(b"\r\n"):
        return Entity(body=payload[2:])
    end = payload.find(b"\r\n\r\n", 0, MAX_ENTITY_HEADER_OCTETS)
    if end < 0:
        raise RemoteProtocolError("MIME entity headers are not terminated by an empty line")
    headers: dict[str, str] = {}
    name = ""
    for raw in payload[:end].split(b"\r\n"):
        line = raw.decode("latin-1")
        if line[:1] in (" ", "\t") and name:
            headers[name] += " " + line.strip()
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise RemoteProtocolError(f"malformed MIME header line: {line[:80]!r}")
        name = name.lower()
        headers[name] = value.strip()
    return Entity(headers=headers, body=payload[end + 4 :])
