"""Robust pubsub state in Redis (XEP-0040 on APEX, docs/robust.md "Phase 2").

- **The topic's stream** (``robust_stream``): every accepted publication (and permission
  change, ``kind`` ``perm``) in the order the topic's sequencer took them, bounded by
  count (``XADD MAXLEN ~``) and age (``XTRIM MINID ~``). Gap fill reads it.
- **Source counters** (``robust_sources``): the last source seq per publisher, and
  (field ``~last``, not an endpoint) the position of the topic's last publication,
  which the next entry records as its ``prev``: when a source repair's position was
  trimmed, the first entry kept still says whether it came right after it
  (:mod:`apexmesh.store.robust_reads`).
- **Link records** (``robust_link``, one HASH per subscriber of the topic, with a TTL:
  the link context): ``seq``, ``epoch`` and ``l:<seq>`` -> the stream id it carried (or
  ``hb``), the last ``window`` of them. A record that expired restarts its link at 0 in
  the next epoch (``robust_epochs`` keeps the epoch counter while the subscription lives,
  so a restarted link is never mistaken for the old one).
- **Images** (``robust_images``): the last-value image per item, folded by the sequencer
  (:func:`apexmesh.pubsub.robust.publish_types.fold`) and written with the publication.
- **The sequencer's lease** (``robust_owner``): one pod at a time assigns a topic's
  numbers; every commit checks it (``NOTOWNER`` otherwise), so a pod that lost its lease
  while paused never interleaves numbers with the next owner.

One Lua script commits a publication: owner check, source seq, XADD with retention, the
link seq of every recipient (none for a recipient its permissions exclude), the image.
The publication is durable (AOF in the chart) when the script returns, which is when the
service may answer ``ok``. Link seq arithmetic in Lua follows
:mod:`apexmesh.pubsub.robust.seq` (exact for 16 and 32 bits; for 64 bits exact up to
2**53 deliveries on one link, 285 years at a million per second).

The keys are built by :class:`~apexmesh.store.robust_keys.RobustKeys` (its own module,
not yet ``keys.py``: docs/robust.md "Phase 2: what the service serves", item 5).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ResponseError
from redis.typing import EncodableT

from apexmesh.pubsub.robust.permissions import PermissionTable
from apexmesh.pubsub.robust.publish_types import Image
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.store.connection import Durability, durability_of, replicated
from apexmesh.store.keys import Keys
from apexmesh.store.robust_keys import RobustKeys
from apexmesh.store.robust_reads import (
    PAGE,
    BeyondRetention,
    LinkGone,
    RobustReads,
    StreamEntry,
)

#: Answers from an upstream server waiting for the redistributing topic's owner pod,
#: at most, and how long they wait.
UPSTREAM_ANSWERS: Final = 1_000
UPSTREAM_ANSWERS_TTL_MS: Final = 60_000


@dataclass(frozen=True, slots=True)
class LinkSeq:
    """One recipient's numbers for a publication or heartbeat."""

    seq: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Committed:
    """A publication made durable: its source seq, stream id and each recipient's link
    numbers (None for a recipient its permissions excluded). ``repeated``: its delivery
    key was committed before (a relay's retry): the first commit's numbers, no links."""

    source_seq: int
    stream_id: str
    links: tuple[LinkSeq | None, ...]
    repeated: bool = False


class NotOwner(Exception):  # noqa: N818
    """This pod does not hold the topic's sequencer lease."""


# Shared Lua: the link seq after s (1 after max, 1 after 0) and a link's next number.
_LINK_NEXT: Final = """
local function link_next(link, epochs, subscriber, max_seq, ttl, window, value)
    local seq = redis.call('HGET', link, 'seq')
    local epoch
    if not seq then
        epoch = redis.call('HINCRBY', epochs, subscriber, 1)
        seq = 0
        redis.call('DEL', link)
    else
        epoch = tonumber(redis.call('HGET', link, 'epoch'))
        seq = tonumber(seq)
        if seq >= max_seq then seq = 1 else seq = seq + 1 end
    end
    redis.call('HSET', link, 'seq', seq, 'epoch', epoch, 'l:' .. seq, value)
    local old = seq - window
    if old < 1 then old = old + max_seq end
    if old ~= seq then redis.call('HDEL', link, 'l:' .. old) end
    redis.call('PEXPIRE', link, ttl)
    return {seq, epoch}
end
"""

# KEYS: owner, stream, sources, epochs, images, done, upstream, link keys...
# ARGV: pod ("" = no check), source, type, item, permtoken, contributor, content type,
#       payload, at_ms, retain count, min id ms, max seq, ttl, window, image ("" keep,
#       "-" delete, else JSON), done ttl ms ("0": no delivery key), upstream link state
#       ("" keep, else JSON), subscribers... (one per link key), permitted flags...
# A delivery key already committed returns {-2, "source_seq stream_id"}.
_COMMIT: Final = (
    _LINK_NEXT
    + """
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return redis.error_reply('NOTOWNER')
end
if ARGV[16] ~= '0' then
    local done = redis.call('GET', KEYS[6])
    if done then return {-2, done} end
end
local source_seq = redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
local prev = redis.call('HGET', KEYS[3], '~last') or ''
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[10], '*',
    'kind', 'pub', 'source', ARGV[2], 'seq', source_seq, 'type', ARGV[3], 'item', ARGV[4],
    'permtoken', ARGV[5], 'contributor', ARGV[6], 'ctype', ARGV[7], 'payload', ARGV[8],
    'at_ms', ARGV[9], 'prev', prev)
redis.call('HSET', KEYS[3], '~last', ARGV[2] .. ' ' .. source_seq)
redis.call('XTRIM', KEYS[2], 'MINID', '~', ARGV[11])
if ARGV[16] ~= '0' then
    redis.call('SET', KEYS[6], source_seq .. ' ' .. id, 'PX', ARGV[16])
end
if ARGV[4] ~= '' then
    if ARGV[15] == '-' then
        redis.call('HDEL', KEYS[5], ARGV[4])
    elseif ARGV[15] ~= '' then
        redis.call('HSET', KEYS[5], ARGV[4], ARGV[15])
    end
end
if ARGV[17] ~= '' then redis.call('SET', KEYS[7], ARGV[17]) end
local n = #KEYS - 7
local out = {source_seq, id}
for i = 1, n do
    if ARGV[17 + n + i] == '1' then
        local r = link_next(KEYS[7 + i], KEYS[4], ARGV[17 + i], tonumber(ARGV[12]),
            tonumber(ARGV[13]), tonumber(ARGV[14]), id)
        out[#out + 1] = r[1]
        out[#out + 1] = r[2]
    else
        out[#out + 1] = -1
        out[#out + 1] = -1
    end
end
return out
"""
)

# KEYS: owner, stream, table, sources. ARGV: pod, table JSON, at_ms, retain count, min id ms.
_PERMISSIONS: Final = """
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return redis.error_reply('NOTOWNER')
end
redis.call('SET', KEYS[3], ARGV[2])
local prev = redis.call('HGET', KEYS[4], '~last') or ''
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*',
    'kind', 'perm', 'table', ARGV[2], 'at_ms', ARGV[3], 'prev', prev)
redis.call('XTRIM', KEYS[2], 'MINID', '~', ARGV[5])
return id
"""

# KEYS: owner, epochs, link keys... ARGV: pod, max seq, ttl, window, subscribers...
_HEARTBEATS: Final = (
    _LINK_NEXT
    + """
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return redis.error_reply('NOTOWNER')
end
local out = {}
for i = 3, #KEYS do
    local r = link_next(KEYS[i], KEYS[2], ARGV[2 + i], tonumber(ARGV[2]),
        tonumber(ARGV[3]), tonumber(ARGV[4]), 'hb')
    out[#out + 1] = r[1]
    out[#out + 1] = r[2]
end
return out
"""
)

# KEYS: link, epochs. ARGV: subscriber, epoch. {1, epoch}: the link goes on in that
# epoch; {0, floor}: restarted (its record gone), its next number starts epoch floor + 1.
_RESUME: Final = """
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if epoch and epoch == ARGV[2] then return {1, tonumber(epoch)} end
redis.call('DEL', KEYS[1])
local floor = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if floor < tonumber(ARGV[2]) then
    floor = tonumber(ARGV[2])
    redis.call('HSET', KEYS[2], ARGV[1], floor)
end
return {0, floor}
"""

# KEYS: owner. ARGV: pod, lease ms. 1 while this pod owns the topic.
_TAKE: Final = """
local holder = redis.call('GET', KEYS[1])
if not holder or holder == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
end
return 0
"""

_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def image_json(image: Image) -> str:
    return json.dumps(
        {
            "item": image.item,
            "fields": {name: value.decode("latin-1") for name, value in image.fields.items()},
            "source": image.source,
            "source_seq": image.source_seq,
            "permtoken": image.permtoken,
        }
    )


def image_from_json(text: str | bytes) -> Image:
    data = json.loads(text)
    return Image(
        item=data["item"],
        fields={name: value.encode("latin-1") for name, value in data["fields"].items()},
        source=data["source"],
        source_seq=int(data["source_seq"]),
        permtoken=data.get("permtoken"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Retention:
    """How much of a topic is kept: stream count and age, link record window and TTL."""

    count: int
    ms: int
    link_ttl_ms: int

    @property
    def window(self) -> int:
        return self.count


async def _owned(
    script: AsyncScript,
    keys: list[str],
    args: Sequence[EncodableT],
    topic: str,
    redis: Redis | None = None,
) -> Any:
    """Run an owner-checked script; its NOTOWNER error is :class:`NotOwner`. With
    ``redis`` (a publication's commit), the answer waits for the replicas the process's
    client asks for (``WAIT``, :func:`~apexmesh.store.connection.replicated`): an
    acknowledged robust publication is then on a replica too (docs/redis.md)."""
    try:
        durability = Durability() if redis is None else durability_of(redis)
        if redis is None or not durability.replicas:
            return await script(keys=keys, args=args)
        results = await replicated(
            redis,
            durability,
            [lambda pipe: script(keys=keys, args=args, client=pipe)],
            keys=keys[1:2],
        )
    except ResponseError as exc:
        if "NOTOWNER" in str(exc):
            raise NotOwner(topic) from None
        raise
    return results[0]


class RobustStore:
    """Robust pubsub state of one deployment, as seen by pod ``pod_id``."""

    def __init__(self, redis: Redis, keys: Keys, pod_id: str) -> None:
        self._redis = redis
        self.keys = RobustKeys(keys)
        self.pod_id = pod_id
        self._commit = redis.register_script(_COMMIT)
        self._heartbeats = redis.register_script(_HEARTBEATS)
        self._permissions = redis.register_script(_PERMISSIONS)
        #: The read side (gap repairs, source queries): apexmesh/store/robust_reads.py.
        self.reads = RobustReads(redis, self.keys)
        self.read_link_range = self.reads.read_link_range
        self.read_after = self.reads.read_after
        self._take = redis.register_script(_TAKE)
        self._release = redis.register_script(_RELEASE)
        self._resume = redis.register_script(_RESUME)

    # ------------------------------------------------------------------ ownership

    async def own(self, domain: str, topic: str, lease_ms: int) -> bool:
        """Take or renew the topic's sequencer lease; True while this pod holds it."""
        key = self.keys.owner(domain, topic)
        return bool(await self._take(keys=[key], args=[self.pod_id, lease_ms]))

    async def release(self, domain: str, topic: str) -> None:
        await self._release(keys=[self.keys.owner(domain, topic)], args=[self.pod_id])

    # ------------------------------------------------------------------ committing

    async def commit_publication(
        self,
        domain: str,
        topic: str,
        *,
        source: str,
        payload: bytes,
        now_ms: int,
        resolution: Resolution,
        retention: Retention,
        subscribers: Sequence[tuple[str, bool]] = (),
        type_: str = "",
        item: str = "",
        permtoken: str = "",
        contributor: str = "",
        content_type: str = "",
        image: Image | None = None,
        drop: bool = False,
        check_owner: bool = True,
        delivery: str = "",
        delivery_ttl_ms: int = 0,
        upstream: str = "",
    ) -> Committed:
        """Make one publication durable and number it for every recipient
        (``subscribers``: (endpoint, permitted)); raise :class:`NotOwner`. ``delivery``
        (kept ``delivery_ttl_ms``): the relay's delivery key, answered ``repeated`` when
        it was committed already. ``upstream``: the state of a redistributed topic's
        upstream link after this publication (services/pubsub/robust_upstream.py),
        written with it, so a pod taking the topic over goes on from exactly there."""
        k = self.keys
        image_arg = "-" if drop else ("" if image is None else image_json(image))
        link_keys = [k.link(domain, topic, name) for name, _ in subscribers]
        args: list[str | bytes | int] = [
            self.pod_id if check_owner else "",
            source,
            type_,
            item,
            permtoken,
            contributor,
            content_type,
            payload,
            now_ms,
            retention.count,
            max(0, now_ms - retention.ms),
            resolution.max_seq,
            retention.link_ttl_ms,
            retention.window,
            image_arg,
            delivery_ttl_ms if delivery else 0,
            upstream,
            *[name for name, _ in subscribers],
            *["1" if ok else "0" for _, ok in subscribers],
        ]
        keys = [
            k.owner(domain, topic),
            k.stream(domain, topic),
            k.sources(domain, topic),
            k.epochs(domain, topic),
            k.images(domain, topic),
            k.done(domain, topic, delivery),
            k.upstream(domain, topic),
            *link_keys,
        ]
        values = list(await _owned(self._commit, keys, args, topic, self._redis))
        if int(values[0]) == -2:
            first, _, stream_id = _text(values[1]).partition(" ")
            return Committed(int(first), stream_id, (), repeated=True)
        links: list[LinkSeq | None] = []
        for index in range(2, len(values), 2):
            seq, epoch = int(values[index]), int(values[index + 1])
            links.append(None if seq < 0 else LinkSeq(seq, epoch))
        return Committed(int(values[0]), _text(values[1]), tuple(links))

    async def commit_heartbeats(
        self,
        domain: str,
        topic: str,
        subscribers: Sequence[str],
        *,
        resolution: Resolution,
        retention: Retention,
        check_owner: bool = True,
    ) -> tuple[LinkSeq, ...]:
        """Number one heartbeat on each link (a lost context restarts it at 0)."""
        k = self.keys
        keys = [k.owner(domain, topic), k.epochs(domain, topic)]
        keys += [k.link(domain, topic, name) for name in subscribers]
        args: list[str | int] = [
            self.pod_id if check_owner else "",
            resolution.max_seq,
            retention.link_ttl_ms,
            retention.window,
            *subscribers,
        ]
        raw = list(await _owned(self._heartbeats, keys, args, topic))
        return tuple(LinkSeq(int(raw[i]), int(raw[i + 1])) for i in range(0, len(raw), 2))

    async def commit_permissions(
        self,
        domain: str,
        topic: str,
        table: PermissionTable,
        *,
        now_ms: int,
        retention: Retention,
        check_owner: bool = True,
    ) -> str:
        """Sequence a permission table in the topic's stream (``kind`` ``perm``, the
        whole table after the change): publications after it use it, on every pod and
        in every repair (XEP 5.1 "applied from the next publication"). Returns its id."""
        k = self.keys
        args: list[str | int] = [
            self.pod_id if check_owner else "",
            json.dumps(table.to_json(), sort_keys=True),
            now_ms,
            retention.count,
            max(0, now_ms - retention.ms),
        ]
        try:
            raw = await self._permissions(
                keys=[
                    k.owner(domain, topic),
                    k.stream(domain, topic),
                    k.table(domain, topic),
                    k.sources(domain, topic),
                ],
                args=args,
            )
        except ResponseError as exc:
            if "NOTOWNER" in str(exc):
                raise NotOwner(topic) from None
            raise
        return _text(raw)

    async def resume_link(self, domain: str, topic: str, subscriber: str, epoch: int) -> bool:
        """A subscriber resumes at a position of link epoch ``epoch``: True when its link
        is in that epoch still (it goes on); otherwise its record goes and its next
        number restarts the link at 0 in an epoch above ``epoch`` (never one the stub
        could take for the one it resumed), False."""
        keys = [self.keys.link(domain, topic, subscriber), self.keys.epochs(domain, topic)]
        raw = await self._resume(keys=keys, args=[subscriber, epoch])
        return bool(int(raw[0]))

    async def end_link(self, domain: str, topic: str, subscriber: str) -> None:
        """The subscription ended: its link and epoch go (a new one starts at epoch 1)."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(self.keys.link(domain, topic, subscriber))
        pipe.hdel(self.keys.epochs(domain, topic), subscriber)
        await pipe.execute()

    # ------------------------------------------------------------------ reading

    async def images(self, domain: str, topic: str) -> dict[str, Image]:
        """Every item's image (for a snapshot, or the sequencer's cache)."""
        raw = await self._redis.hgetall(self.keys.images(domain, topic))
        return {_text(k): image_from_json(v) for k, v in raw.items()}

    async def image(self, domain: str, topic: str, item: str) -> Image | None:
        raw = await self._redis.hget(self.keys.images(domain, topic), item)
        return None if raw is None else image_from_json(raw)

    async def upstream_state(self, domain: str, topic: str) -> str | None:
        """The stored state of a redistributed topic's upstream link (JSON), if any."""
        raw = await self._redis.get(self.keys.upstream(domain, topic))
        return None if raw is None else _text(raw)

    async def set_upstream_state(self, domain: str, topic: str, state: str) -> None:
        await self._redis.set(self.keys.upstream(domain, topic), state)

    async def push_upstream_answer(self, domain: str, topic: str, body: bytes) -> None:
        """An answer from the upstream server to the redistributor's stub, for the
        topic's owner pod to take (it may have reached another pod)."""
        key = self.keys.upstream_answers(domain, topic)
        pipe = self._redis.pipeline(transaction=True)
        pipe.rpush(key, body)
        pipe.ltrim(key, -UPSTREAM_ANSWERS, -1)
        pipe.pexpire(key, UPSTREAM_ANSWERS_TTL_MS)
        await pipe.execute()

    async def take_upstream_answers(self, domain: str, topic: str) -> list[bytes]:
        raw = await self._redis.lpop(self.keys.upstream_answers(domain, topic), UPSTREAM_ANSWERS)
        values: list[object] = list(raw) if isinstance(raw, list) else []
        return [v if isinstance(v, bytes) else str(v).encode() for v in values]

    async def source_seq(self, domain: str, topic: str, source: str) -> int:
        """The last source seq given to ``source`` (0: none yet)."""
        raw = await self._redis.hget(self.keys.sources(domain, topic), source)
        return 0 if raw is None else int(raw)


__all__ = [
    "PAGE",
    "BeyondRetention",
    "Committed",
    "LinkGone",
    "LinkSeq",
    "NotOwner",
    "Retention",
    "RobustKeys",
    "RobustStore",
    "StreamEntry",
    "image_from_json",
    "image_json",
]
