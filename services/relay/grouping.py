"""Several recipients in one data element (RFC 3340 section 4.4.4.1).

"Providing that these semantics are preserved, a relay may choose to optimize its
behavior by grouping multiple recipients in a single data element that is subsequently
transmitted." A fan-out (a pubsub publication names every subscriber) would otherwise
cost one BEEP message, one XML parse and one ``ok`` per recipient at every hop. Here the
recipients of a data bound for the same APEX channel share one data element; the
application answers for all of them at once (section 4.4.4.2: ``ok`` when it processed
any), and that answer is each grouped recipient's outcome.

A :class:`Group` keeps the payload in pieces (the part before the recipients, each
recipient's element, the part after), so the recipients can be split by channel, here or
on the pod that holds their attachments, without parsing anything again.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.relay.outcomes import NOT_HERE_OUTCOME, Outcome

if TYPE_CHECKING:
    from apexmesh.apex.associations import Attachment
    from apexmesh.apex.endpoint import Endpoint
    from services.relay.edge import ApexChannel


@dataclass(frozen=True, slots=True)
class Group:
    """Recipients of one data that share a next hop, with that data's payload in pieces."""

    recipients: tuple[Endpoint, ...]
    #: Each recipient's ``recipient`` element, in the order of ``recipients``.
    elements: tuple[bytes, ...]
    #: The payload up to the first recipient element, and from after the last one.
    head: bytes
    tail: bytes

    def payload(self, indexes: Sequence[int]) -> bytes:
        """The payload of one data naming the recipients at ``indexes``."""
        elements = self.elements
        pieces = [self.head]
        pieces += [elements[i] for i in indexes]
        pieces.append(self.tail)
        return b"".join(pieces)


def deliver_here(
    group: Group, local: Mapping[Endpoint, tuple[ApexChannel, Attachment]]
) -> asyncio.Future[tuple[Outcome, ...]]:
    """Send ``group`` to the endpoints attached over this pod's channels: one data per
    channel, naming the recipients attached over it. The outcomes come back one per
    recipient, in the group's order; a recipient not attached here gets the 550 that
    sends the caller looking for it elsewhere."""
    outcomes: list[Outcome] = [NOT_HERE_OUTCOME] * len(group.recipients)
    channels: dict[ApexChannel, list[int]] = {}
    for index, endpoint in enumerate(group.recipients):
        held = local.get(endpoint)
        if held is not None:
            channels.setdefault(held[0], []).append(index)
    result: asyncio.Future[tuple[Outcome, ...]] = asyncio.get_running_loop().create_future()
    if not channels:
        result.set_result(tuple(outcomes))
        return result
    waiting = len(channels)

    def answered(indexes: list[int], future: asyncio.Future[Outcome]) -> None:
        nonlocal waiting
        outcome = future.result()
        for index in indexes:
            outcomes[index] = outcome
        waiting -= 1
        if waiting == 0 and not result.done():
            result.set_result(tuple(outcomes))

    for channel, indexes in channels.items():
        delivery = channel.deliver(group.payload(indexes))
        delivery.add_done_callback(functools.partial(answered, indexes))
    return result


__all__ = ["Group", "deliver_here"]
