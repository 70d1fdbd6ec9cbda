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

from typing import Final

from redis.asyncio import Redis

from apexmesh.store.keys import Keys

# KEYS: attachment, pod set. ARGV: pod id, lease ms, endpoint.
# Returns "" when claimed (or already held by this pod), else the holder's pod id.
_CLAIM: Final = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
    return holder
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return ''
"""

# KEYS: attachment, pod set. ARGV: pod id, endpoint. Returns 1 if released.
_RELEASE: Final = """
redis.call('SREM', KEYS[2], ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
end
return 0
"""

# KEYS: pod set, pod address. ARGV: pod id, lease ms, key prefix for attachments, address.
# Renews the pod's address and every attachment it still holds; forgets the others.
# Returns the number of attachments renewed.
_RENEW: Final = """
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[2])
local renewed = 0
for _, endpoint in ipairs(redis.call('SMEMBERS', KEYS[1])) do
    local key = ARGV[3] .. endpoint
    if redis.call('GET', key) == ARGV[1] then
        redis.call('PEXPIRE', key, ARGV[2])
        renewed = renewed + 1
    else
        redis.call('SREM', KEYS[1], endpoint)
    end
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return renewed
"""

# KEYS: attachment. ARGV: key prefix of pod addresses, suffix.
# Returns {pod id, address} of the holder, or {} when the endpoint is not attached.
_LOCATE: Final = """
local holder = redis.call('GET', KEYS[1])
if not holder then
    return {}
end
local address = redis.call('GET', ARGV[1] .. holder .. ARGV[2])
return {holder, address or ''}
"""

# KEYS: pod set, pod address. ARGV: pod id, key prefix for attachments.
_RELEASE_ALL: Final = """
local released = 0
for _, endpoint in ipairs(redis.call('SMEMBERS', KEYS[1])) do
    local key = ARGV[2] .. endpoint
    if redis.call('GET', key) == ARGV[1] then
        redis.call('DEL', key)
        released = released + 1
    end
end
redis.call('DEL', KEYS[1], KEYS[2])
return released
"""


class AttachmentRegistry:
    """The domain-wide attachment table as seen by one relay pod."""

    def __init__(self, redis: Redis, keys: Keys, pod_id: str, *, lease_ms: int = 10_000) -> None:
        self._redis = redis
        self._keys = keys
        self.pod_id = pod_id
        self.lease_ms = lease_ms
        self._attachment_prefix = keys.attachment("")
        pod_key = keys.relay_pod("\x00")
        self._pod_prefix, self._pod_suffix = pod_key.split("\x00")
        self._claim = redis.register_script(_CLAIM)
        self._release = redis.register_script(_RELEASE)
        self._renew = redis.register_script(_RENEW)
        self._locate = redis.register_script(_LOCATE)
        self._release_all = redis.register_script(_RELEASE_ALL)

    async def claim(self, endpoint: str) -> str | None:
        """Attach ``endpoint`` to this pod; return None on success, else the holder's id."""
        holder = await self._claim(
            keys=[self._keys.attachment(endpoint), self._keys.pod_attachments(self.pod_id)],
            args=[self.pod_id, self.lease_ms, endpoint],
        )
        text = holder.decode() if isinstance(holder, bytes) else str(holder)
        return text or None

    async def release(self, endpoint: str) -> bool:
        """Release this pod's attachment of ``endpoint`` (no effect on another pod's)."""
        released = await self._release(
            keys=[self._keys.attachment(endpoint), self._keys.pod_attachments(self.pod_id)],
            args=[self.pod_id, endpoint],
        )
        return bool(released)

    async def renew(self, address: str) -> int:
        """Renew this pod's address and all its attachments for one more lease."""
        renewed = await self._renew(
            keys=[self._keys.pod_attachments(self.pod_id), self._keys.relay_pod(self.pod_id)],
            args=[self.pod_id, self.lease_ms, self._attachment_prefix, address],
        )
        return int(renewed)

    async def locate(self, endpoint: str) -> tuple[str, str] | None:
        """(pod id, gRPC address) of the pod holding ``endpoint``, or None if unattached.

        The address is "" when the holder's own lease ran out (it is dying): callers treat
        that as not attached.
        """
        found = await self._locate(
            keys=[self._keys.attachment(endpoint)], args=[self._pod_prefix, self._pod_suffix]
        )
        if not found:
            return None
        pod, address = (item.decode() if isinstance(item, bytes) else str(item) for item in found)
        return pod, address

    async def release_all(self) -> int:
        """Release every attachment of this pod and forget its address (clean shutdown)."""
        released = await self._release_all(
            keys=[self._keys.pod_attachments(self.pod_id), self._keys.relay_pod(self.pod_id)],
            args=[self.pod_id, self._attachment_prefix],
        )
        return int(released)


__all__ = ["AttachmentRegistry"]
