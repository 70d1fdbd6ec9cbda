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

Announcements are sent after the operation's commit and reply, through the publisher's
fan-out like any publication (not journalled: a pod dying in between loses that one
announcement; the change itself stands).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub._fields import pubsub_tag
from apexmesh.pubsub.changes import Subscription, TopicCreated
from apexmesh.pubsub.elements import CreateTopic, DeleteTopic, service_endpoint, topic_endpoint
from apexmesh.pubsub.message import MAX_REVISION, Expiry, MessageContent, message_from
from apexmesh.pubsub.topic_description import TopicDescription, description_from
from apexmesh.pubsub.wire import element_payload
from apexmesh.pubsub.wkt import SETTINGS, SUBSCRIPTIONS, TOPICS, SubscriptionRecord, topics_message
from apexmesh.store.pubsub import PubsubStore
from apexmesh.store.pubsub_messages import MessageStore

_log = logging.getLogger(__name__)

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
    ) -> None:
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

    async def _send(self, domain: str, topic: str, message: MessageContent, key: str) -> int:
        service = service_endpoint(domain)
        payload = element_payload(service, topic_endpoint(topic, domain), message.to_xml())
        code, text = await self._publish(domain, topic, service, payload, key)
        if code != ApexReplyCode.SUCCESS:
            _log.warning("announcement on %s of %s: %d %s", topic, domain, code, text)
        return code

    async def topic_changed(
        self, domain: str, topic: str, description: TopicDescription, *, cancelled: bool
    ) -> None:
        """6.2.2: announce a topic created (``publish``) or deleted (``cancel``)."""
        view = await self._store.read_topic(domain, topic, ())
        revision = view.version % (MAX_REVISION + 1)
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
        )
        await self._send(domain, TOPICS, message, f"wkt:{domain}:{topic}:{revision}")
        if cancelled:
            await self._messages.drop(domain, TOPICS, str(service), message_id)

    async def subscription_changed(
        self, domain: str, sub: Subscription, *, status: str, duration: int
    ) -> None:
        """6.3: publish a content-based subscription's record (``ACTIVE`` when made or
        renewed; ``CANCELLED`` when it ended, then no longer cached)."""
        if sub.subscription_id is None or sub.topic in (TOPICS, SUBSCRIPTIONS):
            return
        now = self._clock()
        service = service_endpoint(domain)
        message_id = message_id_of(domain, str(sub.subscriber), str(sub.subscription_id))
        record = SubscriptionRecord(
            subscriber=sub.subscriber,
            subscription_id=sub.subscription_id,
            topic=sub.topic,
            selector_class=sub.selector_class,
            selector=sub.selector,
            subscription_date=_when(now),
            duration=duration,
            current_status=status,
        )
        revision = (now // 1000) % (MAX_REVISION + 1)
        message = MessageContent(
            trans_id=1,
            topic=SUBSCRIPTIONS,
            publisher=str(service),
            publication_date=_when(now),
            expiry=Expiry.NEVER,
            message_id=message_id,
            revision_id=revision,
            body=record.to_xml(),
        )
        key = f"wkt:{domain}:{sub.subscriber}:{sub.subscription_id}:{status}:{now}"
        await self._send(domain, SUBSCRIPTIONS, message, key)
        if status != "ACTIVE":
            await self._messages.drop(domain, SUBSCRIPTIONS, str(service), message_id)


__all__ = ["WellKnownTopics", "message_id_of", "topic_operation"]
