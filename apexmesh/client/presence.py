"""Presence helpers of the endpoint SDK (RFC 3343): talk to ``apex=presence@DOMAIN``.

::

    presence = PresenceClient(barney)                 # barney: an attached Attachment
    trans_id = await presence.subscribe("fred@example.com", duration=3600)
    async for message in presence.messages():         # Publish, Notify, Terminate, Reply
        ...

Operations are sent inline (``data-content``, RFC 3343 section 4.1); the service's
answers arrive as data from ``apex=presence@DOMAIN`` and :func:`presence_message` turns
one into its element. Data from anyone else is not a presence message (None).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from apexmesh.apex import _dtd
from apexmesh.apex.elements import Error, Reply, Terminate, error_from, reply_from
from apexmesh.apex.endpoint import Endpoint, well_known
from apexmesh.apex.errors import ApexError
from apexmesh.apex.presence import (
    SERVICE_NAME,
    Notify,
    Presence,
    Publish,
    Subscribe,
    Watch,
    format_time,
    parse_service_message,
)
from apexmesh.client.attachment import Attachment
from apexmesh.client.outgoing import XmlContent
from apexmesh.client.received import ReceivedData

#: What the service sends: ``publish``, ``notify``, ``terminate``, ``reply``, and the
#: ``error`` that answers a terminate of an unknown transID (RFC 3343 section 4.5).
PresenceMessage = Publish | Notify | Terminate | Reply | Error


def presence_message(received: ReceivedData) -> PresenceMessage | None:
    """The presence element carried by ``received`` when it comes from an
    ``apex=presence`` service, else None. Raises ApexError for a malformed one."""
    sender = received.originator
    if not (sender.is_service and sender.address == f"apex={SERVICE_NAME}"):
        return None
    message = parse_service_message(received.content)
    if message is not None:
        return message
    root = _dtd.parse_root(received.content)
    tag = _dtd.tag_of(root)
    if tag == "reply":
        return reply_from(root, require_trans_id=False)
    if tag == "error":
        return error_from(root)
    return None


class PresenceClient:
    """Sends presence operations from one attachment to its domain's presence service."""

    def __init__(self, attachment: Attachment, *, first_trans_id: int = 1) -> None:
        self.attachment = attachment
        self.service = well_known(SERVICE_NAME, attachment.endpoint.domain)
        self._ids = itertools.count(first_trans_id)

    def next_trans_id(self) -> int:
        return next(self._ids)

    async def _send(self, xml: bytes) -> None:
        await self.attachment.send(self.service, XmlContent(xml))

    async def subscribe(
        self, publisher: str | Endpoint, *, duration: int, trans_id: int | None = None
    ) -> int:
        """Subscribe to ``publisher``'s presence (0: a one-time poll); the transID."""
        trans_id = self.next_trans_id() if trans_id is None else trans_id
        target = publisher if isinstance(publisher, Endpoint) else Endpoint.parse(publisher)
        await self._send(Subscribe(publisher=target, trans_id=trans_id, duration=duration).to_xml())
        return trans_id

    async def watch(
        self, publisher: str | Endpoint, *, duration: int, trans_id: int | None = None
    ) -> int:
        """Watch who subscribes to ``publisher``; the transID."""
        trans_id = self.next_trans_id() if trans_id is None else trans_id
        target = publisher if isinstance(publisher, Endpoint) else Endpoint.parse(publisher)
        await self._send(Watch(publisher=target, trans_id=trans_id, duration=duration).to_xml())
        return trans_id

    async def publish(self, presence: Presence, *, trans_id: int | None = None) -> int:
        """Publish ``presence`` (its lastUpdate must match the service's entry)."""
        trans_id = self.next_trans_id() if trans_id is None else trans_id
        publish = Publish(
            publisher=presence.publisher,
            trans_id=trans_id,
            time_stamp=format_time(datetime.now(UTC)),
            presence=presence,
        )
        await self._send(publish.to_xml())
        return trans_id

    async def terminate(self, trans_id: int) -> None:
        """End a subscribe or watch operation."""
        await self._send(Terminate(trans_id=trans_id).to_xml())

    async def next_message(self) -> PresenceMessage:
        """The next presence message (other data, and malformed messages, are skipped)."""
        while True:
            received = await self.attachment.receive()
            try:
                message = presence_message(received)
            except ApexError:
                continue
            if message is not None:
                return message

    async def messages(self) -> AsyncIterator[PresenceMessage]:
        """Presence messages as they arrive."""
        while True:
            yield await self.next_message()


__all__ = ["PresenceClient", "PresenceMessage", "presence_message"]
