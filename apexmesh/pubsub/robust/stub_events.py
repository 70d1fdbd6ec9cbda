"""What the subscriber stub (:mod:`apexmesh.pubsub.robust.stub`) hands its adapter: the
publications for the application, the gap requests to send, and what to tell the
application (delayed, repair refused, resynchronised); and the stub's counters."""

from __future__ import annotations

from dataclasses import dataclass

from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.robust.elements import RobustInfo
from apexmesh.pubsub.robust.operations import GapRequest
from apexmesh.pubsub.robust.publish_types import PublishType


@dataclass(frozen=True, slots=True)
class Publication:
    """What the application receives: a publication of its topic, once, in order."""

    topic: str
    source: Endpoint
    source_seq: int
    type: PublishType | None
    item: str | None
    permtoken: str | None
    contributor: Endpoint | None
    payload: bytes


def publication_of(topic: str, info: RobustInfo, payload: bytes) -> Publication:
    """The publication a delivery (or a snapshot's image) of ``topic`` carries."""
    return Publication(
        topic=topic,
        source=info.source,
        source_seq=info.source_seq or 0,
        type=info.type,
        item=info.item,
        permtoken=info.permtoken,
        contributor=info.contributor,
        payload=payload,
    )


@dataclass(frozen=True, slots=True)
class Deliver:
    """Hand ``publication`` to the application (in order, exactly once)."""

    publication: Publication


@dataclass(frozen=True, slots=True)
class SendGap:
    """Send ``request`` to ``apex=pubsub@DOMAIN``."""

    request: GapRequest


@dataclass(frozen=True, slots=True)
class Delayed:
    """Nothing was heard on the link for ``silent_ms`` (heartbeats overdue)."""

    silent_ms: int
    #: The link seq the stub waits for (None: nothing was ever received).
    expected_link_seq: int | None


@dataclass(frozen=True, slots=True)
class RepairRefused:
    """The service refused a repair by source with ``code``: data was lost."""

    code: int
    request: GapRequest


@dataclass(frozen=True, slots=True)
class Resynchronised:
    """The service restarted the link (a new ``epoch``, link seq 0)."""

    epoch: int


StubEvent = Deliver | SendGap | Delayed | RepairRefused | Resynchronised


@dataclass(slots=True)
class StubStats:
    """Counters an application or a test reads."""

    delivered: int = 0
    duplicates: int = 0
    gaps_detected: int = 0
    link_repairs: int = 0
    source_repairs: int = 0
    refused: int = 0
    resyncs: int = 0


__all__ = [
    "Delayed",
    "Deliver",
    "Publication",
    "publication_of",
    "RepairRefused",
    "Resynchronised",
    "SendGap",
    "StubEvent",
    "StubStats",
]
