"""The subscriber lists of a pubsub pod, cached and kept current by the event log.

Publishing must cost the same with 10 or 100,000 topics, and nothing per publication
that a pod already knows should cost a Redis round trip. So each pod keeps, per topic it
has published to, whether the topic exists and its subscriptions (a
:class:`~apexmesh.common.cache.BoundedCache` of :class:`TopicState`, loaded on first use)
and keeps them current by following the event log (``pubsub:events``, docs/pubsub.md),
which every change of a topic or subscription appends to in the same Lua script as the
change itself:

- a **load** reads, in one script, the topics asked for (whether each exists, its
  subscriptions) and the id of the last event, so the snapshot is exactly the state
  after that event. Loads of many topics at once (the first publications to 10,000
  topics) share scripts (:class:`~apexmesh.store.batching.Coalescer`);
- a **follower** task reads the log (``XREAD BLOCK``) from the position it started at
  and applies each event to the cached topic it names; topics not cached are skipped;
- each cached topic records the event id its state is current as of. The follower
  applies only later events to it; a snapshot older than the follower's position is
  caught up from the log (``XRANGE``) before it is used. Events carry the whole state of
  what they change (a subscription's record, or its end), so applying one twice, in
  order, changes nothing: a snapshot and the log can overlap safely;
- while the follower cannot read (Redis away, a read timed out), nothing is served
  from the cache: every lookup loads afresh, as without a cache. Back, the follower
  reads on from its position (nothing was lost) and serves the cache again once caught
  up; only a log that no longer holds what follows its position (Redis came back
  without it, the stream was trimmed) makes the cache start over from the log's end.

A subscription answered on one pod reaches the caches of the others as soon as their
followers read its event, normally well under a millisecond after the commit (the reply
to the subscriber is sent after it). Lease ends are applied when the leader records
them; until then :func:`apexmesh.pubsub.core.publish` filters expired leases by the
time, as before.

Event schema (v2, docs/pubsub.md; v1 entries read as v2 with the new fields empty): a
subscription's identity is (domain, topic, subscriber, ``subscription_id``), the id
being "" for a plain topic subscription, and an end ends that identity. An event of a
type this module does not know (a later schema) drops the topic from the cache, so it is
loaded again rather than guessed at.

Placement (which relay pod holds each subscriber: :mod:`apexmesh.store.attachments`)
is cached per endpoint, read in one script for every endpoint missing, and read again in
the background once older than ``placement_ttl_ms`` (the old one serves meanwhile): it
only steers the fan-out to the pod that delivers, a stale one costs the relays a hop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.common.cache import BoundedCache
from apexmesh.pubsub.changes import Subscription
from apexmesh.pubsub.topic_index import TopicIndex
from apexmesh.store.batching import Coalescer
from apexmesh.store.connection import dedicated_client
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub_records import subscription_from, topic_settings

_log = logging.getLogger(__name__)

#: An event id of the log as (milliseconds, sequence): ids compare as tuples.
StreamId = tuple[int, int]

#: Events read per XREAD / XRANGE call.
READ_COUNT: Final = 1000
#: How long one XREAD waits for new events (ms) before it asks again.
BLOCK_MS: Final = 1000
#: Default number of topics cached per pod.
DEFAULT_TOPICS: Final = 100_000
#: Default number of endpoints whose placement is cached per pod.
DEFAULT_PLACEMENTS: Final = 200_000
#: Default milliseconds a placement is reused.
DEFAULT_PLACEMENT_TTL_MS: Final = 2_000

#: Subscription events that set a subscription's whole record.
_SET_EVENTS: Final = frozenset({"subscription.created", "subscription.renewed"})

# KEYS: topics, events. ARGV: subscriptions key prefix (ending in ':'), then domain and
# topic per topic. Returns the last event's id, then per topic its record ('' if none),
# the number of HGETALL items of its subscriptions and the items.
_SNAPSHOT: Final = """
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local out = {last[1] and last[1][1] or '0-0'}
for i = 2, #ARGV, 2 do
    local domain, topic = ARGV[i], ARGV[i + 1]
    table.insert(out, redis.call('HGET', KEYS[1], domain .. ' ' .. topic) or '')
    local items = redis.call('HGETALL', ARGV[1] .. domain .. ':' .. topic)
    table.insert(out, #items)
    for _, item in ipairs(items) do
        table.insert(out, item)
    end
end
return out
"""

# ARGV: attachment key prefix, relay pod key prefix, relay pod key suffix, endpoints.
# Returns the gRPC address of the relay pod holding each endpoint ('' when none).
_PLACEMENT: Final = """
local addresses = {}
local out = {}
for i = 4, #ARGV do
    local pod = redis.call('GET', ARGV[1] .. ARGV[i])
    local address = ''
    if pod then
        address = addresses[pod]
        if address == nil then
            address = redis.call('GET', ARGV[2] .. pod .. ARGV[3]) or ''
            addresses[pod] = address
        end
    end
    table.insert(out, address)
end
return out
"""


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _events(entries: Iterable[Any]) -> list[tuple[StreamId, dict[str, str]]]:
    """XREAD/XRANGE entries as (id, fields) with text fields."""
    return [
        (stream_id(_text(entry_id)), {_text(k): _text(v) for k, v in (fields or {}).items()})
        for entry_id, fields in entries
    ]


def stream_id(text: str) -> StreamId:
    """``"1700000000000-3"`` as (1700000000000, 3)."""
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def id_text(value: StreamId) -> str:
    return f"{value[0]}-{value[1]}"


#: A subscription's key within its topic: (subscriber, subscription id or "").
SubscriptionKey = tuple[Endpoint, str]


@dataclass(slots=True)
class TopicState:
    """One topic as a pod knows it: whether it exists, its subscriptions, and the event
    id this is current as of."""

    exists: bool
    subscriptions: dict[SubscriptionKey, Subscription] = field(default_factory=dict)
    as_of: StreamId = (0, 0)
    #: The topic's schemas (``TopicSettings.to_json`` text, "" for the defaults).
    settings: str = ""
    #: The selectors of the subscriptions, indexed: built by the publisher on the
    #: topic's first content-based publication, then kept current by the events.
    index: TopicIndex | None = None


def _key(sub: Subscription) -> SubscriptionKey:
    return (sub.subscriber, "" if sub.subscription_id is None else str(sub.subscription_id))


def state_from_items(topic: str, items: Sequence[object], as_of: StreamId) -> TopicState:
    """A loaded topic: the HGETALL items of its subscriptions HASH (field: subscriber;
    value: the JSON record). Records that cannot be read are skipped, as elsewhere."""
    state = TopicState(exists=True, as_of=as_of)
    for index in range(0, len(items) - 1, 2):
        try:
            record = json.loads(_text(items[index + 1]))
            sub = subscription_from(topic, _text(items[index]), record)
        except (EndpointError, KeyError, ValueError, TypeError, AttributeError):
            continue
        state.subscriptions[_key(sub)] = sub
    return state


def apply_event(state: TopicState, event: Mapping[str, str]) -> bool:
    """Apply one event of the log to the topic it names; False when it cannot be (an
    unknown type or a record that cannot be read: the caller drops the topic)."""
    kind = event.get("type", "")
    topic = event.get("topic", "")
    # Each event mirrors the Redis writes of its change: a topic's existence and its
    # subscriptions change by their own events (a deletion ends every subscription
    # with one event each), so the cache never holds what Redis does not.
    if kind in ("topic.created", "topic.deleted"):
        state.exists = kind == "topic.created"
        state.settings = event.get("settings", "") if state.exists else ""
        state.index = None  # other schemas: built again on the next publication
        return True
    if kind == "topic.modified":  # draft-wyman 6.2.2: new schemas, same subscriptions
        state.settings = event.get("settings", "")
        state.index = None
        return True
    subscription_id = event.get("subscription_id", "")
    try:
        subscriber = Endpoint.parse(event.get("subscriber", ""))
        if kind in _SET_EVENTS:
            sub = subscription_from(topic, str(subscriber), event)
            state.subscriptions[(subscriber, subscription_id)] = sub
            if state.index is not None:
                state.index.add(sub)
            return True
    except (EndpointError, KeyError, ValueError):
        return False
    if kind == "subscription.ended":
        state.subscriptions.pop((subscriber, subscription_id), None)
        if state.index is not None:
            state.index.remove((subscriber, int(subscription_id) if subscription_id else None))
        return True
    return False


class SubscriberCache:
    """A pod's cached topics and placements; see the module docstring.

    ``clock`` gives milliseconds (placement expiry); the follower runs from
    :meth:`start` until :meth:`aclose`.
    """

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        clock: Callable[[], int],
        topics: int = DEFAULT_TOPICS,
        placements: int = DEFAULT_PLACEMENTS,
        placement_ttl_ms: int = DEFAULT_PLACEMENT_TTL_MS,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._clock = clock
        self._topics: BoundedCache[tuple[str, str], TopicState] = BoundedCache(
            "pubsub-topics", topics
        )
        self._placements: BoundedCache[Endpoint, str] = BoundedCache(
            "pubsub-placements", placements
        )
        self._placement_ttl = placement_ttl_ms
        #: Endpoints whose placement is being read again in the background.
        self._refreshing: set[Endpoint] = set()
        self._snapshot = redis.register_script(_SNAPSHOT)
        self._placement = redis.register_script(_PLACEMENT)
        self._loads: Coalescer[tuple[str, str], TopicState] = Coalescer(
            "pubsub-topic-loads", self._load_many, concurrency=2
        )
        self._locating: Coalescer[Endpoint, str] = Coalescer(
            "pubsub-placements", self._locate_many, concurrency=2
        )
        self._loading: dict[tuple[str, str], asyncio.Future[TopicState]] = {}
        attachment = keys.attachment("")
        self._attachment_prefix = attachment
        self._pod_prefix, self._pod_suffix = keys.relay_pod("\x00").split("\x00")
        #: The follower's position: every event up to it has been applied.
        self._position: StreamId = (0, 0)
        #: True once the position is that of the log (set at the first read).
        self._started = False
        #: True while the follower reads the log without a gap (the cache may be served);
        #: a failed read leaves the cache unserved until the follower has caught up.
        self._synced = False
        #: Bumped whenever the cache is emptied, so a load begun before is not stored.
        self._epoch = 0
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        #: Loads, lookups answered from the cache, and events applied (metrics, tests).
        self.loads = 0
        self.hits = 0
        self.applied = 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start following the log and wait until the cache may be served."""
        if self._task is None:
            self._task = asyncio.create_task(self._follow(), name="pubsub-event-follower")
        await self._ready.wait()

    async def aclose(self) -> None:
        task, self._task = self._task, None
        self._closing = True
        if task is not None:
            # A cancellation can be lost inside the client's read timeout (Python 3.11's
            # asyncio.timeout), so ask again; the loop also ends by itself within one
            # XREAD block (:data:`BLOCK_MS`) once closing.
            for _ in range(3):
                task.cancel()
                done, _ = await asyncio.wait({task}, timeout=BLOCK_MS / 1000 + 0.5)
                if done:
                    break
            with contextlib.suppress(asyncio.CancelledError):
                if task.done():
                    task.result()
        await self._loads.aclose()
        await self._locating.aclose()
        self._synced = False
        self._clear()

    @property
    def synced(self) -> bool:
        return self._synced

    def __len__(self) -> int:
        return len(self._topics)

    def _clear(self) -> None:
        """Forget every topic (a load under way is not stored either)."""
        self._epoch += 1
        self._topics.clear()

    # ------------------------------------------------------------------ follower

    async def _follow(self) -> None:
        # A connection of its own, held: the follower never queues behind a burst of
        # commands for the pool (a late event would leave the cache stale meanwhile).
        own = dedicated_client(self._redis)
        try:
            await self._read_log(own)
        finally:
            with contextlib.suppress(RedisError, OSError):
                await own.aclose()

    async def _read_log(self, redis: Redis) -> None:
        key = self._keys.pubsub_events()
        backoff = 0.05
        while not self._closing:
            try:
                if not self._started:
                    last = await redis.xrevrange(key, count=1)
                    self._position = stream_id(_text(last[0][0])) if last else (0, 0)
                    self._started = self._synced = True
                    self._ready.set()
                elif not self._synced:
                    await self._resume(redis, key)
                found = await redis.xread(
                    {key: id_text(self._position)}, count=READ_COUNT, block=BLOCK_MS
                )
                read = 0
                for _stream, entries in cast("list[Any]", found or []):
                    for event_id, event in _events(entries):
                        self._apply(event_id, event)
                        read += 1
                if not self._synced and read < READ_COUNT:
                    self._synced = True  # caught up with what was missed meanwhile
                    backoff = 0.05
                continue
            except (RedisError, OSError) as exc:
                _log.warning("pubsub cache: event log unreadable (%s): serving from Redis", exc)
            except Exception:  # noqa: BLE001 - a follower that stopped would serve stale lists
                _log.exception("pubsub cache: event log follower failed; starting over")
                self._clear()
                self._started = False
            self._synced = False
            self._ready.set()
            await asyncio.sleep(backoff)  # reconnect backoff
            backoff = min(backoff * 2, 2.0)

    async def _resume(self, redis: Redis, key: str) -> None:
        """After a failed read: reading on from the position loses nothing, unless the
        log no longer holds what follows it (Redis came back without it, or entries
        after it were trimmed); then the cache starts over from the log's end."""
        position = self._position
        try:
            info = await redis.xinfo_stream(key)
        except ResponseError:  # no such key: Redis has no log at all
            last, deleted, first, length = (0, 0), (0, 0), (0, 0), 0
        else:
            last = stream_id(_text(info.get("last-generated-id", "0-0")))
            deleted = stream_id(_text(info.get("max-deleted-entry-id", "0-0")))
            head = info.get("first-entry")
            first = stream_id(_text(head[0])) if head else (0, 0)
            length = int(info.get("length", 0))
        # Trimming drops the oldest entries: if the oldest left is past the position
        # (or none is left though some came after it), what followed it may be gone.
        trimmed = last > position and (length == 0 or (first > position > (0, 0)))
        if last < position or deleted > position or trimmed:
            _log.warning("pubsub cache: the event log lost events it had; starting over")
            self._clear()
            self._position = last

    def _apply(self, event_id: StreamId, event: Mapping[str, str]) -> None:
        self._position = event_id
        name = (event.get("domain", ""), event.get("topic", ""))
        state = self._topics.get(name)
        if state is None or event_id <= state.as_of:
            return
        if apply_event(state, event):
            state.as_of = event_id
            self.applied += 1
        else:
            _log.info("event %s of %s/%s not understood: topic reloaded", event_id, *name)
            self._topics.pop(name)

    # ------------------------------------------------------------------ topics

    async def topic(self, domain: str, topic: str) -> TopicState:
        """The topic as this pod knows it (loaded on first use). Treat the result as
        read-only: it is the cached object."""
        name = (domain, topic)
        if self._synced:
            state = self._topics.get(name)
            if state is not None:
                self.hits += 1
                return state
        loading = self._loading.get(name)
        if loading is None:
            # A task of its own, shared by every publication of the topic that arrives
            # meanwhile; a caller that stops waiting does not stop it for the others.
            loading = asyncio.ensure_future(self._load(name))
            self._loading[name] = loading
            loading.add_done_callback(lambda done: self._loaded(name, done))
        return await asyncio.shield(loading)

    def _loaded(self, name: tuple[str, str], done: asyncio.Future[TopicState]) -> None:
        if self._loading.get(name) is done:
            del self._loading[name]
        if not done.cancelled():
            done.exception()  # retrieved: its waiters got it, or nobody waits any more

    def forget(self, domain: str, topic: str) -> bool:
        """Drop a topic and its subscribers' placements (an operator's purge): the next
        publication reads both from Redis again. True when the topic was cached."""
        state = self._topics.pop((domain, topic))
        if state is None:
            return False
        for subscriber, _ in state.subscriptions:
            self._placements.pop(subscriber)
        return True

    async def _load(self, name: tuple[str, str]) -> TopicState:
        epoch = self._epoch
        state = await self._loads.call(name)
        self.loads += 1
        # Events the follower read before this snapshot was installed: catch up.
        while self._synced and self._position > state.as_of:
            entries = await self._redis.xrange(
                self._keys.pubsub_events(), min=f"({id_text(state.as_of)}", count=READ_COUNT
            )
            if not entries:
                break
            for event_id, event in _events(entries):
                if (event.get("domain", ""), event.get("topic", "")) == name and not apply_event(
                    state, event
                ):
                    return state  # not understood: served once, not cached
                state.as_of = event_id
        if self._synced and epoch == self._epoch:
            self._topics.put(name, state)
        return state

    async def _load_many(self, names: Sequence[tuple[str, str]]) -> list[TopicState]:
        answer = await self._snapshot(
            keys=[self._keys.pubsub_topics(), self._keys.pubsub_events()],
            args=[
                self._keys.pubsub_subscriptions("", "")[: -len(":")],
                *(part for name in names for part in name),
            ],
        )
        as_of = stream_id(_text(answer[0]))
        states: list[TopicState] = []
        index = 1
        for _domain, topic in names:
            record, count = _text(answer[index]), int(answer[index + 1])
            index += 2
            state = state_from_items(topic, answer[index : index + count], as_of)
            state.exists = bool(record)
            state.settings = topic_settings(record)
            states.append(state)
            index += count
        return states

    # ------------------------------------------------------------------ placement

    async def placement(self, endpoints: Sequence[Endpoint]) -> dict[Endpoint, str]:
        """The gRPC address of the relay pod holding each endpoint's attachment ("" for
        endpoints attached nowhere in the domain). Only an endpoint never seen waits for
        Redis; one read more than ``placement_ttl_ms`` ago is used as it is while it is
        read again in the background (a stale placement costs the relays a hop, never a
        delivery), so no publication waits for a placement it had before."""
        now = self._clock()
        out: dict[Endpoint, str] = {}
        missing: list[Endpoint] = []
        stale: list[Endpoint] = []
        placements = self._placements
        for endpoint in endpoints:
            address = placements.get(endpoint)
            if address is None:
                missing.append(endpoint)
                continue
            out[endpoint] = address
            expires = placements.expiry(endpoint)
            if expires is not None and expires <= now and endpoint not in self._refreshing:
                stale.append(endpoint)
        if stale:
            self._refreshing.update(stale)
            refresh = asyncio.ensure_future(self._place(stale))
            refresh.add_done_callback(lambda done: self._refreshed(stale, done))
        if missing:
            out.update(await self._place(missing))
        return out

    async def _place(self, endpoints: Sequence[Endpoint]) -> dict[Endpoint, str]:
        found = await asyncio.gather(*(self._locating.call(e) for e in endpoints))
        expires = self._clock() + self._placement_ttl
        for endpoint, address in zip(endpoints, found, strict=True):
            self._placements.put(endpoint, address, expires=expires)
        return dict(zip(endpoints, found, strict=True))

    def _refreshed(
        self, endpoints: Sequence[Endpoint], done: asyncio.Future[dict[Endpoint, str]]
    ) -> None:
        self._refreshing.difference_update(endpoints)
        if not done.cancelled() and done.exception() is not None:
            _log.warning("placements not refreshed: %s", done.exception())

    async def _locate_many(self, endpoints: Sequence[Endpoint]) -> list[str]:
        answer = await self._placement(
            # Not read: it names the slot (relay's group) so a cluster runs it there.
            keys=[self._keys.attachment(str(endpoints[0]))] if self._keys.cluster else [],
            args=[
                self._attachment_prefix,
                self._pod_prefix,
                self._pod_suffix,
                *(str(endpoint) for endpoint in endpoints),
            ],
        )
        return [_text(address) for address in answer]


__all__ = [
    "SubscriberCache",
    "StreamId",
    "TopicState",
    "apply_event",
    "id_text",
    "state_from_items",
    "stream_id",
]
