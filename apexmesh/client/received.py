"""Data as an application receives it (RFC 3340 section 4.4.4.2).

"If any per-data or per-originator options are present, they are not processed (but may
be noted)", and likewise per-recipient options: :class:`ReceivedData` therefore exposes
every option untouched, next to the resolved content (section 4.1: a ``cid:`` MIME part
or the ``#Name`` data-content) and the parsed ``data`` element itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from apexmesh.apex.content import MimePart, resolve_content
from apexmesh.apex.data import Data
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.options import Option
from apexmesh.apex.report import StatusResponse
from apexmesh.beep.mime import BEEP_XML


class ReceivedData(NamedTuple):
    """One ``data`` delivered to an attached endpoint (immutable; a NamedTuple, made at C
    speed for every data an endpoint receives)."""

    #: The sending endpoint.
    originator: Endpoint
    #: Every recipient named by the data, in document order.
    recipients: tuple[Endpoint, ...]
    #: The content octets: the MIME part's body, or the data-content's XML.
    content: bytes
    #: Media type of ``content`` (application/beep+xml for inline XML).
    content_type: str
    #: Per-data options, not processed (section 4.4.4.2 step 1).
    options: tuple[Option, ...]
    #: The parsed ``data`` element (per-originator and per-recipient options included).
    data: Data
    #: The statusResponse carried by a report (section 5.1) nobody collected, else None.
    status_response: StatusResponse | None = None

    @property
    def is_xml(self) -> bool:
        """True when the content was carried inline as ``data-content``."""
        return self.data.data_content is not None and self.data.content.startswith("#")

    @property
    def originator_options(self) -> tuple[Option, ...]:
        """Per-originator options, not processed (section 4.4.4.2 step 1)."""
        return self.data.originator.options

    @property
    def recipient_options(self) -> dict[Endpoint, tuple[Option, ...]]:
        """Per-recipient options by recipient, not processed (section 4.4.4.2 step 2.1)."""
        return {r.identity: r.options for r in self.data.recipients}


def decode_data(
    data: Data,
    parts: Mapping[str, MimePart],
    status_response: StatusResponse | None = None,
) -> ReceivedData:
    """Resolve ``data``'s content reference (section 4.1) and build the delivery.

    Raises ApexError: 550 when the reference names nothing in the payload, 504 for a
    scheme other than ``cid``, 501 for another relative reference.
    """
    resolved = resolve_content(data, parts)
    if isinstance(resolved, MimePart):
        content, content_type = resolved.body, resolved.content_type
    else:
        content, content_type = resolved.content, BEEP_XML
    recipients = data.recipients
    return _new_tuple(
        ReceivedData,
        (
            data.originator.identity,
            (recipients[0].identity,)
            if len(recipients) == 1
            else tuple(r.identity for r in recipients),
            content,
            content_type,
            data.options,
            data,
            status_response,
        ),
    )


#: Builds a NamedTuple from a tuple of its fields without its Python-level ``__new__``
#: (one for every data an endpoint receives).
_new_tuple = tuple.__new__


__all__ = ["ReceivedData", "decode_data"]
