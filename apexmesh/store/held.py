"""Held data in Redis (RFC 3342 section 3, hold4Endpoint): per-endpoint ordered queues.

Data for a recipient that is not attached, with hold4Endpoint, is kept here until an
application attaches as that endpoint on any relay pod of the domain, then delivered in
order and removed only after the recipient's ``ok``.

Layout (keys in :mod:`apexmesh.store.keys`, "held data"): one global id counter; per
endpoint a ZSET queue of ids scored by id, a HASH id -> payload, a HASH id -> meta
(heldAt, deadline, size, domain) and a HASH of usage (count, bytes); per domain a usage
HASH and a ZSET of entries by heldAt (oldest held age); one global ZSET of entries by
deadline (expiry); one lease STRING per endpoint for its drainer.

Why a ZSET + HASH and not a LIST or a STREAM: an entry must be removable by id, whatever
its position (acknowledgement after a redelivery, expiry of a middle entry whose
deadline is earlier than its elders'), idempotently, in O(log n); a LIST needs O(n)
LREM by value; a STREAM gives XDEL by id but its ids are server-time based, it keeps no
byte count and still needs a side index for deadlines. Ids come from one INCR that is
never reset, so an id is never reused and a late acknowledgement can never remove a
newer entry; the ZSET score (the id) is the arrival order.

Every change (hold with its quota checks, acknowledgement, expiry) is one Lua script, so
counters and queues can never disagree and two pods can never both pass a quota with the
last free bytes. A hold that exceeds a quota is refused with a reason (:class:`Refused`)
so the relay answers the code of :mod:`apexmesh.apex.holding` instead of dropping.

Durability: :meth:`HeldStore.hold` returns once Redis has executed the script, so the
relay answers ``ok`` only for data that no relay process holds in memory alone: the death
of any relay process loses nothing. Surviving the death of Redis itself is Redis's
persistence (AOF; ``appendfsync always`` for no loss at all) and replication: with
``APEXMESH_REDIS_WAIT_REPLICAS`` set (Sentinel deployments), :meth:`HeldStore.hold` and
:meth:`HeldStore.hold_many` return only once ``WAIT`` saw that many replicas take the
write, else raise :class:`~apexmesh.store.connection.NotReplicated` (docs/redis.md, "What
an acknowledgement promises").

Delivery is at-least-once: a drainer that dies after the recipient's ``ok`` and before
:meth:`HeldStore.ack` leaves the entry held, and the next drainer delivers it again; an
entry is never lost and never stored twice. Only one pod drains an endpoint at a time
(:meth:`HeldStore.claim_drain`); a dead drainer's lease lapses after ``lease_ms``.

Times are integer milliseconds of the caller's clock (epoch milliseconds on every pod).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from redis.asyncio import Redis

from apexmesh.apex.holding import QUOTA_CODE, HoldLimits
from apexmesh.store.batching import Coalescer
from apexmesh.store.connection import durability_of, replicated
from apexmesh.store.keys import Keys

# Common ARGV of the scripts below (key prefixes come from Keys, never spelled here):
# 1 queue prefix, 2 data prefix, 3 meta prefix, 4 usage prefix, 5 domain usage prefix,
# 6 since prefix, 7 deadlines key, 8 domains key, 9 seq key; KEYS[1] the reportAfter key.
_COMMON: Final = """
local Q, D, M, U, DU, S = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local DEADLINES, DOMAINS, SEQ, REPORTS = ARGV[7], ARGV[8], ARGV[9], KEYS[1]

-- Remove one entry and its accounting; returns {payload, meta} or nil if absent.
local function remove(endpoint, id)
    if redis.call('ZREM', Q .. endpoint, id) == 0 then
        return nil
    end
    local payload = redis.call('HGET', D .. endpoint, id)
    local meta = redis.call('HGET', M .. endpoint, id)
    redis.call('HDEL', D .. endpoint, id)
    redis.call('HDEL', M .. endpoint, id)
    local member = id .. ' ' .. endpoint
    redis.call('ZREM', DEADLINES, member)
    redis.call('ZREM', REPORTS, member)
    if meta then
        local size, domain = string.match(meta, '^%d+ %d+ (%d+) (.*)$')
        size = tonumber(size)
        if redis.call('HINCRBY', U .. endpoint, 'count', -1) <= 0 then
            redis.call('DEL', U .. endpoint)
        else
            redis.call('HINCRBY', U .. endpoint, 'bytes', -size)
        end
        redis.call('HINCRBY', DU .. domain, 'count', -1)
        redis.call('HINCRBY', DU .. domain, 'bytes', -size)
        redis.call('ZREM', S .. domain, member)
    end
    return {payload or '', meta or ''}
end
"""

# ARGV 10 endpoint, 11 domain, 12 payload, 13 heldAt, 14 deadline (0 none),
# 15 max endpoint bytes, 16 max endpoint count, 17 max domain bytes, 18 max domain count
# (0: no limit), 19 reportAfter time (0 none), 20 the endpoint's attachment key ('' for no
# check). Returns {1, id} or {0, reason}.
_HOLD: Final = (
    _COMMON
    + """
if ARGV[20] ~= '' and redis.call('EXISTS', ARGV[20]) == 1 then
    return {0, 'attached'}
end
local endpoint, domain, payload = ARGV[10], ARGV[11], ARGV[12]
local size = string.len(payload)
local usage = redis.call('HMGET', U .. endpoint, 'count', 'bytes')
local dusage = redis.call('HMGET', DU .. domain, 'count', 'bytes')
local checks = {
    {'endpoint-bytes', tonumber(usage[2] or '0') + size, tonumber(ARGV[15])},
    {'endpoint-count', tonumber(usage[1] or '0') + 1, tonumber(ARGV[16])},
    {'domain-bytes', tonumber(dusage[2] or '0') + size, tonumber(ARGV[17])},
    {'domain-count', tonumber(dusage[1] or '0') + 1, tonumber(ARGV[18])},
}
for _, check in ipairs(checks) do
    if check[3] > 0 and check[2] > check[3] then
        return {0, check[1]}
    end
end
local id = tostring(redis.call('INCR', SEQ))
redis.call('ZADD', Q .. endpoint, id, id)
redis.call('HSET', D .. endpoint, id, payload)
redis.call('HSET', M .. endpoint, id,
    ARGV[13] .. ' ' .. ARGV[14] .. ' ' .. size .. ' ' .. domain)
redis.call('HINCRBY', U .. endpoint, 'count', 1)
redis.call('HINCRBY', U .. endpoint, 'bytes', size)
redis.call('HINCRBY', DU .. domain, 'count', 1)
redis.call('HINCRBY', DU .. domain, 'bytes', size)
local member = id .. ' ' .. endpoint
redis.call('ZADD', S .. domain, ARGV[13], member)
if ARGV[14] ~= '0' then
    redis.call('ZADD', DEADLINES, ARGV[14], member)
end
if ARGV[19] ~= '0' then
    redis.call('ZADD', REPORTS, ARGV[19], member)
end
redis.call('SADD', DOMAINS, domain)
return {1, id}
"""
)

# ARGV 10 endpoint, 11.. ids. Returns the number of entries removed (absent ones: 0).
_ACK: Final = (
    _COMMON
    + """
local removed = 0
for i = 11, #ARGV do
    if remove(ARGV[10], ARGV[i]) then
        removed = removed + 1
    end
end
return removed
"""
)

# ARGV 10 now, 11 limit. Removes entries whose deadline is <= now, earliest first.
# Returns a flat list: endpoint, id, payload, meta per expired entry.
_EXPIRE: Final = (
    _COMMON
    + """
local due = redis.call('ZRANGEBYSCORE', DEADLINES, '-inf', ARGV[10], 'LIMIT', 0, ARGV[11])
local out = {}
for _, member in ipairs(due) do
    local id, endpoint = string.match(member, '^(%d+) (.*)$')
    local gone = remove(endpoint, id)
    if gone then
        table.insert(out, endpoint)
        table.insert(out, id)
        table.insert(out, gone[1])
        table.insert(out, gone[2])
    else
        redis.call('ZREM', DEADLINES, member)
    end
end
return out
"""
)

# ARGV 10 endpoint, 11 after id (exclusive), 12 limit. Returns id, payload, meta,
# reportAfter time ('' none or taken) quadruples.
_READ: Final = (
    _COMMON
    + """
local endpoint = ARGV[10]
local ids = redis.call('ZRANGEBYSCORE', Q .. endpoint, '(' .. ARGV[11], '+inf',
    'LIMIT', 0, ARGV[12])
local out = {}
for _, id in ipairs(ids) do
    table.insert(out, id)
    table.insert(out, redis.call('HGET', D .. endpoint, id) or '')
    table.insert(out, redis.call('HGET', M .. endpoint, id) or '')
    table.insert(out, redis.call('ZSCORE', REPORTS, id .. ' ' .. endpoint) or '')
end
return out
"""
)

# ARGV 10 now, 11 limit. Takes (once) the entries whose reportAfter time is <= now; they
# stay held. Returns a flat list: endpoint, id, payload, meta per entry.
_DUE_REPORTS: Final = (
    _COMMON
    + """
local due = redis.call('ZRANGEBYSCORE', REPORTS, '-inf', ARGV[10], 'LIMIT', 0, ARGV[11])
local out = {}
for _, member in ipairs(due) do
    redis.call('ZREM', REPORTS, member)
    local id, endpoint = string.match(member, '^(%d+) (.*)$')
    local payload = redis.call('HGET', D .. endpoint, id)
    local meta = redis.call('HGET', M .. endpoint, id)
    if payload and meta then
        table.insert(out, endpoint)
        table.insert(out, id)
        table.insert(out, payload)
        table.insert(out, meta)
    end
end
return out
"""
)

# KEYS: lease. ARGV: owner, lease ms. Returns "" when held by owner (claimed or renewed),
# else the current holder.
_CLAIM: Final = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
    return holder
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ''
"""

# KEYS: lease. ARGV: owner. Returns 1 if released.
_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
end
return 0
"""

#: Refusal reasons returned by :meth:`HeldStore.hold`.
ENDPOINT_BYTES: Final = "endpoint-bytes"
ENDPOINT_COUNT: Final = "endpoint-count"
DOMAIN_BYTES: Final = "domain-bytes"
DOMAIN_COUNT: Final = "domain-count"
#: Not a quota: the endpoint is attached (``hold(..., unless_attached=True)``), deliver it.
ATTACHED: Final = "attached"


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldEntry:
    """One held data."""

    endpoint: str
    #: Unique, never reused; increasing in arrival order.
    id: int
    payload: bytes
    #: When it was held (ms).
    held_at: int
    #: When it must be dropped (ms), None: held until attach.
    deadline: int | None
    #: Payload octets (what the quotas count).
    size: int
    domain: str
    #: When the transient timing report (350) is due (ms); None when none was asked, or
    #: it was already taken by :meth:`HeldStore.due_reports` (fired once). Only
    #: :meth:`HeldStore.read` fills it.
    report_at: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Refused:
    """A hold refused by a quota: answer :attr:`code` (450) for the recipient."""

    #: One of ENDPOINT_BYTES, ENDPOINT_COUNT, DOMAIN_BYTES, DOMAIN_COUNT.
    reason: str

    @property
    def code(self) -> int:
        return int(QUOTA_CODE)

    @property
    def text(self) -> str:
        return f"hold4Endpoint: held data quota reached ({self.reason})"


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldStats:
    """Held data of one domain, for metrics."""

    domain: str
    count: int
    bytes: int
    #: Age (ms at ``now``) of the oldest held entry, None when nothing is held.
    oldest_age_ms: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointHeld:
    """What is held for one endpoint (the admin API's ``held ls``)."""

    endpoint: str
    count: int
    bytes: int
    #: Age (ms at ``now``) of its oldest held entry.
    oldest_age_ms: int


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry(
    endpoint: str, id_: object, payload: object, meta: object, report_at: object = b""
) -> HeldEntry:
    held_at, deadline, size, domain = _text(meta).split(" ", 3)
    report = _text(report_at) if report_at is not None else ""
    return HeldEntry(
        endpoint=endpoint,
        id=int(_text(id_)),
        payload=payload if isinstance(payload, bytes) else _text(payload).encode(),
        held_at=int(held_at),
        deadline=int(deadline) or None,
        size=int(size),
        domain=domain,
        report_at=int(float(report)) if report else None,
    )


def _hold_result(result: Sequence[object]) -> int | Refused:
    ok, value = result
    if int(_text(ok)) == 1:
        return int(_text(value))
    return Refused(reason=_text(value))


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldRequest:
    """One entry for :meth:`HeldStore.hold_many` (the arguments of :meth:`HeldStore.hold`)."""

    endpoint: str
    domain: str
    payload: bytes
    now: int
    deadline: int | None = None
    #: When the 350 is due (ms), None: no reportAfter.
    report_at: int | None = None


def _entries(flat: Sequence[object]) -> list[HeldEntry]:
    return [
        _entry(_text(flat[i]), flat[i + 1], flat[i + 2], flat[i + 3])
        for i in range(0, len(flat), 4)
    ]


def _limit(value: int | None) -> int:
    return 0 if value is None else value


class HeldStore:
    """The held data of a deployment, as seen by one relay pod."""

    def __init__(self, redis: Redis, keys: Keys, *, lease_ms: int = 10_000) -> None:
        self._redis = redis
        self._keys = keys
        self.lease_ms = lease_ms
        self._common = [
            keys.held_queue(""),
            keys.held_data(""),
            keys.held_meta(""),
            keys.held_usage(""),
            keys.held_domain(""),
            keys.held_since(""),
            keys.held_deadlines(),
            keys.held_domains(),
            keys.held_seq(),
        ]
        self._hold = redis.register_script(_HOLD)
        self._ack = redis.register_script(_ACK)
        self._expire = redis.register_script(_EXPIRE)
        self._read = redis.register_script(_READ)
        self._due_reports = redis.register_script(_DUE_REPORTS)
        self._reports_key = [keys.held_report_after()]
        self._claim = redis.register_script(_CLAIM)
        self._release = redis.register_script(_RELEASE)
        self._queued: Coalescer[str, bool] = Coalescer("held-queued", self._any_queued)

    async def _any_queued(self, endpoints: Sequence[str]) -> list[bool]:
        async with self._redis.pipeline(transaction=False) as pipe:
            for endpoint in endpoints:
                pipe.exists(self._keys.held_queue(endpoint))
            return [bool(found) for found in await pipe.execute()]

    async def has_held(self, endpoint: str) -> bool:
        """Whether anything is held for ``endpoint``: what an attach asks before it
        claims a drain. The checks of endpoints attaching at once share round trips
        (:class:`~apexmesh.store.batching.Coalescer`), so a thousand attaches with
        nothing held cost a few pipelines, not four scripts each."""
        return await self._queued.call(endpoint)

    async def hold(
        self,
        endpoint: str,
        domain: str,
        payload: bytes,
        *,
        now: int,
        deadline: int | None,
        limits: HoldLimits,
        report_at: int | None = None,
        unless_attached: bool = False,
    ) -> int | Refused:
        """Hold ``payload`` for ``endpoint`` (of ``domain``) until ``deadline`` (ms, None:
        until attach), checking the quotas of ``limits`` atomically. ``report_at``: when
        the data's transient timing report (350) is due (the first REPORT_AFTER timer of
        its dataTiming state), kept in Redis so that any pod sends it, once
        (:meth:`due_reports`). Returns the entry id once the data is in Redis, or
        :class:`Refused`. With ``unless_attached``, nothing is held when the endpoint has
        an attachment record (:mod:`apexmesh.store.attachments`), checked in the same
        script: ``Refused(reason=ATTACHED)`` then says "deliver it instead". Every drain
        starts after its attach claimed that record, so data held this way is always
        seen by the next attach's drain: holding and attaching cannot race."""
        args = self._hold_args(
            endpoint,
            domain,
            payload,
            now=now,
            deadline=deadline,
            limits=limits,
            report_at=report_at,
            attachment=self._keys.attachment(endpoint) if unless_attached else "",
        )
        durability = durability_of(self._redis)
        if not durability.replicas:
            return _hold_result(await self._hold(keys=self._reports_key, args=args))
        # With replicas, the answer waits for WAIT on the script's own connection: the
        # relay's ok then means a replica has the data too (docs/redis.md).
        (result,) = await replicated(
            self._redis,
            durability,
            [lambda pipe: self._hold(keys=self._reports_key, args=args, client=pipe)],
            keys=[self._keys.held_queue(endpoint)],
        )
        return _hold_result(result)

    def _hold_args(
        self,
        endpoint: str,
        domain: str,
        payload: bytes,
        *,
        now: int,
        deadline: int | None,
        limits: HoldLimits,
        report_at: int | None,
        attachment: str = "",
    ) -> list[str | bytes | int]:
        return [
            *self._common,
            endpoint,
            domain,
            payload,
            now,
            0 if deadline is None else deadline,
            _limit(limits.max_bytes_per_endpoint),
            _limit(limits.max_count_per_endpoint),
            _limit(limits.max_bytes_per_domain),
            _limit(limits.max_count_per_domain),
            0 if report_at is None else report_at,
            attachment,
        ]

    async def hold_many(
        self, requests: Sequence[HoldRequest], *, limits: HoldLimits
    ) -> list[int | Refused]:
        """:meth:`hold` for several entries in one round trip (one script each, in order:
        a data with several unattached recipients, or a burst). Each is all-or-nothing on
        its own; the results are in the order of ``requests``."""
        if not requests:
            return []
        durability = durability_of(self._redis)
        if self._keys.cluster and not durability.replicas:
            # A cluster client refuses scripts in a pipeline; one call after the other
            # keeps the order (the ids of one endpoint are its arrival order). With WAIT,
            # replicated() sends them in order on one connection of the {relay} node.
            return [
                _hold_result(
                    await self._hold(
                        keys=self._reports_key,
                        args=self._hold_args(
                            r.endpoint,
                            r.domain,
                            r.payload,
                            now=r.now,
                            deadline=r.deadline,
                            limits=limits,
                            report_at=r.report_at,
                        ),
                    )
                )
                for r in requests
            ]

        def call(request: HoldRequest) -> Callable[[Any], Awaitable[Any]]:
            args = self._hold_args(
                request.endpoint,
                request.domain,
                request.payload,
                now=request.now,
                deadline=request.deadline,
                limits=limits,
                report_at=request.report_at,
            )
            return lambda pipe: self._hold(keys=self._reports_key, args=args, client=pipe)

        results = await replicated(
            self._redis,
            durability,
            [call(request) for request in requests],
            keys=[self._keys.held_queue(requests[0].endpoint)],
        )
        return [_hold_result(result) for result in results]

    async def read(self, endpoint: str, *, after: int = 0, limit: int = 100) -> list[HeldEntry]:
        """Up to ``limit`` entries held for ``endpoint`` with an id above ``after``, in
        arrival order. Entries stay held until :meth:`ack`; entries whose deadline has
        passed are still listed (check ``deadline``; :meth:`ack` them and report)."""
        flat = await self._read(
            keys=self._reports_key, args=[*self._common, endpoint, after, limit]
        )
        return [_entry(endpoint, *flat[i : i + 4]) for i in range(0, len(flat), 4)]

    async def ack(self, endpoint: str, ids: Sequence[int]) -> int:
        """Remove delivered (or dropped) entries by id; idempotent. Returns how many were
        still held."""
        if not ids:
            return 0
        return int(await self._ack(keys=self._reports_key, args=[*self._common, endpoint, *ids]))

    async def expire(self, now: int, *, limit: int = 1000) -> list[HeldEntry]:
        """Remove up to ``limit`` entries (all endpoints) whose deadline is <= ``now``,
        earliest first, and return them (for the 550 timing error reports)."""
        flat = await self._expire(keys=self._reports_key, args=[*self._common, now, limit])
        return _entries(flat)

    async def due_reports(self, now: int, *, limit: int = 1000) -> list[HeldEntry]:
        """Take the held entries (all endpoints) whose transient timing report is due
        (``report_at <= now``): each is returned once, to one caller, and stays held.
        Send their 350 and deliver them later with reportAfter 0
        (:func:`apexmesh.apex.timing.mark_report_after_fired`)."""
        flat = await self._due_reports(keys=self._reports_key, args=[*self._common, now, limit])
        return _entries(flat)

    async def next_report(self) -> int | None:
        """The earliest due time of a held entry's transient timing report, None if none."""
        found = await self._redis.zrange(self._keys.held_report_after(), 0, 0, withscores=True)
        return int(found[0][1]) if found else None

    async def next_deadline(self) -> int | None:
        """The earliest hold deadline (ms), None when nothing held has one: the time to
        call :meth:`expire` next."""
        found = await self._redis.zrange(self._keys.held_deadlines(), 0, 0, withscores=True)
        return int(found[0][1]) if found else None

    async def usage(self, endpoint: str) -> tuple[int, int]:
        """(count, bytes) held for ``endpoint``."""
        count, size = await self._redis.hmget(self._keys.held_usage(endpoint), "count", "bytes")
        return int(count or 0), int(size or 0)

    async def stats(self, domain: str, now: int) -> HeldStats:
        """Count, bytes and oldest held age of one domain (gauges: the two reads need
        not be one transaction, and on a cluster a transaction pipeline costs redis-py
        8.2 a new thread and event loop per command, blocking the caller's loop: a
        quarter of a relay's CPU in the cluster topics bench, issue #30)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hmget(self._keys.held_domain(domain), "count", "bytes")
            pipe.zrange(self._keys.held_since(domain), 0, 0, withscores=True)
            (count, size), oldest = await pipe.execute()
        return HeldStats(
            domain=domain,
            count=int(count or 0),
            bytes=int(size or 0),
            oldest_age_ms=now - int(oldest[0][1]) if oldest else None,
        )

    async def by_endpoint(
        self, domain: str, now: int, *, limit: int = 10_000
    ) -> list[EndpointHeld]:
        """The endpoints of ``domain`` with held data, oldest first, read from the
        ``held_since`` index (at most its ``limit`` oldest entries) and each endpoint's
        usage (its quota counters)."""
        oldest: dict[str, int] = {}
        since = await self._redis.zrange(
            self._keys.held_since(domain), 0, limit - 1, withscores=True
        )
        for pair in since:
            member, score = pair[0], pair[1]
            endpoint = _text(member).partition(" ")[2]
            oldest.setdefault(endpoint, int(score))
        if not oldest:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for endpoint in oldest:
                pipe.hmget(self._keys.held_usage(endpoint), "count", "bytes")
            usages = await pipe.execute()
        return [
            EndpointHeld(
                endpoint=endpoint,
                count=int(count or 0),
                bytes=int(size or 0),
                oldest_age_ms=max(0, now - held_at),
            )
            for (endpoint, held_at), (count, size) in zip(oldest.items(), usages, strict=True)
        ]

    async def domains(self) -> list[str]:
        """Domains that have held data at some time (for metrics labels)."""
        return sorted(_text(d) for d in await self._redis.smembers(self._keys.held_domains()))

    async def claim_drain(self, endpoint: str, owner: str) -> str | None:
        """Become (or stay, renewing the lease) the one drainer of ``endpoint``: None on
        success, else the current drainer's owner token."""
        holder = await self._claim(
            keys=[self._keys.held_drain(endpoint)], args=[owner, self.lease_ms]
        )
        return _text(holder) or None

    async def release_drain(self, endpoint: str, owner: str) -> bool:
        """Stop draining ``endpoint`` (no effect on another owner's lease)."""
        return bool(await self._release(keys=[self._keys.held_drain(endpoint)], args=[owner]))


__all__ = [
    "DOMAIN_BYTES",
    "DOMAIN_COUNT",
    "ENDPOINT_BYTES",
    "ENDPOINT_COUNT",
    "EndpointHeld",
    "HeldEntry",
    "HoldRequest",
    "HeldStats",
    "HeldStore",
    "Refused",
]
