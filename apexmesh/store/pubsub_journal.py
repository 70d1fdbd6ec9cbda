"""The journal of the pubsub service's in-progress work, and the pods whose liveness
decides who redoes it (draft-schwartz-apex-pubsub-02 section 4: "information about
in-progress operations in persistent storage").

What an operation must still do once its change is committed (replies, cancels of ended
leases, presence tuples, access entries, announcements on the well-known topics) is a
:class:`JournalEntry` in the domain's journal HASH (``Keys.pubsub_journal``), written in
the same script as the change (:meth:`apexmesh.store.pubsub.PubsubStore.commit`) and
removed once done (:meth:`JournalStore.done`). Each entry names the pod that wrote it;
a pod keeps a lease key alive (:meth:`JournalStore.heartbeat`), and the leader of the
domain (the lock of :meth:`JournalStore.lead`) redoes the entries of pods whose lease
lapsed (:meth:`JournalStore.orphans`). The work itself is
:class:`services.pubsub.journal.JournalWorker`'s.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from redis.asyncio import Redis

from apexmesh.store.keys import Keys

#: A live pod's journal entry is taken over only when it is this many times older than
#: the retry delay (its pod keeps failing); a dead pod's entries at once.
STUCK_FACTOR: Final = 6

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
    #: Publish ``content`` on the well-known ``topic`` (draft-wyman 6.2.2, 6.3).
    ANNOUNCE = "announce"


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


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class JournalStore:
    """The journal, pod leases and leader lock of one deployment, as seen by the pod
    ``pod_id`` (the base of :class:`apexmesh.store.pubsub.PubsubStore`)."""

    def __init__(self, redis: Redis, keys: Keys, pod_id: str) -> None:
        self._redis = redis
        self._keys = keys
        #: The client and key scheme, for the stores beside this one (cached messages).
        self.redis = redis
        self.keys = keys
        self.pod_id = pod_id
        self._lead = redis.register_script(_LEAD)
        self._resign = redis.register_script(_RESIGN)

    # ------------------------------------------------------------------ the journal

    async def journal(self, domain: str, entries: Iterable[JournalEntry], now_ms: int) -> None:
        """Journal work that belongs to no change (a forwarded operation, a refusal)."""
        items = [(e.id, e.encode(self.pod_id, now_ms)) for e in entries]
        if items:
            await self._redis.hset(
                self._keys.pubsub_journal(domain), items=[x for i in items for x in i]
            )

    async def done(self, domain: str, *entry_ids: str) -> None:
        """The work of these entries is done: forget them."""
        if entry_ids:
            await self._redis.hdel(self._keys.pubsub_journal(domain), *entry_ids)

    async def pending(self, domain: str) -> list[JournalEntry]:
        """The domain's journal: work accepted and not yet done (sends, publications
        still being forwarded), for the admin API's backlog figures."""
        raw = await self._redis.hgetall(self._keys.pubsub_journal(domain))
        return [JournalEntry.decode(_text(k), _text(v)) for k, v in raw.items()]

    async def pending_count(self, domain: str) -> int:
        """How many entries the domain's journal holds (O(1): the dashboard's summary,
        and whether :meth:`pending` is worth reading at all)."""
        return int(await self._redis.hlen(self._keys.pubsub_journal(domain)))

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


__all__ = ["STUCK_FACTOR", "JournalEntry", "JournalKind", "JournalStore", "new_entry"]
