"""The well-known topics' announcements as the service builds and publishes them
(services/pubsub/well_known.py, draft-wyman 6.2, 6.2.2, 6.3), against a real
redis-server: each is a change committed with what it announces (journalled), a topic's
message revised under one id with the classes the service applies, a subscription's
record valid until its lease ends, and a journalled announcement published once or left
for a redo when no relay took it."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.changes import Announced, Outcome, Subscription
from apexmesh.pubsub.core import create_topic, delete_topic
from apexmesh.pubsub.elements import CreateTopic, DeleteTopic
from apexmesh.pubsub.message import Expiry, ParsedMessage, millis, parse_message
from apexmesh.pubsub.wkt import SUBSCRIPTIONS, TOPICS
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import PubsubStore, TopicView
from apexmesh.store.pubsub_messages import MessageStore, StoredMessage
from services.pubsub.well_known import WellKnownTopics, message_id_of

pytestmark = pytest.mark.integration

DOMAIN = "example.com"
NOW = 1_764_072_000_000  # 2025-11-25T12:00:00Z
FRED = Endpoint.parse("fred@example.com")


class Published:
    """The service's publish callback, answering each publication with ``code``."""

    def __init__(self, code: int = 250) -> None:
        self.code = code
        self.seen: list[tuple[str, str, bytes, str]] = []

    async def __call__(
        self, domain: str, topic: str, originator: Endpoint, payload: bytes, key: str
    ) -> tuple[int, str]:
        self.seen.append((domain, topic, payload, key))
        if self.code == ApexReplyCode.ACTION_ABORTED:
            raise ApexError(ApexReplyCode.ACTION_ABORTED, "pubsub store unavailable")
        return self.code, ""


def _well_known(redis: Redis, keys: Keys, published: Published) -> WellKnownTopics:
    return WellKnownTopics(
        store=PubsubStore(redis, keys, "pod-a"),
        messages=MessageStore(redis, keys),
        publish=published,
        clock=lambda: NOW,
        classes=("RFC-2254", "JMS"),
    )


def _message(announced: Announced) -> ParsedMessage:
    return parse_message(announced.content, max_octets=1 << 20)


async def test_a_topic_change_is_announced_in_its_own_commit(redis: Redis, keys: Keys) -> None:
    well_known = _well_known(redis, keys, Published())
    create = CreateTopic(topic="news", trans_id=1)
    decide = well_known.announcing(
        DOMAIN, create, lambda v: create_topic(create, FRED, allowed=True, exists=v.exists)
    )
    outcome: Outcome = decide(TopicView(exists=False, version=41, subscriptions={}))
    announced = outcome.changes[-1]
    assert isinstance(announced, Announced)
    message = _message(announced)
    # 6.2.2: one message-id per topic, the topic's version after the change as revision.
    assert (message.envelope.topic, message.envelope.revision_id) == (TOPICS, 42)
    assert message.envelope.message_id == message_id_of(DOMAIN, "news")
    assert message.envelope.expiry is Expiry.NEVER
    assert [e.get("class") for e in message.content.iter("selector-schema")] == [
        "RFC-2254",
        "JMS",
    ]
    assert (announced.retire, announced.key) == (None, f"wkt:{DOMAIN}:news:42")
    # A refusal announces nothing; a deletion announces the cancel and retires it.
    refused = decide(TopicView(exists=True, version=41, subscriptions={}))
    assert refused.code == 553
    assert not any(isinstance(c, Announced) for c in refused.changes)
    delete = DeleteTopic(topic="news", trans_id=2)
    gone = well_known.announcing(
        DOMAIN, delete, lambda v: delete_topic(delete, FRED, allowed=True, exists=v.exists)
    )(TopicView(exists=True, version=42, subscriptions={}))
    cancel = gone.changes[-1]
    assert isinstance(cancel, Announced)
    assert cancel.chain == announced.chain  # revisions of one message, in journal order
    assert cancel.retire == message.envelope.message_id
    assert b"<disposition>cancel</disposition>" in cancel.content


async def test_a_subscription_record_is_valid_until_its_lease_ends(
    redis: Redis, keys: Keys
) -> None:
    well_known = _well_known(redis, keys, Published())
    sub = Subscription(
        topic="news",
        subscriber=FRED,
        originator=FRED,
        trans_id=3,
        expires_ms=NOW + 60_000,
        subscription_id=7,
        selector_class="JMS",
        selector="x > 1",
    )
    active = well_known.subscription_announcement(DOMAIN, sub, status="ACTIVE", duration=60)
    assert active is not None
    envelope = _message(active).envelope
    assert envelope.topic == SUBSCRIPTIONS
    assert envelope.expiry is Expiry.AT
    assert envelope.expiration_date is not None
    assert abs(millis(envelope.expiration_date) - sub.expires_ms) <= 1
    assert envelope.cacheable(NOW)
    assert not envelope.cacheable(sub.expires_ms + 1)  # the lease ended: not replayed
    assert active.retire is None
    cancelled = well_known.subscription_announcement(DOMAIN, sub, status="CANCELLED", duration=0)
    assert cancelled is not None
    assert _message(cancelled).envelope.expiry is Expiry.ONCE
    assert cancelled.retire == envelope.message_id
    plain = Subscription(
        topic="news", subscriber=FRED, originator=FRED, trans_id=3, expires_ms=NOW + 1
    )
    # A plain subscription has its record too (issue #29): id 0, no selector.
    record = well_known.subscription_announcement(DOMAIN, plain, status="ACTIVE", duration=1)
    assert record is not None
    fields = {c.tag: (c.text or "") for c in _message(record).content}
    assert (fields["subscription-id"], fields["selector"]) == ("0", "")
    assert _message(record).envelope.message_id != envelope.message_id


async def test_performing_publishes_once_or_leaves_the_entry_for_a_redo(
    redis: Redis, keys: Keys
) -> None:
    messages = MessageStore(redis, keys)
    service = "apex=pubsub@example.com"
    for code, done in ((250, True), (550, True), (421, False), (451, False)):
        published = Published(code)
        well_known = _well_known(redis, keys, published)
        await messages.put(DOMAIN, TOPICS, service, 5, StoredMessage(b"<m/>", None, 0))
        assert await well_known.perform(DOMAIN, TOPICS, b"<m/>", "k", 5) is done
        ((domain, topic, payload, key),) = published.seen
        assert (domain, topic, key) == (DOMAIN, TOPICS, "k")
        assert b"<m/>" in payload
        # A cancellation leaves the cache once published; kept while it is to be redone.
        assert (await messages.live(DOMAIN, TOPICS, NOW) == []) is done
