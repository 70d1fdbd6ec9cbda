"""Topics, subscriptions, leases and the event log of the pubsub service.

draft-schwartz-apex-pubsub-02 section 2 asks each domain to keep "state on stable storage
about the currently existing set of topics and subscribers for each topic", and section 4
asks for "information about in-progress operations in persistent storage". Pubsub pods
are stateless, so everything is in Redis, under the keys of :mod:`apexmesh.store.keys`
(``pubsub_*``). :class:`PubsubStore` is the one door to it; its parts are:

- topics (one HASH), each topic's subscriptions (a HASH per topic), a per-subscriber
  index of them, and a per-topic version counter (optimistic commits of topic creation
  and deletion); pods cache subscriber lists and follow the event log
  (:mod:`apexmesh.store.pubsub_cache`). Reading is here; changing is
  :meth:`PubsubStore.commit`, one script built by :mod:`apexmesh.store.pubsub_changes`
  (the change, its event in the log and its journal entries at once);
- leases: a ZSET scored by lease end; :meth:`PubsubStore.claim_expired` ends what is due
  in one script, so two pods can never both end (and both cancel) the same lease;
- the event log: a STREAM with one entry per change (schema v2, :data:`EVENT_FIELDS`,
  docs/pubsub.md), appended in the same script as the change;
- the journal of work still to do for a change already made, pod leases and the leader
  lock (:mod:`apexmesh.store.pubsub_journal`, the base class). That is how an operation
  acknowledged with ``ok`` is completed even if its pod dies right after.

Every multi-key change is one Lua script (no half-applied change is ever visible).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from redis.asyncio import Redis

from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.pubsub.changes import Change, Subscription
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub_changes import (
    COMMIT_SCRIPT,
    EVENT_FIELDS,
    EVENT_VERSION,
    ChangeWriter,
    topic_field,
)
from apexmesh.store.pubsub_journal import (
    STUCK_FACTOR,
    JournalEntry,
    JournalKind,
    JournalStore,
    new_entry,
)
from apexmesh.store.pubsub_records import (
    split_subscriptions,
    subscription_field,
    subscription_from,
    subscription_record,
    topic_settings,
)

# KEYS: expiry, journal, events.
# ARGV: now ms, limit, subscriptions key prefix, version key prefix, pod id, subject
# key prefix. A member's subscriber part is the subscriptions HASH field: the
# subscriber, with "\n<subscription id>" for a content-based subscription.
# Ends every lease due at ``now`` (renewed ones are skipped): removes the subscription,
# bumps the topic's version, appends the event and journals the cancel, all at once.
# Returns {id, entry, ...} of the journal entries written.
_CLAIM_EXPIRED: Final = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local out = {}
for _, member in ipairs(due) do
    redis.call('ZREM', KEYS[1], member)
    local d, t, s = string.match(member, '^([^\\n]*)\\n([^\\n]*)\\n(.*)$')
    if d then
        local subs = ARGV[3] .. d .. ':' .. t
        local raw = redis.call('HGET', subs, s)
        if raw then
            local rec = cjson.decode(raw)
            if tonumber(rec.expires_ms) <= tonumber(ARGV[1]) then
                redis.call('HDEL', subs, s)
                redis.call('INCR', ARGV[4] .. d .. ':' .. t)
                local who, sid = string.match(s, '^([^\\n]*)\\n(.*)$')
                if not who then
                    who, sid = s, ''
                end
                redis.call('HDEL', ARGV[6] .. d .. ':' .. who, t .. '\\n' .. sid)
                local id = 'expired:' .. member .. ':' .. rec.expires_ms
                local entry = cjson.encode({
                    kind = 'expired', pod = ARGV[5], at_ms = ARGV[1], domain = d,
                    topic = t, subscriber = who, subscription_id = sid,
                    originator = rec.originator, trans_id = rec.trans_id,
                    expires_ms = rec.expires_ms, selector_class = rec.selector_class or '',
                    selector = rec.selector or '', since_ms = rec.since_ms or ''})
                redis.call('HSET', KEYS[2], id, entry)
                redis.call('XADD', KEYS[3], '*', 'v', '2', 'type', 'subscription.ended',
                    'domain', d, 'topic', t, 'subscriber', who, 'subscription_id', sid,
                    'selector_class', rec.selector_class or '', 'selector', rec.selector or '',
                    'cached', rec.cached or '', 'settings', '',
                    'originator', rec.originator, 'trans_id', rec.trans_id,
                    'expires_ms', rec.expires_ms, 'reason', 'expired', 'at_ms', ARGV[1],
                    'pod', ARGV[5])
                table.insert(out, id)
                table.insert(out, entry)
            end
        end
    end
end
return out
"""

# KEYS: topics, expiry of the domain. ARGV: "<domain> " (the topics' field prefix).
# Returns {topics of the domain, subscriptions of the domain} without sending either
# list to the client: the leader's gauges every second cost Redis a scan of the topic
# names, not the pod a decode of every topic and subscription.
_COUNTS: Final = """
local topics = 0
local prefix = ARGV[1]
for _, name in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(name, 1, #prefix) == prefix then
        topics = topics + 1
    end
end
return {topics, redis.call('ZCARD', KEYS[2])}
"""


@dataclass(frozen=True, slots=True)
class TopicView:
    """What the steps of one operation read: the topic and its subscriptions."""

    exists: bool
    version: int
    #: The plain topic subscriptions (draft-schwartz), one per subscriber.
    subscriptions: dict[Endpoint, Subscription]
    #: Who created the topic (its owner), when known.
    creator: Endpoint | None = None
    #: The content-based subscriptions read (draft-wyman 5.8: several per subscriber).
    content: tuple[Subscription, ...] = ()
    #: The topic's schemas as ``TopicSettings.to_json`` text ("" for the defaults).
    settings: str = ""
    #: When the topic was created (ms since the epoch; 0 when unknown).
    created_ms: int = 0

    @property
    def every_subscription(self) -> tuple[Subscription, ...]:
        return (*self.subscriptions.values(), *self.content)


@dataclass(frozen=True, slots=True)
class TopicSummary:
    """One topic as operators list it (the admin API's ``topics ls``)."""

    domain: str
    topic: str
    created_ms: int
    creator: str
    subscriptions: int


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _creator(record: object) -> Endpoint | None:
    """The creator named by a topic's record (None when absent or unreadable)."""
    if record is None:
        return None
    try:
        return Endpoint.parse(str(json.loads(_text(record))["creator"]))
    except (ValueError, KeyError, TypeError):
        return None


def _created_ms(record: object) -> int:
    """When a topic's record says it was created (0 when absent or unreadable)."""
    if record is None:
        return 0
    try:
        return int(json.loads(_text(record))["created_ms"])
    except (ValueError, KeyError, TypeError):
        return 0


class PubsubStore(JournalStore):
    """The pubsub state of one deployment, as seen by the pod ``pod_id``."""

    def __init__(self, redis: Redis, keys: Keys, pod_id: str) -> None:
        super().__init__(redis, keys, pod_id)
        self._writer = ChangeWriter(keys, pod_id)
        self._commit = redis.register_script(COMMIT_SCRIPT)
        self._claim = redis.register_script(_CLAIM_EXPIRED)
        self._counts = redis.register_script(_COUNTS)

    # ------------------------------------------------------------------ reading

    @staticmethod
    def topic_field(domain: str, topic: str) -> str:
        return topic_field(domain, topic)

    async def topics(self, domain: str) -> list[str]:
        fields = await self._redis.hkeys(self._keys.pubsub_topics())
        prefix = f"{domain} "
        return sorted(
            text.removeprefix(prefix) for text in map(_text, fields) if text.startswith(prefix)
        )

    async def read_topic(
        self, domain: str, topic: str, subscribers: Sequence[Endpoint] | None = None
    ) -> TopicView:
        """Whether the topic exists, its version and its subscriptions: all of them, or
        only those of ``subscribers`` (a subscribe or cancel needs its subject's and at
        most one other, not the topic's thousands: reading them all made subscribing
        cost more the more subscribers a topic had)."""
        key = self._keys.pubsub_subscriptions(domain, topic)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hget(self._keys.pubsub_topics(), self.topic_field(domain, topic))
            pipe.get(self._keys.pubsub_version(domain, topic))
            if subscribers is None:
                pipe.hgetall(key)
            elif subscribers:
                pipe.hmget(key, [str(subscriber) for subscriber in subscribers])
            found = await pipe.execute()
        record, version = found[0], found[1]
        exists = record is not None
        pairs: list[object] = []
        if subscribers is None:
            for field, value in dict(found[2]).items():
                pairs += [field, value]
        elif subscribers:
            for subscriber, value in zip(subscribers, found[2], strict=True):
                if value is not None:
                    pairs += [str(subscriber), value]
        plain, content = split_subscriptions(topic, pairs)
        return TopicView(
            exists,
            int(version or 0),
            plain,
            _creator(record),
            content=content,
            settings=topic_settings(record),
            created_ms=_created_ms(record),
        )

    async def subject_subscriptions(
        self,
        domain: str,
        subscriber: Endpoint,
        topic: str | None = None,
        *,
        plain: bool = False,
    ) -> list[Subscription]:
        """The content-based subscriptions of ``subscriber`` in ``domain`` (to ``topic``
        only when given), and with ``plain`` its draft-schwartz subscriptions too:
        draft-wyman 5.8.2's cancels may name no topic. Read from the subscriber's index
        (``Keys.pubsub_subject``), which lists plain subscriptions since they are
        written with their index entry (a plain subscription made before is listed once
        renewed)."""
        index = await self._redis.hkeys(self._keys.pubsub_subject(domain, str(subscriber)))
        wanted: list[tuple[str, int | None]] = []
        for item in map(_text, index):
            name, _, raw_id = item.partition("\n")
            if (topic is not None and name != topic) or (not raw_id and not plain):
                continue
            try:
                wanted.append((name, int(raw_id) if raw_id else None))
            except ValueError:
                continue
        if not wanted:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for name, identifier in wanted:
                pipe.hget(
                    self._keys.pubsub_subscriptions(domain, name),
                    subscription_field(subscriber, identifier),
                )
            found = await pipe.execute()
        out: list[Subscription] = []
        for (name, identifier), raw in zip(wanted, found, strict=True):
            if raw is None:
                continue
            try:
                out.append(
                    subscription_from(
                        name,
                        subscription_field(subscriber, identifier),
                        json.loads(_text(raw)),
                    )
                )
            except (EndpointError, KeyError, ValueError, AttributeError):
                continue
        return out

    async def new_subscription_id(self, domain: str, subscriber: Endpoint) -> int:
        """A subscription id never given to ``subscriber`` by this service before."""
        value = await self._redis.incr(self._keys.pubsub_subscription_ids(domain, str(subscriber)))
        return int(value) % 2_147_483_647

    async def next_expiry(self, domain: str) -> int | None:
        """The earliest lease end (ms) in ``domain``, None when no lease runs."""
        first = await self._redis.zrange(self._keys.pubsub_expiry(domain), 0, 0, withscores=True)
        return int(first[0][1]) if first else None

    async def summaries(self, domain: str | None = None) -> list[TopicSummary]:
        """Every topic (of ``domain`` when given) with its creation and its number of
        subscriptions, sorted by domain and name."""
        raw = await self._redis.hgetall(self._keys.pubsub_topics())
        found: list[tuple[str, str, dict[str, object]]] = []
        for field_, value in raw.items():
            where, _, topic = _text(field_).partition(" ")
            if domain is not None and where != domain:
                continue
            try:
                record = json.loads(_text(value))
            except ValueError:
                record = {}
            found.append((where, topic, record if isinstance(record, dict) else {}))
        found.sort(key=lambda item: (item[0], item[1]))
        if not found:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for where, topic, _ in found:
                pipe.hlen(self._keys.pubsub_subscriptions(where, topic))
            counts = await pipe.execute()
        return [
            TopicSummary(
                domain=where,
                topic=topic,
                created_ms=int(str(record.get("created_ms", 0) or 0)),
                creator=str(record.get("creator", "")),
                subscriptions=int(count),
            )
            for (where, topic, record), count in zip(found, counts, strict=True)
        ]

    async def counts(self, domain: str) -> tuple[int, int]:
        """(topics, subscriptions) of ``domain``: every subscription has its lease in
        the domain's expiry set, so that set's size is their number."""
        topics, subscriptions = await self._counts(
            keys=[self._keys.pubsub_topics(), self._keys.pubsub_expiry(domain)],
            args=[self.topic_field(domain, "")],
        )
        return int(topics), int(subscriptions)

    async def events(self, count: int = 10_000) -> list[dict[str, str]]:
        """The first ``count`` events of the log, oldest first (tests, tools)."""
        items = await self._redis.xrange(self._keys.pubsub_events(), count=count) or []
        return [{_text(k): _text(v) for k, v in (fields or {}).items()} for _, fields in items]

    # ------------------------------------------------------------------ changing

    async def commit(
        self,
        domain: str,
        topic: str,
        expected_version: int | None,
        changes: Iterable[Change],
        work: Iterable[JournalEntry],
        now_ms: int,
        *,
        topic_exists: bool = False,
    ) -> list[JournalEntry] | None:
        """Apply ``changes`` and journal ``work`` at once, unless the topic's version is no
        longer ``expected_version`` or, with ``topic_exists``, the topic is gone (None:
        re-read and decide again). Subscriptions only need the topic to exist: checking
        the version for them would make concurrent subscribers of one topic retry each
        other. Presence and access side effects of the changes are journalled too (kinds
        ``presence``, ``access``); returns every entry journalled, the side effects
        first: an entry for an endpoint (an access entry of its topic) is then done
        before the reply that tells it the operation succeeded (one chain per endpoint,
        services/pubsub/journal.py)."""
        effects: list[JournalEntry] = []
        ops: list[list[str]] = []
        for change in changes:
            ops += self._writer.ops(domain, change, now_ms, effects)
        entries = [*effects, *work]
        journal = self._keys.pubsub_journal(domain)
        ops += [["hset", journal, e.id, e.encode(self.pod_id, now_ms)] for e in work]
        done = await self._commit(
            keys=[self._keys.pubsub_version(domain, topic), self._keys.pubsub_topics()],
            args=[
                "" if expected_version is None else str(expected_version),
                json.dumps(ops),
                self.topic_field(domain, topic),
                "1" if topic_exists else "",
            ],
        )
        return entries if done else None

    async def upstream_due(self, domain: str, topic: str) -> bool:
        """True when the upstream subscription of a redistributed topic must be (re)sent."""
        return not await self._redis.exists(self._keys.pubsub_upstream(domain, topic))

    async def upstream_sent(
        self, domain: str, topic: str, renew_after_ms: int, now_ms: int
    ) -> None:
        await self._redis.set(
            self._keys.pubsub_upstream(domain, topic), str(now_ms), px=max(1, renew_after_ms)
        )

    async def upstream_lost(self, domain: str, topic: str) -> None:
        """The upstream server cancelled us: resubscribe at the next leader tick."""
        await self._redis.delete(self._keys.pubsub_upstream(domain, topic))

    async def claim_expired(self, domain: str, now_ms: int, limit: int = 500) -> list[JournalEntry]:
        """End every lease due at ``now_ms`` (at most ``limit``); the cancels to send."""
        answer = await self._claim(
            keys=[
                self._keys.pubsub_expiry(domain),
                self._keys.pubsub_journal(domain),
                self._keys.pubsub_events(),
            ],
            args=[
                str(now_ms),
                str(limit),
                self._keys.pubsub_subscriptions("", "")[: -len(":")],
                self._keys.pubsub_version("", "")[: -len(":")],
                self.pod_id,
                self._keys.pubsub_subject("", "")[: -len(":")],
            ],
        )
        return [
            JournalEntry.decode(_text(answer[i]), _text(answer[i + 1]))
            for i in range(0, len(answer) - 1, 2)
        ]


__all__ = [
    "EVENT_FIELDS",
    "EVENT_VERSION",
    "STUCK_FACTOR",
    "JournalEntry",
    "JournalKind",
    "PubsubStore",
    "TopicSummary",
    "TopicView",
    "new_entry",
    "subscription_field",
    "subscription_from",
    "subscription_record",
    "topic_settings",
]
