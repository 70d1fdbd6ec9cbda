"""Topics, subscriptions, leases, the event log and the journal of the pubsub service.

draft-schwartz-apex-pubsub-02 section 2 asks each domain to keep "state on stable storage
about the currently existing set of topics and subscribers for each topic", and section 4
asks for "information about in-progress operations in persistent storage". Pubsub pods
are stateless, so everything is here, under the keys of :mod:`apexmesh.store.keys`
(``pubsub_*``):

- topics (one HASH), each topic's subscriptions (a HASH per topic) and a per-topic
  version counter (optimistic commits of topic creation and deletion); pods cache
  subscriber lists and follow the event log (:mod:`apexmesh.store.pubsub_cache`);
- leases: a ZSET scored by lease end; :meth:`PubsubStore.claim_expired` ends what is due
  in one script, so two pods can never both end (and both cancel) the same lease;
- the event log: a STREAM with one entry per change (schema v2, :data:`EVENT_FIELDS`,
  docs/pubsub.md), appended in the same script as the change;
- the journal: what still has to be sent for a change already made (replies, cancels,
  forwarded data, presence tuples). It is written in the same script as the change, and
  an entry is removed once its work is done; entries of a pod whose lease lapsed are
  redone by the leader (:meth:`PubsubStore.orphans`). That is how an operation
  acknowledged with ``ok`` is completed even if its pod dies right after.
- the leader lock (one pod ends leases and redoes journals) and pod leases.

Every multi-key change is one Lua script (no half-applied change is ever visible).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from redis.asyncio import Redis

from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.pubsub.catalogue import EVENT_FIELDS_V2
from apexmesh.pubsub.core import (
    Change,
    DataGranted,
    DataRevoked,
    OwnerGranted,
    OwnerRevoked,
    Subscribed,
    Subscription,
    TopicCreated,
    TopicDeleted,
    TupleAdded,
    TupleRemoved,
    Unsubscribed,
)
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub_records import (
    split_subscriptions,
    subscription_field,
    subscription_from,
    subscription_record,
    topic_settings,
)

#: Version of the event schema; bumped only when a field changes meaning.
EVENT_VERSION: Final = "2"

#: Every field of an event, always present (empty string when it does not apply): the
#: schema the snapshot job folds (one definition, apexmesh/pubsub/catalogue.py).
EVENT_FIELDS: Final = EVENT_FIELDS_V2

#: A live pod's journal entry is taken over only when it is this many times older than
#: the retry delay (its pod keeps failing); a dead pod's entries at once.
STUCK_FACTOR: Final = 6

# KEYS: version, topics. ARGV: expected version ("" = unchecked), JSON list of
# operations, topic field, "1" when the topic must (still) exist ("" = unchecked).
# Returns 0 when the version moved or the topic went (the caller re-reads and decides
# again), else 1.
_COMMIT: Final = """
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
                else
                    redis.call('HDEL', ARGV[6] .. d .. ':' .. who, t .. '\\n' .. sid)
                end
                local id = 'expired:' .. member .. ':' .. rec.expires_ms
                local entry = cjson.encode({
                    kind = 'expired', pod = ARGV[5], at_ms = ARGV[1], domain = d,
                    topic = t, subscriber = who, subscription_id = sid,
                    originator = rec.originator, trans_id = rec.trans_id,
                    expires_ms = rec.expires_ms})
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

# KEYS: leader. ARGV: pod id, lease ms. Returns 1 while this pod leads.
_LEAD: Final = """
local holder = redis.call('GET', KEYS[1])
if not holder then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
end
if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
end
return 0
"""

# KEYS: leader. ARGV: pod id.
_RESIGN: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


class JournalKind(StrEnum):
    """What a journal entry asks for; the text is what Redis holds (the lease script
    writes ``expired`` itself)."""

    #: Send ``content`` from ``origin`` to ``recipient``.
    SEND = "send"
    #: A lease ended: send the subscriber's originator its cancel.
    EXPIRED = "expired"
    #: Add or remove the topic's tuple in ``apex=pubsub``'s presence entry.
    PRESENCE = "presence"
    #: Grant or revoke a topic creator's entry on its topic.
    OWNER = "owner"
    #: Grant or revoke ``core:data`` on a topic for a subscriber.
    ACCESS = "access"


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One piece of work still to do (:class:`JournalKind`); binary fields are hex
    text. ``kind`` stays the text read back, so an entry written by a newer pod with a
    kind this one does not know can be recognised (:attr:`known_kind`) and dropped."""

    id: str
    kind: str
    fields: Mapping[str, str] = field(default_factory=dict)

    @property
    def known_kind(self) -> JournalKind | None:
        try:
            return JournalKind(self.kind)
        except ValueError:
            return None

    def encode(self, pod: str, at_ms: int) -> str:
        return json.dumps({**self.fields, "kind": self.kind, "pod": pod, "at_ms": str(at_ms)})

    @property
    def submission_id(self) -> str:
        """The ``SubmitRequest.submission_id`` of this entry's send: the same on every
        pod that does it, and short whatever the entry id (a lease end's names the
        topic and the subscriber)."""
        return "journal-" + hashlib.blake2b(self.id.encode(), digest_size=16).hexdigest()

    @classmethod
    def decode(cls, entry_id: str, text: str) -> JournalEntry:
        values = {str(k): str(v) for k, v in json.loads(text).items()}
        return cls(entry_id, values.get("kind", ""), values)


def new_entry(kind: JournalKind, **fields: str) -> JournalEntry:
    return JournalEntry(f"{kind}:{uuid.uuid4().hex}", kind, fields)


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


class PubsubStore:
    """The pubsub state of one deployment, as seen by the pod ``pod_id``."""

    def __init__(self, redis: Redis, keys: Keys, pod_id: str) -> None:
        self._redis = redis
        self._keys = keys
        #: The client and key scheme, for the stores beside this one (cached messages).
        self.redis = redis
        self.keys = keys
        self.pod_id = pod_id
        self._commit = redis.register_script(_COMMIT)
        self._claim = redis.register_script(_CLAIM_EXPIRED)
        self._counts = redis.register_script(_COUNTS)
        self._lead = redis.register_script(_LEAD)
        self._resign = redis.register_script(_RESIGN)

    # ------------------------------------------------------------------ reading

    @staticmethod
    def topic_field(domain: str, topic: str) -> str:
        return f"{domain} {topic}"

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
        )

    async def subject_subscriptions(
        self, domain: str, subscriber: Endpoint, topic: str | None = None
    ) -> list[Subscription]:
        """The content-based subscriptions of ``subscriber`` in ``domain`` (to ``topic``
        only when given): draft-wyman 5.8.2's cancels may name no topic."""
        index = await self._redis.hkeys(self._keys.pubsub_subject(domain, str(subscriber)))
        wanted: list[tuple[str, str]] = []
        for item in map(_text, index):
            name, _, identifier = item.partition("\n")
            if topic is None or name == topic:
                wanted.append((name, identifier))
        if not wanted:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for name, identifier in wanted:
                pipe.hget(
                    self._keys.pubsub_subscriptions(domain, name),
                    subscription_field(subscriber, int(identifier)),
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
                        subscription_field(subscriber, int(identifier)),
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

    async def pending(self, domain: str) -> list[JournalEntry]:
        """The domain's journal: work accepted and not yet done (sends, publications
        still being forwarded), for the admin API's backlog figures."""
        raw = await self._redis.hgetall(self._keys.pubsub_journal(domain))
        return [JournalEntry.decode(_text(k), _text(v)) for k, v in raw.items()]

    async def events(self, count: int = 10_000) -> list[dict[str, str]]:
        """The first ``count`` events of the log, oldest first (tests, tools)."""
        items = await self._redis.xrange(self._keys.pubsub_events(), count=count) or []
        return [{_text(k): _text(v) for k, v in (fields or {}).items()} for _, fields in items]

    # ------------------------------------------------------------------ changing

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

    def _ops(
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
                ["hset", keys.pubsub_topics(), self.topic_field(domain, change.topic), record],
                self._event(
                    "topic.created",
                    domain,
                    change.topic,
                    now_ms,
                    originator=str(change.originator),
                    settings=change.settings,
                ),
            ]
        if isinstance(change, TopicDeleted):
            return [
                ["hdel", keys.pubsub_topics(), self.topic_field(domain, change.topic)],
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
            if sub.subscription_id is not None:
                subject = keys.pubsub_subject(domain, str(sub.subscriber))
                ops.append(["hset", subject, f"{sub.topic}\n{sub.subscription_id}", "1"])
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
            if change.subscription_id is not None:
                subject = keys.pubsub_subject(domain, str(change.subscriber))
                ops.append(["hdel", subject, f"{change.topic}\n{change.subscription_id}"])
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
            entry = new_entry(
                JournalKind.OWNER,
                domain=domain,
                topic=change.topic,
                owner=str(change.owner),
                action=action,
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
        raise TypeError(f"unknown change {change!r}")  # pragma: no cover - closed union

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
        ``presence``, ``access``); returns every entry journalled, ``work`` first."""
        effects: list[JournalEntry] = []
        ops: list[list[str]] = []
        for change in changes:
            ops += self._ops(domain, change, now_ms, effects)
        entries = [*work, *effects]
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

    async def journal(self, domain: str, entries: Iterable[JournalEntry], now_ms: int) -> None:
        """Journal work that belongs to no change (a forwarded operation, a refusal)."""
        items = [(e.id, e.encode(self.pod_id, now_ms)) for e in entries]
        if items:
            await self._redis.hset(
                self._keys.pubsub_journal(domain), items=[x for i in items for x in i]
            )

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

    async def done(self, domain: str, *entry_ids: str) -> None:
        """The work of these entries is done: forget them."""
        if entry_ids:
            await self._redis.hdel(self._keys.pubsub_journal(domain), *entry_ids)

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

    # ------------------------------------------------------------------ pods, leader

    async def heartbeat(self, lease_ms: int) -> None:
        """This pod lives for ``lease_ms`` more (its journal entries are its own)."""
        await self._redis.set(self._keys.pubsub_pod(self.pod_id), "1", px=lease_ms)

    async def lead(self, domain: str, lease_ms: int) -> bool:
        """Take or keep the leader lock; True while this pod is the leader."""
        return bool(
            await self._lead(keys=[self._keys.pubsub_leader(domain)], args=[self.pod_id, lease_ms])
        )

    async def resign(self, domain: str) -> None:
        await self._resign(keys=[self._keys.pubsub_leader(domain)], args=[self.pod_id])

    async def leave(self) -> None:
        """Clean shutdown: the pod's lease goes now, so the leader redoes what is left."""
        await self._redis.delete(self._keys.pubsub_pod(self.pod_id))

    async def orphans(self, domain: str, now_ms: int, retry_after_ms: int) -> list[JournalEntry]:
        """Journal entries to redo: those of pods whose lease lapsed, this pod's own older
        than ``retry_after_ms`` (the send failed), and a live pod's much older ones. They
        are taken over by this pod."""
        raw = await self._redis.hgetall(self._keys.pubsub_journal(domain))
        entries = [JournalEntry.decode(_text(k), _text(v)) for k, v in raw.items()]
        pods = sorted({e.fields.get("pod", "") for e in entries} - {self.pod_id})
        alive: set[str] = set()
        if pods:
            found = await self._redis.mget([self._keys.pubsub_pod(p) for p in pods])
            alive = {pod for pod, value in zip(pods, found, strict=True) if value is not None}
        out = []
        for entry in entries:
            pod = entry.fields.get("pod", "")
            age = now_ms - int(entry.fields.get("at_ms", "0") or 0)
            if pod == self.pod_id:
                redo = age >= retry_after_ms  # this pod's send failed: retry
            elif pod in alive:
                redo = age >= STUCK_FACTOR * retry_after_ms  # a live pod that never got it done
            else:
                redo = True  # its pod is gone
            if redo:
                out.append(entry)
        if out:
            await self._redis.hset(
                self._keys.pubsub_journal(domain),
                mapping={
                    e.id: JournalEntry(e.id, e.kind, e.fields).encode(self.pod_id, now_ms)
                    for e in out
                },
            )
        return out


__all__ = [
    "EVENT_FIELDS",
    "EVENT_VERSION",
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
