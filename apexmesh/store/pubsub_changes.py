"""How the changes an operation decided become one atomic Redis script, with their
events and journal entries (draft-schwartz-apex-pubsub-02 section 4: a change and the
work it leaves are stored together or not at all).

:class:`ChangeWriter` turns each :data:`apexmesh.pubsub.changes.Change` into the
commands of the commit script (:data:`COMMIT_SCRIPT`): the topic's record or its
subscriptions HASH, the lease ZSET, the per-subscriber index, the event of the event log
(schema v2, :data:`EVENT_FIELDS`, docs/pubsub.md) and, for the changes whose effect lies
outside Redis (presence tuples, access entries, announcements on the well-known topics),
the journal entry that has it done.
"""

from __future__ import annotations

import json
from typing import Final

from apexmesh.pubsub.catalogue import EVENT_FIELDS_V2
from apexmesh.pubsub.changes import (
    Announced,
    Change,
    DataGranted,
    DataRevoked,
    OwnerGranted,
    OwnerRevoked,
    Subscribed,
    TopicCreated,
    TopicDeleted,
    TopicModified,
    TupleAdded,
    TupleRemoved,
    Unsubscribed,
)
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub_journal import JournalEntry, JournalKind, new_entry
from apexmesh.store.pubsub_records import subscription_field, subscription_record

#: Version of the event schema; bumped only when a field changes meaning.
EVENT_VERSION: Final = "2"

#: Every field of an event, always present (empty string when it does not apply): the
#: schema the snapshot job folds (one definition, apexmesh/pubsub/catalogue.py).
EVENT_FIELDS: Final = EVENT_FIELDS_V2

# KEYS: version, topics. ARGV: expected version ("" = unchecked), JSON list of
# operations, topic field, "1" when the topic must (still) exist ("" = unchecked).
# Returns 0 when the version moved or the topic went (the caller re-reads and decides
# again), else 1.
COMMIT_SCRIPT: Final = """
if ARGV[1] ~= '' and (redis.call('GET', KEYS[1]) or '0') ~= ARGV[1] then
    return 0
end
if ARGV[4] == '1' and redis.call('HEXISTS', KEYS[2], ARGV[3]) == 0 then
    return 0
end
for _, op in ipairs(cjson.decode(ARGV[2])) do
    local name = op[1]
    if name == 'hset' then
        redis.call('HSET', op[2], op[3], op[4])
    elseif name == 'hdel' then
        redis.call('HDEL', op[2], op[3])
    elseif name == 'zadd' then
        redis.call('ZADD', op[2], op[3], op[4])
    elseif name == 'zrem' then
        redis.call('ZREM', op[2], op[3])
    elseif name == 'del' then
        redis.call('DEL', op[2])
    elseif name == 'xadd' then
        redis.call('XADD', op[2], '*', unpack(op, 3))
    end
end
redis.call('INCR', KEYS[1])
return 1
"""


def topic_field(domain: str, topic: str) -> str:
    """A topic's field in the topics HASH."""
    return f"{domain} {topic}"


def subject_field(topic: str, subscription_id: int | None) -> str:
    """A subscription's field in its subscriber's index (``Keys.pubsub_subject``):
    ``"<topic>\n<id>"``, the id empty for a plain (draft-schwartz) subscription, so that
    draft-wyman 5.8.2's cancels naming no topic find those too."""
    return f"{topic}\n{'' if subscription_id is None else subscription_id}"


class ChangeWriter:
    """The commands of the commit script for the changes of the pod ``pod_id``."""

    def __init__(self, keys: Keys, pod_id: str) -> None:
        self._keys = keys
        self.pod_id = pod_id

    def _event(self, kind: str, domain: str, topic: str, now_ms: int, **values: str) -> list[str]:
        event = dict.fromkeys(EVENT_FIELDS, "")
        event.update(
            v=EVENT_VERSION,
            type=kind,
            domain=domain,
            topic=topic,
            at_ms=str(now_ms),
            pod=self.pod_id,
            **values,
        )
        return ["xadd", self._keys.pubsub_events(), *(x for item in event.items() for x in item)]

    @staticmethod
    def _selection(
        subscription_id: int | None, selector_class: str, selector: str
    ) -> dict[str, str]:
        return {
            "subscription_id": "" if subscription_id is None else str(subscription_id),
            "selector_class": selector_class,
            "selector": selector,
        }

    def ops(
        self, domain: str, change: Change, now_ms: int, effects: list[JournalEntry]
    ) -> list[list[str]]:
        keys = self._keys
        if isinstance(change, TopicCreated):
            record = json.dumps(
                {
                    "created_ms": str(now_ms),
                    "creator": str(change.originator),
                    "settings": change.settings,
                }
            )
            return [
                ["hset", keys.pubsub_topics(), topic_field(domain, change.topic), record],
                self._event(
                    "topic.created",
                    domain,
                    change.topic,
                    now_ms,
                    originator=str(change.originator),
                    settings=change.settings,
                ),
            ]
        if isinstance(change, TopicModified):
            # The record as created, with the new settings; its own event type, so the
            # catalogue's rule "a topic created again starts with no subscription" does
            # not end the topic's subscriptions.
            record = json.dumps(
                {
                    "created_ms": str(change.created_ms),
                    "creator": str(change.creator),
                    "settings": change.settings,
                }
            )
            return [
                ["hset", keys.pubsub_topics(), topic_field(domain, change.topic), record],
                self._event(
                    "topic.modified",
                    domain,
                    change.topic,
                    now_ms,
                    originator=str(change.originator),
                    settings=change.settings,
                ),
            ]
        if isinstance(change, TopicDeleted):
            return [
                ["hdel", keys.pubsub_topics(), topic_field(domain, change.topic)],
                # Its cached messages (draft-wyman 5.8) go with it, in the same script.
                ["del", keys.pubsub_cached(domain, change.topic)],
                self._event(
                    "topic.deleted", domain, change.topic, now_ms, originator=str(change.originator)
                ),
            ]
        if isinstance(change, Subscribed):
            sub = change.subscription
            name = subscription_field(sub.subscriber, sub.subscription_id)
            member = f"{domain}\n{sub.topic}\n{name}"
            kind = "subscription.renewed" if change.renewed else "subscription.created"
            ops = [
                [
                    "hset",
                    keys.pubsub_subscriptions(domain, sub.topic),
                    name,
                    subscription_record(sub),
                ],
                ["zadd", keys.pubsub_expiry(domain), str(sub.expires_ms), member],
                self._event(
                    kind,
                    domain,
                    sub.topic,
                    now_ms,
                    subscriber=str(sub.subscriber),
                    originator=str(sub.originator),
                    trans_id=str(sub.trans_id),
                    expires_ms=str(sub.expires_ms),
                    **self._selection(sub.subscription_id, sub.selector_class, sub.selector),
                    cached="1" if sub.cached else "",
                ),
            ]
            subject = keys.pubsub_subject(domain, str(sub.subscriber))
            ops.append(["hset", subject, subject_field(sub.topic, sub.subscription_id), "1"])
            return ops
        if isinstance(change, Unsubscribed):
            name = subscription_field(change.subscriber, change.subscription_id)
            member = f"{domain}\n{change.topic}\n{name}"
            ops = [
                ["hdel", keys.pubsub_subscriptions(domain, change.topic), name],
                ["zrem", keys.pubsub_expiry(domain), member],
                self._event(
                    "subscription.ended",
                    domain,
                    change.topic,
                    now_ms,
                    subscriber=str(change.subscriber),
                    originator=str(change.originator),
                    reason=change.reason,
                    **self._selection(change.subscription_id, "", ""),
                ),
            ]
            subject = keys.pubsub_subject(domain, str(change.subscriber))
            ops.append(["hdel", subject, subject_field(change.topic, change.subscription_id)])
            return ops
        if isinstance(change, (TupleAdded, TupleRemoved)):
            action = "add" if isinstance(change, TupleAdded) else "remove"
            entry = new_entry(
                JournalKind.PRESENCE, domain=domain, topic=change.topic, action=action
            )
            effects.append(entry)
            return [
                ["hset", keys.pubsub_journal(domain), entry.id, entry.encode(self.pod_id, now_ms)]
            ]
        if isinstance(change, (OwnerGranted, OwnerRevoked)):
            action = "grant" if isinstance(change, OwnerGranted) else "revoke"
            stated = change.access if isinstance(change, OwnerGranted) else None
            # chain: done before the reply to the creator (same key, journalled first),
            # so that a 250 to createtopic means the topic's entries are in place.
            entry = new_entry(
                JournalKind.OWNER,
                domain=domain,
                topic=change.topic,
                owner=str(change.owner),
                action=action,
                access="" if stated is None else stated.to_json(),
                chain=str(change.owner),
            )
            effects.append(entry)
            return [
                ["hset", keys.pubsub_journal(domain), entry.id, entry.encode(self.pod_id, now_ms)]
            ]
        if isinstance(change, (DataGranted, DataRevoked)):
            action = "grant" if isinstance(change, DataGranted) else "revoke"
            entry = new_entry(
                JournalKind.ACCESS,
                domain=domain,
                topic=change.topic,
                subscriber=str(change.subscriber),
                action=action,
            )
            effects.append(entry)
            return [
                ["hset", keys.pubsub_journal(domain), entry.id, entry.encode(self.pod_id, now_ms)]
            ]
        if isinstance(change, Announced):
            entry = new_entry(
                JournalKind.ANNOUNCE,
                domain=domain,
                topic=change.topic,
                content=change.content.hex(),
                key=change.key,
                chain=change.chain,
                retire="" if change.retire is None else str(change.retire),
            )
            effects.append(entry)
            return [
                ["hset", keys.pubsub_journal(domain), entry.id, entry.encode(self.pod_id, now_ms)]
            ]
        raise TypeError(f"unknown change {change!r}")  # pragma: no cover - closed union


__all__ = [
    "COMMIT_SCRIPT",
    "EVENT_FIELDS",
    "EVENT_VERSION",
    "ChangeWriter",
    "subject_field",
    "topic_field",
]
