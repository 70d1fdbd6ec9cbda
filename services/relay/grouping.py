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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from apexmesh.relay.outcomes import ENDPOINT_DETACHED, NOT_HERE, Outcome

if TYPE_CHECKING:
    from apexmesh.apex.endpoint import Endpoint
    from services.relay.attachments import AttachmentTable
    from services.relay.edge import ApexChannel
    from services.relay.flow import Taken


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
    group: Group, table: AttachmentTable, *, on_taken: Callable[[], None] | None = None
) -> asyncio.Future[tuple[Outcome, ...]]:
    """Send ``group`` to the endpoints attached over this pod's channels: one data per
    channel, naming the recipients attached over it, each within its channel's bounds.
    The outcomes come back one per recipient, in the group's order; a recipient not
    attached here gets the 550 that sends the caller looking for it elsewhere.
    ``on_taken`` is called once every channel has queued (or refused) its data, when at
    least one queued it: this pod then has custody (services/relay/jobs.py)."""
    outcomes: list[Outcome] = [NOT_HERE] * len(group.recipients)
    channels: dict[ApexChannel, list[int]] = {}
    for index, endpoint in enumerate(group.recipients):
        channel = table.channel_of(endpoint)
        if channel is not None:
            channels.setdefault(channel, []).append(index)
    result: asyncio.Future[tuple[Outcome, ...]] = asyncio.get_running_loop().create_future()
    if not channels:
        result.set_result(tuple(outcomes))
        return result
    waiting = len(channels)

    def answered(indexes: list[int], outcome: Outcome) -> None:
        nonlocal waiting
        for index in indexes:
            outcomes[index] = outcome
        waiting -= 1
        if waiting == 0 and not result.done():
            result.set_result(tuple(outcomes))

    undecided = len(channels)
    queued = False

    def decided(taken: Taken) -> None:
        nonlocal undecided, queued
        undecided -= 1
        queued = queued or taken is None
        if undecided == 0 and queued and on_taken is not None:
            on_taken()

    def waited(future: asyncio.Future[Taken]) -> None:
        decided(ENDPOINT_DETACHED if future.cancelled() else future.result())

    for channel, indexes in channels.items():
        taken = channel.queue_data(group.payload(indexes), functools.partial(answered, indexes))
        if isinstance(taken, asyncio.Future):
            taken.add_done_callback(waited)
        else:
            decided(taken)
    return result


__all__ = ["Group", "deliver_here"]
