"""The endpoints attached over this pod's APEX channels (RFC 3340 section 4.4.1).

Redis knows which pod holds each endpoint of the domain (apexmesh/store/attachments.py);
this table knows, for the endpoints this pod holds, the channel and the attachment. The
router, the gRPC servicer (deliveries from other pods), the lease loop and the admin
views read it through these methods rather than a shared dictionary.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from apexmesh.apex.associations import Attachment
    from apexmesh.apex.endpoint import Endpoint
    from services.relay.edge import ApexChannel


class AttachmentTable:
    """Endpoint -> (channel, attachment) for the endpoints attached to this pod."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[Endpoint, tuple[ApexChannel, Attachment]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, endpoint: object) -> bool:
        return endpoint in self._held

    def get(self, endpoint: Endpoint) -> tuple[ApexChannel, Attachment] | None:
        """The channel and attachment of ``endpoint``, None when not attached here."""
        return self._held.get(endpoint)

    def channel_of(self, endpoint: Endpoint) -> ApexChannel | None:
        """The APEX channel ``endpoint`` is attached over, None when not attached here."""
        held = self._held.get(endpoint)
        return None if held is None else held[0]

    def add(self, endpoint: Endpoint, channel: ApexChannel, attachment: Attachment) -> None:
        self._held[endpoint] = (channel, attachment)

    def remove(self, endpoint: Endpoint, channel: ApexChannel) -> bool:
        """Forget ``endpoint`` if it is attached over ``channel``; True when it was."""
        held = self._held.get(endpoint)
        if held is None or held[0] is not channel:
            return False
        del self._held[endpoint]
        return True

    def items(self) -> Iterator[tuple[Endpoint, tuple[ApexChannel, Attachment]]]:
        """Every attachment (a snapshot: the table may change while it is used)."""
        return iter(tuple(self._held.items()))

    def channels(self) -> set[ApexChannel]:
        """The channels at least one endpoint is attached over."""
        return {channel for channel, _ in self._held.values()}


__all__ = ["AttachmentTable"]
