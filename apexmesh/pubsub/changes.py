"""What a pubsub operation decides, as data (draft-schwartz-apex-pubsub-02 sections
4.2 to 4.6, draft-wyman-apex-pubsub-00 5.8 to 6.3).

The operations of :mod:`apexmesh.pubsub.core` and :mod:`apexmesh.pubsub.content_core`
are pure functions returning an :class:`Outcome`: the reply code and the step that
decided it, the :data:`Change` list the store applies in one atomic script
(:mod:`apexmesh.store.pubsub_changes`), and the elements to send (:class:`Send`), which
the store journals in that same script. This module holds those types and the
subscription record they carry, so the store, the pods' caches and both cores share one
definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.topic_access import TopicAccess

#: Sent instead of a reply when the operation was forwarded (4.5 step 4, 4.6 step 3).
FORWARDED: Final = 0

Reason = Literal["cancel", "expired", "topic-deleted"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    """One subscriber of one topic (section 4.5 step 5.2), with its lease."""

    topic: str
    #: The subject: where data is forwarded.
    subscriber: Endpoint
    #: Who sent the subscribe (the lease-end cancel goes there).
    originator: Endpoint
    #: The subscribe's transID, echoed by the lease-end cancel.
    trans_id: int
    #: End of the lease, milliseconds since the epoch.
    expires_ms: int
    #: Draft-wyman 5.8: the id of a content-based subscription (None: a plain topic
    #: subscription of draft-schwartz), its selector class and text, and ``cached``.
    subscription_id: int | None = None
    selector_class: str = ""
    selector: str = ""
    cached: bool = False
    #: When the subscription was first made (ms since the epoch; 0 when unknown, e.g.
    #: a record written before this field): a renewal keeps it, so the Subscriptions
    #: topic's ``subscription-date`` (draft-wyman 6.3, "the origination date of the
    #: subscription") does not move with every renewal.
    since_ms: int = 0

    @property
    def key(self) -> tuple[Endpoint, int | None]:
        return (self.subscriber, self.subscription_id)

    def active(self, now_ms: int) -> bool:
        return self.expires_ms > now_ms


@dataclass(frozen=True, slots=True)
class TopicCreated:
    topic: str
    originator: Endpoint
    #: The topic's schemas (draft-wyman 6.2.3) as ``TopicSettings.to_json`` text.
    settings: str = ""


@dataclass(frozen=True, slots=True)
class TopicModified:
    """Draft-wyman 6.2.2: an existing topic's description changed by its creator (a
    createtopic or a Topics-topic message naming it): new schemas, same topic, same
    subscriptions. ``creator`` and ``created_ms`` are the record's, kept."""

    topic: str
    originator: Endpoint
    settings: str
    creator: Endpoint
    created_ms: int


@dataclass(frozen=True, slots=True)
class TopicDeleted:
    topic: str
    originator: Endpoint


@dataclass(frozen=True, slots=True)
class Subscribed:
    """Add or replace (section 4.5 step 5.2: "the previous duration is no longer
    consulted") the subject's subscription."""

    subscription: Subscription
    renewed: bool


@dataclass(frozen=True, slots=True)
class Unsubscribed:
    topic: str
    subscriber: Endpoint
    reason: Reason
    originator: Endpoint
    subscription_id: int | None = None


@dataclass(frozen=True, slots=True)
class TupleAdded:
    """Section 4.2 step 3.2: the presence tuple of a new topic."""

    topic: str


@dataclass(frozen=True, slots=True)
class TupleRemoved:
    """Section 4.3 step 3.2."""

    topic: str


@dataclass(frozen=True, slots=True)
class DataGranted:
    """Section 7: ``core:data`` on the topic granted to a subscriber (optional policy)."""

    topic: str
    subscriber: Endpoint


@dataclass(frozen=True, slots=True)
class DataRevoked:
    topic: str
    subscriber: Endpoint


#: What a topic's creator may do on it (draft sections 5.1 and 7: the tokens of the
#: topic endpoint, and managing its access entries through apex=access).
OWNER_TOKENS: Final = (
    "pubsub:subscribe",
    "pubsub:cancel",
    "core:data",
    "access:query",
    "access:get",
    "access:set",
)


@dataclass(frozen=True, slots=True)
class OwnerGranted:
    """The creator owns the topic: an access entry on ``apex=pubsub/TOPIC@D`` for
    exactly the creator, with :data:`OWNER_TOKENS`, so it may subscribe, publish and
    grant access on its own topic without an operator adding entries; then the
    createtopic's access statement (None: the default, apexmesh/pubsub/topic_access.py)."""

    topic: str
    owner: Endpoint
    access: TopicAccess | None = None


@dataclass(frozen=True, slots=True)
class OwnerRevoked:
    """The topic is deleted: its creator's entry goes with it."""

    topic: str
    owner: Endpoint


@dataclass(frozen=True, slots=True, kw_only=True)
class Announced:
    """A message the service publishes on a well-known topic because of this change
    (draft-wyman 6.2.2: a topic created or deleted on ``WKT=Topics``; 6.3: a
    subscription made or ended on ``WKT=Subscriptions``). Committed with the change as a
    journal entry, so that a pod dying between the commit and the publication leaves it
    to the leader, like a reply."""

    #: The well-known topic.
    topic: str
    #: The ``message-content`` envelope published.
    content: bytes
    #: The publication's key: the same fan-out submission ids when it is redone.
    key: str
    #: Announcements of one message (one message-id) are published in journal order.
    chain: str
    #: A message-id to remove from the topic's cache once published (a cancellation:
    #: later subscribers asking ``cached`` must not get it).
    retire: int | None = None


Change = (
    TopicCreated
    | TopicModified
    | TopicDeleted
    | Subscribed
    | Unsubscribed
    | TupleAdded
    | TupleRemoved
    | DataGranted
    | DataRevoked
    | OwnerGranted
    | OwnerRevoked
    | Announced
)


@dataclass(frozen=True, slots=True)
class Send:
    """One element the service sends to ``recipient`` as ``apex=pubsub@DOMAIN``."""

    recipient: Endpoint
    content: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What one operation decided."""

    #: The code of the reply sent to the originator (250 for a topiclist), or
    #: :data:`FORWARDED`.
    code: int
    #: The step that decided, e.g. ``"4.5/4"`` (section/step), for logs and tests.
    step: str
    changes: tuple[Change, ...] = ()
    sends: tuple[Send, ...] = ()


__all__ = [
    "FORWARDED",
    "Announced",
    "OWNER_TOKENS",
    "Change",
    "DataGranted",
    "DataRevoked",
    "Outcome",
    "OwnerGranted",
    "OwnerRevoked",
    "Reason",
    "Send",
    "Subscribed",
    "Subscription",
    "TopicCreated",
    "TopicDeleted",
    "TopicModified",
    "TupleAdded",
    "TupleRemoved",
    "Unsubscribed",
]
