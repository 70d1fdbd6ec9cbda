"""Access entries in Redis (RFC 3341 section 4: "An implementation of the service must
maintain information about access entries in persistent storage").

One hash per owner holds its explicit entries (layout in :mod:`apexmesh.store.keys`). The
set operation of RFC 3341 section 4.4 is a compare-and-set on ``lastUpdate`` (steps 4-9):
it runs as one Lua script, which also increments the global version counter and publishes
``"<version> <owner>"`` on the change channel, so a change and its notification cannot be
separated and caches can never miss a committed change without noticing a version gap.
Reads of an owner's entries return the version they were read at (MULTI), which is what
lets a cache refuse to store a decision computed from data older than an invalidation.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from redis.asyncio import Redis

from apexmesh.apex.access import (
    AccessEntry,
    ActionSet,
    ActorPattern,
    OwnerRules,
    format_timestamp,
    next_timestamp,
    parse_timestamp,
)
from apexmesh.apex.endpoint import Endpoint
from apexmesh.store.keys import Keys

# KEYS: entries hash, owners set, version counter.
# ARGV: actor field, expected lastUpdate ("" = must be absent), new value ("" = delete),
#       change channel, owner.
# Returns {outcome, version}; outcome 0 = changed, 1 = missing, 2 = stale, 3 = exists.
_CHANGE_SCRIPT: Final = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
local expected = ARGV[2]
if current then
    local stamp = string.match(current, '^(%S+)')
    if expected == '' then
        return {3, tonumber(redis.call('GET', KEYS[3]) or '0')}
    end
    if stamp ~= expected then
        return {2, tonumber(redis.call('GET', KEYS[3]) or '0')}
    end
elseif expected ~= '' then
    return {1, tonumber(redis.call('GET', KEYS[3]) or '0')}
end
if ARGV[3] == '' then
    redis.call('HDEL', KEYS[1], ARGV[1])
    if redis.call('HLEN', KEYS[1]) == 0 then
        redis.call('SREM', KEYS[2], ARGV[5])
    end
else
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
    redis.call('SADD', KEYS[2], ARGV[5])
end
local version = redis.call('INCR', KEYS[3])
redis.call('PUBLISH', ARGV[4], version .. ' ' .. ARGV[5])
return {0, version}
"""


# KEYS: version counter, then each owner's entries hash. Returns {version, fields and
# values of each hash, flat, as HGETALL gives them}.
_LOAD_SCRIPT: Final = """
local loaded = {tonumber(redis.call('GET', KEYS[1]) or '0')}
for index = 2, #KEYS do
    loaded[index] = redis.call('HGETALL', KEYS[index])
end
return loaded
"""


class ChangeOutcome(enum.Enum):
    """Result of :meth:`AccessEntryStore.change` (RFC 3341 section 4.4 steps 5-9)."""

    CREATED = "created"  #: step 6
    DELETED = "deleted"  #: step 8
    UPDATED = "updated"  #: step 9
    MISSING = "missing"  #: step 5: lastUpdate given, no entry (reply 555)
    STALE = "stale"  #: step 7: lastUpdate differs (reply 555)
    EXISTS = "exists"  #: step 7: entry exists, no lastUpdate given (reply 555)


@dataclass(frozen=True, slots=True)
class ChangeResult:
    outcome: ChangeOutcome
    #: The entry as stored (or, for a deletion, without actions); None when refused.
    entry: AccessEntry | None
    #: The access version after the call.
    version: int


def encode_value(entry: AccessEntry) -> str:
    """The hash value of a stored entry: ``"<lastUpdate> <actions...>"``."""
    if entry.last_update is None or entry.actions is None:
        raise ValueError("stored entries have actions and a lastUpdate")
    return f"{format_timestamp(entry.last_update)} {entry.actions}".rstrip(" ")


def decode_entry(owner: Endpoint, actor: str, value: str) -> AccessEntry:
    """Rebuild an entry from its hash field and value (written by :func:`encode_value`)."""
    stamp, _, actions = value.partition(" ")
    return AccessEntry(
        owner,
        ActorPattern.parse(actor),
        ActionSet(frozenset(actions.split())),
        parse_timestamp(stamp),
    )


class AccessEntryStore:
    """Repository of access entries; the only writer of the ``access:*`` keys."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self._redis = redis
        self._keys = keys
        self._change = redis.register_script(_CHANGE_SCRIPT)
        self._load = redis.register_script(_LOAD_SCRIPT)

    @property
    def keys(self) -> Keys:
        return self._keys

    async def load(self, owner: Endpoint) -> tuple[OwnerRules, int]:
        """All explicit entries of ``owner`` compiled into rules, and the version read."""
        (rules,), version = await self.load_many([owner])
        return rules, version

    async def load_many(self, owners: Sequence[Endpoint]) -> tuple[list[OwnerRules], int]:
        """The rules of each of ``owners`` and the version they were read at, in one
        atomic script: one round trip for a whole ``CheckMany`` (every ``access:*`` key is
        in one slot group, so a cluster runs it on one node), where one read per owner
        made a burst of cold checks cost a round trip each.

        A script, not a MULTI pipeline: redis-py's cluster client (8.2) queues each
        command of a transaction pipeline through a private event loop in a new thread,
        blocking the caller's loop meanwhile; that was half of the access service's CPU
        in the cluster topics bench (issue #30)."""
        keys = [self._keys.access_version()]
        keys.extend(self._keys.access_entries(str(owner)) for owner in owners)
        version, *raws = await self._load(keys=keys)
        rules = [
            OwnerRules.build(
                owner,
                [
                    decode_entry(owner, _text(raw[index]), _text(raw[index + 1]))
                    for index in range(0, len(raw), 2)
                ],
            )
            for owner, raw in zip(owners, raws, strict=True)
        ]
        return rules, int(version or 0)

    async def get(self, owner: Endpoint, actor: ActorPattern) -> AccessEntry | None:
        """The explicit entry whose actor is identical to ``actor``, if any."""
        value = await self._redis.hget(self._keys.access_entries(str(owner)), str(actor))
        if value is None:
            return None
        return decode_entry(owner, str(actor), _text(value))

    async def version(self) -> int:
        value = await self._redis.get(self._keys.access_version())
        return int(value or 0)

    async def owners(self) -> list[str]:
        members = await self._redis.smembers(self._keys.access_owners())
        return sorted(_text(member) for member in members)

    async def change(
        self,
        owner: Endpoint,
        actor: ActorPattern,
        actions: ActionSet | None,
        expected: datetime | None,
        now: datetime,
    ) -> ChangeResult:
        """Create, replace or delete one entry atomically (RFC 3341 section 4.4 steps 4-9).

        ``expected`` is the ``lastUpdate`` the caller read (None to create); ``actions``
        None deletes. A created entry without actions (step 6 with no ``actions``) is
        stored with the empty set, which denies everything.
        """
        expected_text = "" if expected is None else format_timestamp(expected)
        if actions is None and expected is None:
            actions = ActionSet(frozenset())
        stamp = next_timestamp(now, expected)
        entry = AccessEntry(owner, actor, actions, stamp)
        value = "" if actions is None else encode_value(entry)
        keys = self._keys
        outcome_code, version = await self._change(
            keys=[
                keys.access_entries(str(owner)),
                keys.access_owners(),
                keys.access_version(),
            ],
            args=[
                str(actor),
                expected_text,
                value,
                keys.access_changes(),
                str(owner),
            ],
        )
        refused = {1: ChangeOutcome.MISSING, 2: ChangeOutcome.STALE, 3: ChangeOutcome.EXISTS}
        if int(outcome_code) in refused:
            return ChangeResult(refused[int(outcome_code)], None, int(version))
        if actions is None:
            # The notification of a deletion names the entry as it was (RFC 3341 2.3).
            deleted = AccessEntry(owner, actor, None, expected)
            return ChangeResult(ChangeOutcome.DELETED, deleted, int(version))
        outcome = ChangeOutcome.CREATED if expected is None else ChangeOutcome.UPDATED
        return ChangeResult(outcome, entry, int(version))

    async def seed(self, entries: Iterable[AccessEntry], now: datetime) -> int:
        """Create each entry that does not exist yet; return how many were created.

        Existing entries are left alone, so an operator's later changes over APEX survive
        a restart with the same seed file.
        """
        created = 0
        for entry in entries:
            result = await self.change(entry.owner, entry.actor, entry.actions, None, now)
            if result.outcome is ChangeOutcome.CREATED:
                created += 1
        return created


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


__all__ = [
    "AccessEntryStore",
    "ChangeOutcome",
    "ChangeResult",
    "decode_entry",
    "encode_value",
]
