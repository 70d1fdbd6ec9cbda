"""The pubsub catalogue: every topic and subscription of the event log, folded (sans I/O).

The event log (``pubsub:events``, docs/pubsub.md "Event log (schema v2)") holds one entry
per change of a topic or subscription. Folding it gives the whole catalogue of a
deployment: what an operator lists, what the leader counts, what the Spark snapshot job
(``spark/snapshot.py``) writes to Parquet and back to Redis. The rule, written once here
and followed by the Spark job's DataFrame code too (its tests compare both):

- events are taken in stream-id order; the id ``"<ms>-<seq>"`` packs into one sortable
  integer (:func:`pack_id`), and an id seen twice counts once (an export range read
  twice, a snapshot and the log overlapping);
- a topic is the last ``topic.created``/``topic.deleted`` of its (domain, topic): it
  exists when that is a creation, with that creation's ``settings``;
- a subscription is the last ``subscription.created``/``renewed``/``ended`` of its
  identity (domain, topic, subscriber, subscription_id): it lives when that is a
  creation or renewal, its lease has not ended at the snapshot time
  (``expires_ms >= at_ms``), and its topic exists and was created before it (a topic
  deleted and created again starts with no subscription, whatever the log says);
- a ``topic.modified`` (draft-wyman 6.2.2) replaces an existing topic's ``settings``
  and nothing else (its creation, and so its subscriptions, stand);
- entries of schema v1 read as v2 with the new fields empty; an unknown event type is
  ignored (counted in :attr:`Catalogue.unknown`).

A :class:`Catalogue` is also a starting point: a snapshot's rows are records carrying
the id of the event that set them, so "snapshot + later events" folds exactly as the
whole log would (:meth:`Catalogue.apply` skips ids at or below :attr:`position`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from apexmesh.pubsub.catalogue_index import CatalogueIndex

#: Version of the snapshot's rows (Parquet, Redis, manifest); bumped when a field
#: changes meaning.
SNAPSHOT_SCHEMA: Final = 1

#: Bits of the sequence part of a packed id: 2**21 entries per millisecond, and
#: milliseconds up to 2**42 (year 2109) keep the packed id a positive 63-bit integer
#: (Spark's LongType, Parquet's INT64).
SEQ_BITS: Final = 21
_SEQ_LIMIT: Final = 1 << SEQ_BITS

TOPIC_CREATED: Final = "topic.created"
TOPIC_DELETED: Final = "topic.deleted"
#: Draft-wyman 6.2.2: an existing topic's settings changed (its creation stands).
TOPIC_MODIFIED: Final = "topic.modified"
SUB_CREATED: Final = "subscription.created"
SUB_RENEWED: Final = "subscription.renewed"
SUB_ENDED: Final = "subscription.ended"
TOPIC_EVENTS: Final = frozenset({TOPIC_CREATED, TOPIC_DELETED})
SUBSCRIPTION_EVENTS: Final = frozenset({SUB_CREATED, SUB_RENEWED, SUB_ENDED})

#: Every field of a v2 event (docs/pubsub.md); v1 entries lack some, read as "".
EVENT_FIELDS_V2: Final = (
    "v",
    "type",
    "domain",
    "topic",
    "settings",
    "subscriber",
    "subscription_id",
    "selector_class",
    "selector",
    "cached",
    "originator",
    "trans_id",
    "expires_ms",
    "reason",
    "at_ms",
    "pod",
)


def pack_id(text: str) -> int:
    """A stream id ``"1700000000000-3"`` as one integer that sorts as the ids do."""
    ms, _, seq = text.partition("-")
    millis, sequence = int(ms), int(seq or 0)
    if millis < 0 or not 0 <= sequence < _SEQ_LIMIT or millis >= 1 << 42:
        raise ValueError(f"stream id {text!r} out of the packable range")
    return (millis << SEQ_BITS) | sequence


def unpack_id(packed: int) -> str:
    """The stream id text of a packed id (``0`` is ``"0-0"``)."""
    return f"{packed >> SEQ_BITS}-{packed & (_SEQ_LIMIT - 1)}"


def _int(value: str) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


@dataclass(frozen=True, slots=True)
class TopicRow:
    """One existing topic: its settings (``TopicSettings`` JSON text, "" = defaults),
    who created it and when, and the packed id of its creation."""

    domain: str
    topic: str
    settings: str
    creator: str
    created_ms: int
    id: int


@dataclass(frozen=True, slots=True)
class SubscriptionRow:
    """One live subscription, as its last created/renewed event set it."""

    domain: str
    topic: str
    subscriber: str
    subscription_id: str
    selector_class: str
    selector: str
    cached: bool
    originator: str
    trans_id: int
    expires_ms: int
    at_ms: int
    id: int

    @property
    def identity(self) -> tuple[str, str, str, str]:
        return (self.domain, self.topic, self.subscriber, self.subscription_id)


def topic_to_json(row: TopicRow) -> str:
    """A topic row as the compact JSON of the Redis snapshot."""
    return json.dumps([row.settings, row.creator, row.created_ms, row.id], separators=(",", ":"))


def topic_from_json(domain: str, topic: str, text: str) -> TopicRow:
    settings, creator, created_ms, packed = json.loads(text)
    return TopicRow(domain, topic, str(settings), str(creator), int(created_ms), int(packed))


def subscription_to_json(row: SubscriptionRow) -> str:
    """A subscription row (without its identity) as the compact JSON of the Redis
    snapshot."""
    return json.dumps(
        [
            row.selector_class,
            row.selector,
            int(row.cached),
            row.originator,
            row.trans_id,
            row.expires_ms,
            row.at_ms,
            row.id,
        ],
        separators=(",", ":"),
    )


def subscription_from_json(identity: tuple[str, str, str, str], text: str) -> SubscriptionRow:
    sel_class, selector, cached, originator, trans_id, expires_ms, at_ms, packed = json.loads(text)
    return SubscriptionRow(
        *identity,
        selector_class=str(sel_class),
        selector=str(selector),
        cached=bool(cached),
        originator=str(originator),
        trans_id=int(trans_id),
        expires_ms=int(expires_ms),
        at_ms=int(at_ms),
        id=int(packed),
    )


@dataclass(slots=True)
class Catalogue:
    """Topics and subscriptions folded from the log up to :attr:`position` (a packed id).

    Ended things are forgotten at once (the last event of an identity wins, and only the
    live ones are kept); lease ends are applied by :meth:`live` at a given time, so a
    catalogue can be read "as at" any moment after its position.
    """

    position: int = 0
    topics: dict[tuple[str, str], TopicRow] = field(default_factory=dict)
    subscriptions: dict[tuple[str, str, str, str], SubscriptionRow] = field(default_factory=dict)
    #: Events of a type this fold does not know (a later schema), skipped.
    unknown: int = 0
    #: Sorted names and counts for paged listings, built by the first :meth:`indexed`
    #: and kept by :meth:`apply` from then on (:mod:`apexmesh.pubsub.catalogue_index`).
    index: CatalogueIndex | None = field(default=None, compare=False, repr=False)

    def apply(self, packed: int, event: Mapping[str, str]) -> bool:
        """Fold one event; False when it was skipped (at or before the position: a
        duplicate or an overlap with the snapshot)."""
        if packed <= self.position:
            return False
        self.position = packed
        kind = event.get("type", "")
        name = (event.get("domain", ""), event.get("topic", ""))
        index = self.index
        if kind == TOPIC_CREATED:
            self.topics[name] = TopicRow(
                *name,
                settings=event.get("settings", ""),
                creator=event.get("originator", ""),
                created_ms=_int(event.get("at_ms", "")),
                id=packed,
            )
            if index is not None:
                index.topic_created(*name)
        elif kind == TOPIC_DELETED:
            if self.topics.pop(name, None) is not None and index is not None:
                index.topic_deleted(*name)
        elif kind == TOPIC_MODIFIED:
            row = self.topics.get(name)
            if row is not None:
                self.topics[name] = dataclasses.replace(row, settings=event.get("settings", ""))
        elif kind in SUBSCRIPTION_EVENTS:
            identity = (*name, event.get("subscriber", ""), event.get("subscription_id", ""))
            if index is not None:
                index.subscription(identity, kind != SUB_ENDED and name in self.topics)
            if kind == SUB_ENDED:
                self.subscriptions.pop(identity, None)
            else:
                self.subscriptions[identity] = SubscriptionRow(
                    *identity,
                    selector_class=event.get("selector_class", ""),
                    selector=event.get("selector", ""),
                    cached=event.get("cached", "") == "1",
                    originator=event.get("originator", ""),
                    trans_id=_int(event.get("trans_id", "")),
                    expires_ms=_int(event.get("expires_ms", "")),
                    at_ms=_int(event.get("at_ms", "")),
                    id=packed,
                )
        else:
            self.unknown += 1
        return True

    def extend(self, events: Iterable[tuple[int, Mapping[str, str]]]) -> int:
        """Fold events in the order given (sort first if they may be out of order:
        :func:`fold`); the number applied."""
        return sum(self.apply(packed, event) for packed, event in events)

    def live(self, at_ms: int) -> list[SubscriptionRow]:
        """The subscriptions alive at ``at_ms``: lease not ended, topic existing and
        created before the subscription (see the module docstring)."""
        out = []
        for row in self.subscriptions.values():
            topic = self.topics.get((row.domain, row.topic))
            if topic is not None and topic.id < row.id and row.expires_ms >= at_ms:
                out.append(row)
        return out

    def indexed(self) -> CatalogueIndex:
        """The index of this catalogue (built on first use: O(size) once, then each
        event keeps it)."""
        if self.index is None:
            self.index = CatalogueIndex.build(
                self.topics,
                (
                    row.identity
                    for row in self.subscriptions.values()
                    if (topic := self.topics.get((row.domain, row.topic))) is not None
                    and topic.id < row.id
                ),
            )
        return self.index

    def snapshot(self, at_ms: int) -> Catalogue:
        """A copy holding only what lives at ``at_ms`` (what a snapshot stores)."""
        return Catalogue(
            position=self.position,
            topics=dict(self.topics),
            subscriptions={row.identity: row for row in self.live(at_ms)},
        )

    def domain_counts(self, domain: str, at_ms: int) -> tuple[int, int]:
        """(topics, live subscriptions) of one domain: the leader's gauges."""
        topics = sum(1 for where, _ in self.topics if where == domain)
        subs = sum(1 for row in self.live(at_ms) if row.domain == domain)
        return topics, subs


def fold(events: Iterable[tuple[str, Mapping[str, str]]], at_ms: int) -> Catalogue:
    """The catalogue at ``at_ms`` of events given as (stream id text, fields) in any
    order, duplicates included: the reference the Spark job is tested against."""
    ordered = sorted(((pack_id(i), e) for i, e in events), key=lambda item: item[0])
    catalogue = Catalogue()
    catalogue.extend(ordered)
    return catalogue.snapshot(at_ms)


__all__ = [
    "EVENT_FIELDS_V2",
    "SNAPSHOT_SCHEMA",
    "SUBSCRIPTION_EVENTS",
    "TOPIC_EVENTS",
    "TOPIC_MODIFIED",
    "Catalogue",
    "SubscriptionRow",
    "TopicRow",
    "fold",
    "pack_id",
    "subscription_from_json",
    "subscription_to_json",
    "topic_from_json",
    "topic_to_json",
    "unpack_id",
]
