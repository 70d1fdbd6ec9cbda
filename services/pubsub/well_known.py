"""The well-known topics as the service runs them (draft-wyman-apex-pubsub-00 6.2, 6.3).

- Both topics exist in every served domain (created once by whichever pod starts first,
  with the schemas of :data:`apexmesh.pubsub.wkt.SETTINGS`); listtopics does not list
  them (draft-schwartz's list is the domain's own topics).
- ``WKT=Topics``: every createtopic and deletetopic that succeeded is announced as a
  message (6.2.2: the topic's message-id, the topic's version as revision, disposition
  ``publish`` with the description, or ``cancel``); announcements are cached (expiry
  ``*``), so a subscriber asking ``cached`` gets the current list (6.2.1); a topic's
  cancellation removes its entry once sent. Data published *to* ``WKT=Topics`` by
  anyone but the service is a topic description: disposition ``publish`` is a
  createtopic of its ``topic-name``, ``cancel`` a deletetopic, each with its access
  check and codes, answered as the publication's code.
- ``WKT=Subscriptions``: every content-based subscription made, renewed or cancelled is
  published as its record (8.4); a subscriber sees only its own (7.6, 6.3.1: the
  selector rule in :class:`apexmesh.pubsub.topic_index.TopicIndex`, and a subscribe
  for another endpoint refused 537).

Announcements are :class:`apexmesh.pubsub.changes.Announced` changes committed with the
change they announce, as journal entries (like the operation's reply), and published
from the journal through the publisher's fan-out like any publication
(:meth:`WellKnownTopics.perform`): a pod dying between the commit and the publication
leaves them to the leader, which publishes them (at least once; the fan-out's
submission ids come from the announcement's key, so a redone one the relays already
took is not relayed twice while they remember it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub._fields import pubsub_tag
from apexmesh.pubsub.changes import (
    Announced,
    Outcome,
    Subscribed,
    Subscription,
    TopicCreated,
    Unsubscribed,
)
from apexmesh.pubsub.elements import CreateTopic, DeleteTopic, service_endpoint, topic_endpoint
from apexmesh.pubsub.message import MAX_REVISION, Expiry, MessageContent, message_from
from apexmesh.pubsub.topic_description import TopicDescription, description_from
from apexmesh.pubsub.wire import element_payload
from apexmesh.pubsub.wkt import SETTINGS, SUBSCRIPTIONS, TOPICS, SubscriptionRecord, topics_message
from apexmesh.store.pubsub import PubsubStore, TopicView
from apexmesh.store.pubsub_messages import MessageStore

_log = logging.getLogger(__name__)

#: Codes of a publication no relay took or whose store was unreachable: redone later.
_TRANSIENT = frozenset({ApexReplyCode.SERVICE_NOT_AVAILABLE, ApexReplyCode.ACTION_ABORTED})

#: ``publish(domain, topic, originator, payload, delivery_id)`` of the service itself.
Publish = Callable[[str, str, Endpoint, bytes, str], Awaitable[tuple[int, str]]]


def message_id_of(*parts: str) -> int:
    """A stable message-id (0..2^31-1) for what ``parts`` name."""
    digest = hashlib.blake2b("\n".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (MAX_REVISION + 1)


def _when(now_ms: int) -> datetime:
    return datetime.fromtimestamp(now_ms / 1000, UTC)


def topic_operation(body: bytes, trans_id: int) -> CreateTopic | DeleteTopic:
    """What a description published to ``WKT=Topics`` asks: 501 unless it names a
    topic (an envelope's ``content`` or the bare children in a ``content`` element)."""
    root = _dtd.parse_root(body)
    if pubsub_tag(root) == "message-content":
        root = message_from(root).content
    description = description_from(list(_dtd.element_children(root)), trans_id, "content")
    if description.topic_name is None:
        _dtd.fail("a Topics message must name its topic", trans_id=trans_id)
    if description.disposition == "cancel":
        return DeleteTopic(topic=description.topic_name, trans_id=trans_id)
    return CreateTopic(
        topic=description.topic_name,
        trans_id=trans_id,
        description=TopicDescription(
            publishers=description.publishers,
            description=description.description,
            settings=description.settings,
        ),
    )


class WellKnownTopics:
    """See the module docstring."""

    def __init__(
        self,
        *,
        store: PubsubStore,
        messages: MessageStore,
        publish: Publish,
        clock: Callable[[], int],
        classes: Sequence[str] = (),
    ) -> None:
        #: The selector classes this service applies, listed for every topic (6.2).
        self._classes = tuple(classes)
        self._store = store
        self._messages = messages
        self._publish = publish
        self._clock = clock
        self._ensured: set[str] = set()

    async def ensure(self, domain: str) -> None:
        """Create both topics in ``domain`` unless they exist (once per pod)."""
        if domain in self._ensured:
            return
        service = service_endpoint(domain)
        for topic, settings in SETTINGS.items():
            view = await self._store.read_topic(domain, topic, ())
            if not view.exists:
                created = TopicCreated(topic, service, settings.to_json())
                await self._store.commit(domain, topic, view.version, [created], [], self._clock())
        self._ensured.add(domain)

    def announcing(
        self, domain: str, op: CreateTopic | DeleteTopic, decide: Callable[[TopicView], Outcome]
    ) -> Callable[[TopicView], Outcome]:
        """``decide`` (a createtopic or deletetopic) with, once it succeeds, its 6.2.2
        announcement on ``WKT=Topics`` among the changes it commits. The commit checks
        the version the decision read and bumps it once, so the topic's version after
        the change, the message's revision, is one more than the version read."""

        def announced(view: TopicView) -> Outcome:
            outcome = decide(view)
            if outcome.code != ApexReplyCode.SUCCESS:
                return outcome
            deleted = isinstance(op, DeleteTopic)
            description = op.description if isinstance(op, CreateTopic) else TopicDescription()
            change = self.topic_announcement(
                domain, op.topic, description, version=view.version + 1, cancelled=deleted
            )
            return dataclasses.replace(outcome, changes=(*outcome.changes, change))

        return announced

    def topic_announcement(
        self,
        domain: str,
        topic: str,
        description: TopicDescription,
        *,
        version: int,
        cancelled: bool,
    ) -> Announced:
        """6.2.2: the Topics message of a topic created (``publish``) or deleted
        (``cancel``), to commit with that change. ``version`` is the topic's version
        after the change (its revision-id: each change of the topic revises its one
        message)."""
        revision = version % (MAX_REVISION + 1)
        service = service_endpoint(domain)
        message_id = message_id_of(domain, topic)
        message = topics_message(
            topic,
            description,
            service=service,
            message_id=message_id,
            revision=revision,
            now=_when(self._clock()),
            cancelled=cancelled,
            classes=self._classes,
        )
        return Announced(
            topic=TOPICS,
            content=message.to_xml(),
            key=f"wkt:{domain}:{topic}:{revision}",
            chain=f"wkt:{domain}:{TOPICS}:{message_id}",
            retire=message_id if cancelled else None,
        )

    def subscription_announcement(
        self,
        domain: str,
        sub: Subscription,
        *,
        status: str,
        duration: int,
        now_ms: int | None = None,
    ) -> Announced | None:
        """6.3: a subscription's record (``ACTIVE`` when made or renewed, cached until
        its lease ends; ``CANCELLED`` when it was cancelled, ``EXPIRED`` when its lease
        ended, then no longer cached), to commit with that change; None for one to a
        well-known topic. A plain (draft-schwartz) subscription has no id: its record
        says ``subscription-id`` 0 (8.4 requires the element; the service never hands
        out 0) and an empty selector. ``subscription-date`` is when the subscription
        was first made (kept on renewal, "the origination date")."""
        if sub.topic in (TOPICS, SUBSCRIPTIONS):
            return None
        now = self._clock() if now_ms is None else now_ms
        service = service_endpoint(domain)
        if sub.subscription_id is None:
            message_id = message_id_of(domain, str(sub.subscriber), sub.topic, "plain")
        else:
            message_id = message_id_of(domain, str(sub.subscriber), str(sub.subscription_id))
        record = SubscriptionRecord(
            subscriber=sub.subscriber,
            subscription_id=sub.subscription_id or 0,
            topic=sub.topic,
            selector_class=sub.selector_class,
            selector=sub.selector,
            subscription_date=_when(sub.since_ms or now),
            duration=duration,
            current_status=status,
        )
        # The record is valid while the lease runs (5.2.1's expiration-date): cached
        # until the lease end, so a later subscriber asking ``cached`` never gets the
        # record of a subscription whose lease ended; a renewal replaces it. An ended
        # one is distributed once ('0') and its record retired.
        active = status == "ACTIVE"
        message = MessageContent(
            trans_id=max(1, sub.trans_id),
            topic=SUBSCRIPTIONS,
            publisher=str(service),
            publication_date=_when(now),
            expiry=Expiry.AT if active else Expiry.ONCE,
            expiration_date=_when(sub.expires_ms) if active else None,
            message_id=message_id,
            revision_id=(now // 1000) % (MAX_REVISION + 1),
            body=record.to_xml(),
        )
        name = "plain" if sub.subscription_id is None else str(sub.subscription_id)
        return Announced(
            topic=SUBSCRIPTIONS,
            content=message.to_xml(),
            key=f"wkt:{domain}:{sub.subscriber}:{sub.topic}:{name}:{status}:{now}",
            chain=f"wkt:{domain}:{SUBSCRIPTIONS}:{message_id}",
            retire=None if active else message_id,
        )

    def subscriptions_announced(
        self,
        domain: str,
        outcome: Outcome,
        duration: int,
        before: Mapping[Endpoint, Subscription] | None = None,
    ) -> Outcome:
        """``outcome`` (a plain subscribe or cancel, draft-schwartz 4.5/4.6) with the 6.3
        record of each subscription it makes, renews or cancels among its changes
        (``before``: the plain subscriptions the decision read, for a cancelled one's
        date)."""
        extra: list[Announced] = []
        for change in outcome.changes:
            found = None
            if isinstance(change, Subscribed):
                found = self.subscription_announcement(
                    domain, change.subscription, status="ACTIVE", duration=duration
                )
            elif isinstance(change, Unsubscribed) and change.reason == "cancel":
                gone = (before or {}).get(change.subscriber) or Subscription(
                    topic=change.topic,
                    subscriber=change.subscriber,
                    originator=change.originator,
                    trans_id=1,
                    expires_ms=0,
                    subscription_id=change.subscription_id,
                )
                found = self.subscription_announcement(domain, gone, status="CANCELLED", duration=0)
            if found is not None:
                extra.append(found)
        if not extra:
            return outcome
        return dataclasses.replace(outcome, changes=(*outcome.changes, *extra))

    async def lease_ended(self, domain: str, sub: Subscription, at_ms: int, key: str) -> bool:
        """6.3 when a lease ends (draft-schwartz 4.5 step 5.2): the subscription's
        ``EXPIRED`` record, distributed once, its cached record retired. Done from the
        lease end's journal entry (``key`` its id, ``at_ms`` its time: a redone entry
        publishes the same octets under the same fan-out ids). True once done."""
        found = self.subscription_announcement(
            domain, sub, status="EXPIRED", duration=0, now_ms=at_ms
        )
        if found is None:
            return True
        return await self.perform(domain, found.topic, found.content, key, found.retire)

    async def perform(
        self, domain: str, topic: str, content: bytes, key: str, retire: int | None
    ) -> bool:
        """Publish a journalled announcement through the fan-out like any publication,
        then retire a cancelled message from the cache. True once done; False when no
        relay took it or the store was unreachable (the journal entry stays and is
        redone: at least once)."""
        service = service_endpoint(domain)
        payload = element_payload(service, topic_endpoint(topic, domain), content)
        try:
            code, text = await self._publish(domain, topic, service, payload, key)
        except ApexError as exc:
            code, text = int(exc.code), str(exc)
        if code in _TRANSIENT:
            _log.warning("announcement on %s of %s: %d %s (redone)", topic, domain, code, text)
            return False
        if code != ApexReplyCode.SUCCESS:
            _log.warning("announcement on %s of %s: %d %s", topic, domain, code, text)
        if retire is not None:
            await self._messages.drop(domain, topic, str(service), retire)
        return True


__all__ = ["WellKnownTopics", "message_id_of", "topic_operation"]
