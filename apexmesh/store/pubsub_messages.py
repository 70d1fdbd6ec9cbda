"""The cached messages of content-based topics (draft-wyman-apex-pubsub-00 5.2.1, 5.8).

A message published with a ``message-id`` and an expiration date other than ``0`` is
kept in its topic's HASH (``Keys.pubsub_cached``) under (publisher, message-id) until
it expires; a higher ``revision-id`` of the same message replaces it (one Lua script
compares and sets, so two pods publishing revisions at once keep the higher), a lower
one is delivered but not cached (:func:`apexmesh.pubsub.content_core.cache_action`
decides the rest). A subscribe asking ``cached`` reads the topic's live messages and
replays those its selector selects; expired ones are removed when read. A deleted
topic's cache goes in the commit that deletes it (:mod:`apexmesh.store.pubsub_changes`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from redis.asyncio import Redis

from apexmesh.store.keys import Keys

#: Messages kept per topic at most (older ones are not replaced: a store is refused).
MAX_CACHED: Final = 10_000

# KEYS: the topic's cache. ARGV: field, revision, JSON value, limit.
# Stores the value unless a revision at least as high is cached, or the cache is full.
# Returns 1 when stored.
_PUT: Final = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
    if tonumber(cjson.decode(old).revision) >= tonumber(ARGV[2]) then
        return 0
    end
elseif redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then
    return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One cached message: the envelope as published and when it expires (None: never)."""

    body: bytes
    expires_ms: int | None
    revision: int


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class MessageStore:
    """The cached messages of every topic, in Redis."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self._redis = redis
        self._keys = keys
        self._put = redis.register_script(_PUT)

    @staticmethod
    def field(publisher: str, message_id: int) -> str:
        return f"{publisher}\n{message_id}"

    async def revision(
        self, domain: str, topic: str, publisher: str, message_id: int
    ) -> int | None:
        """The revision cached under (publisher, message-id), None when none is."""
        raw = await self._redis.hget(
            self._keys.pubsub_cached(domain, topic), self.field(publisher, message_id)
        )
        if raw is None:
            return None
        return int(json.loads(_text(raw))["revision"])

    async def put(
        self,
        domain: str,
        topic: str,
        publisher: str,
        message_id: int,
        message: StoredMessage,
    ) -> bool:
        """Cache ``message`` unless a revision at least as high is cached; True if so."""
        value = json.dumps(
            {
                "revision": message.revision,
                "expires_ms": message.expires_ms,
                "body": message.body.hex(),
            }
        )
        stored = await self._put(
            keys=[self._keys.pubsub_cached(domain, topic)],
            args=[self.field(publisher, message_id), message.revision, value, MAX_CACHED],
        )
        return bool(stored)

    async def live(self, domain: str, topic: str, now_ms: int) -> list[StoredMessage]:
        """The topic's cached messages not expired at ``now_ms``, oldest revision first
        by publication order of the HASH; expired ones are removed."""
        key = self._keys.pubsub_cached(domain, topic)
        raw = await self._redis.hgetall(key)
        out: list[StoredMessage] = []
        expired: list[str] = []
        for name, value in raw.items():
            try:
                record = json.loads(_text(value))
                expires = record.get("expires_ms")
                message = StoredMessage(
                    bytes.fromhex(str(record["body"])),
                    None if expires is None else int(expires),
                    int(record["revision"]),
                )
            except (ValueError, KeyError, TypeError):
                continue
            if message.expires_ms is not None and message.expires_ms <= now_ms:
                expired.append(_text(name))
            else:
                out.append(message)
        if expired:
            await self._redis.hdel(key, *expired)
        return out

    async def drop(self, domain: str, topic: str, publisher: str, message_id: int) -> None:
        """Remove one cached message (a cancellation the service announced)."""
        await self._redis.hdel(
            self._keys.pubsub_cached(domain, topic), self.field(publisher, message_id)
        )


__all__ = ["MAX_CACHED", "MessageStore", "StoredMessage"]
