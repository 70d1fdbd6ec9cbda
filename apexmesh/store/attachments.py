"""Attachments in Redis: which relay pod holds which endpoint (RFC 3340 section 4.4.1).

Every relay pod of a domain can receive data for any endpoint of the domain (RFC 3340
section 6), so the attachment of an endpoint, made on one pod, must be visible to all:
``attachment(endpoint) -> pod id``, claimed atomically (step 5: a second attach of the
same endpoint anywhere in the domain gets 554) and held under a lease. The holding pod
renews its leases while it lives; a pod that dies stops renewing and its endpoints become
free within one lease time, so they can attach again on another pod.

Layout of the keys is in :mod:`apexmesh.store.keys`. Every multi-step change is one Lua
script, so a claim, a renewal or a release can never half-happen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final

from redis.asyncio import Redis

from apexmesh.store.batching import Coalescer
from apexmesh.store.keys import Keys

# KEYS: pod set. ARGV: pod id, lease ms, attachment key prefix, pod key prefix, pod key
# suffix, then (operation, endpoint) pairs, done in order. Returns one text per pair:
# claim: "" when claimed (or already held by this pod), else the holder's pod id;
# release: "1" when this pod's attachment was released, else "0";
# locate: "" when not attached, else "<pod id>\n<address>" (address "" when the holder's
# own lease ran out).
_BATCH: Final = """
local out = {}
for i = 6, #ARGV, 2 do
    local op, endpoint = ARGV[i], ARGV[i + 1]
    local key = ARGV[3] .. endpoint
    local holder = redis.call('GET', key)
    if op == 'claim' then
        if holder and holder ~= ARGV[1] then
            table.insert(out, holder)
        else
            redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
            redis.call('SADD', KEYS[1], endpoint)
            table.insert(out, '')
        end
    elseif op == 'release' then
        redis.call('SREM', KEYS[1], endpoint)
        if holder == ARGV[1] then
            redis.call('DEL', key)
            table.insert(out, '1')
        else
            table.insert(out, '0')
        end
    elseif holder then
        local address = redis.call('GET', ARGV[4] .. holder .. ARGV[5])
        table.insert(out, holder .. '\\n' .. (address or ''))
    else
        table.insert(out, '')
    end
end
return out
"""

# KEYS: pod set, pod address. ARGV: pod id, lease ms, key prefix for attachments, address,
# SSCAN cursor, chunk size. Renews the pod's address and the attachments of one SSCAN
# step that it still holds; forgets the others. Returns {next cursor, renewed}: one chunk
# per call, so renewing 100,000 attachments never blocks Redis for long.
_RENEW: Final = """
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[2])
local step = redis.call('SSCAN', KEYS[1], ARGV[5], 'COUNT', ARGV[6])
local renewed = 0
for _, endpoint in ipairs(step[2]) do
    local key = ARGV[3] .. endpoint
    if redis.call('GET', key) == ARGV[1] then
        redis.call('PEXPIRE', key, ARGV[2])
        renewed = renewed + 1
    else
        redis.call('SREM', KEYS[1], endpoint)
    end
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {step[1], renewed}
"""

# KEYS: pod set. ARGV: pod id, key prefix for attachments, chunk size. Releases up to a
# chunk of the pod's attachments; returns {released, members left}.
_RELEASE_ALL: Final = """
local released = 0
for _, endpoint in ipairs(redis.call('SPOP', KEYS[1], ARGV[3])) do
    local key = ARGV[2] .. endpoint
    if redis.call('GET', key) == ARGV[1] then
        redis.call('DEL', key)
        released = released + 1
    end
end
return {released, redis.call('SCARD', KEYS[1])}
"""

#: Attachments renewed or released per script call (each call holds Redis ~1 ms).
CHUNK: Final = 2_000


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class AttachmentRegistry:
    """The domain-wide attachment table as seen by one relay pod.

    Claims, releases and lookups are coalesced (:class:`~apexmesh.store.batching.Coalescer`,
    one ordered queue): a thousand endpoints attaching at once, or ten thousand sessions
    closing, cost a few script calls, each doing its operations in the order asked.
    """

    def __init__(self, redis: Redis, keys: Keys, pod_id: str, *, lease_ms: int = 10_000) -> None:
        self._redis = redis
        self._keys = keys
        self.pod_id = pod_id
        self.lease_ms = lease_ms
        self._attachment_prefix = keys.attachment("")
        pod_key = keys.relay_pod("\x00")
        self._pod_prefix, self._pod_suffix = pod_key.split("\x00")
        self._batch = redis.register_script(_BATCH)
        self._renew = redis.register_script(_RENEW)
        self._release_all = redis.register_script(_RELEASE_ALL)
        self._ops: Coalescer[tuple[str, str], str] = Coalescer("attachments", self._flush)

    async def _flush(self, ops: Sequence[tuple[str, str]]) -> list[str]:
        answer = await self._batch(
            keys=[self._keys.pod_attachments(self.pod_id)],
            args=[
                self.pod_id,
                self.lease_ms,
                self._attachment_prefix,
                self._pod_prefix,
                self._pod_suffix,
                *(x for op in ops for x in op),
            ],
        )
        return [_text(item) for item in answer]

    async def claim(self, endpoint: str) -> str | None:
        """Attach ``endpoint`` to this pod; return None on success, else the holder's id."""
        return await self._ops.call(("claim", endpoint)) or None

    async def release(self, endpoint: str) -> bool:
        """Release this pod's attachment of ``endpoint`` (no effect on another pod's)."""
        return await self._ops.call(("release", endpoint)) == "1"

    async def renew(self, address: str) -> int:
        """Renew this pod's address and all its attachments for one more lease (in
        chunks of :data:`CHUNK`); the number renewed."""
        cursor, renewed = "0", 0
        while True:
            step = await self._renew(
                keys=[self._keys.pod_attachments(self.pod_id), self._keys.relay_pod(self.pod_id)],
                args=[self.pod_id, self.lease_ms, self._attachment_prefix, address, cursor, CHUNK],
            )
            cursor = _text(step[0])
            renewed += int(step[1])
            if cursor == "0":
                return renewed

    async def locate(self, endpoint: str) -> tuple[str, str] | None:
        """(pod id, gRPC address) of the pod holding ``endpoint``, or None if unattached.

        The address is "" when the holder's own lease ran out (it is dying): callers treat
        that as not attached.
        """
        found = await self._ops.call(("locate", endpoint))
        if not found:
            return None
        pod, _, address = found.partition("\n")
        return pod, address

    async def locate_many(self, endpoints: Sequence[str]) -> list[tuple[str, str] | None]:
        """:meth:`locate` for many endpoints (one batch for all of them)."""
        return list(await asyncio.gather(*(self.locate(e) for e in endpoints)))

    async def release_all(self) -> int:
        """Release every attachment of this pod and forget its address (clean shutdown)."""
        released = 0
        while True:
            step = await self._release_all(
                keys=[self._keys.pod_attachments(self.pod_id)],
                args=[self.pod_id, self._attachment_prefix, CHUNK],
            )
            released += int(step[0])
            if int(step[1]) == 0:
                break
        await self._redis.delete(self._keys.relay_pod(self.pod_id))
        return released

    async def aclose(self) -> None:
        """Fail what is still queued (the pod is stopping)."""
        await self._ops.aclose()


__all__ = ["CHUNK", "AttachmentRegistry"]
