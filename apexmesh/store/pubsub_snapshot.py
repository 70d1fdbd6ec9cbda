"""The compact catalogue snapshot in Redis, and a pod's catalogue loaded from it.

The Spark snapshot job (``spark/snapshot.py``, docs/snapshot.md) folds the event log into
the catalogue (:mod:`apexmesh.pubsub.catalogue`) and writes it back here so that pods
need not replay the log, and so that the log can be trimmed:

- **write, then switch.** A snapshot is written under keys of a new *generation*
  (:meth:`SnapshotStore.write`); then one script (:data:`_SWITCH`) makes it the current
  one by rewriting the ``pubsub:snapshot`` HASH and gives the previous generation's keys
  a grace period (PEXPIRE) instead of deleting them. A reader takes the HASH, then scans
  the generation it names, and checks the counts the HASH announced: it sees the old or
  the new snapshot whole, never a mix (a RENAME onto the key being scanned would hand a
  reader the rest of its scan from another snapshot);
- **or change in place.** An incremental run of the job (docs/snapshot.md
  "Incremental runs") does not write a whole generation: it stages its changes (one
  field per topic or subscription it touched, empty for one that is gone) under keys
  of their own (:meth:`SnapshotStore.stage`), then one script applies them to the
  current generation and rewrites the HASH (:data:`_APPLY`), only if the HASH still
  names the snapshot the changes were made against. A reader that straddles it sees
  the HASH change and reads again. The rows are then the catalogue's *state* at the
  position (a subscription stays until its end event, whatever its lease or topic),
  which readers judge at their time (:meth:`Catalogue.live`); the job's next full
  write leaves only what lives;
- **trim.** Only after the switch does the job trim the log, up to the position the new
  snapshot covers (:meth:`SnapshotStore.trim`, recorded as ``trimmed``); so whatever is
  gone from the log is in the current snapshot;
- **a pod's catalogue** (:class:`CatalogueSource`): the latest snapshot plus the events
  after its position; with no snapshot, the whole log (as before snapshots existed).
  Loaded in the background (never in the way of readiness) and caught up from the log on
  each read. A catalogue whose position the log no longer follows (trimmed past it)
  loads the snapshot again.

The delivery path does not use this: each pod's subscriber cache
(:mod:`apexmesh.store.pubsub_cache`) loads the topics it publishes to from the live keys
and follows the log from then on, so it never needs the trimmed part.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from redis.asyncio import Redis

from apexmesh.aio.tasks import stop_task
from apexmesh.pubsub.catalogue import (
    Catalogue,
    SubscriptionRow,
    TopicRow,
    pack_id,
    subscription_from_json,
    subscription_to_json,
    topic_from_json,
    topic_to_json,
    unpack_id,
)
from apexmesh.store.keys import Keys

_log = logging.getLogger(__name__)

#: Fields written per HSET while a generation is written.
WRITE_BATCH: Final = 2000
#: Items asked per HSCAN and events per XRANGE while a catalogue loads.
READ_BATCH: Final = 5000
#: How long the previous generation stays readable after a switch (a reader in the
#: middle of a scan finishes it).
DEFAULT_GRACE_MS: Final = 600_000

#: How long a written generation lives unless switched to (a job that died between
#: writing and switching leaves nothing behind for long).
ABANDON_MS: Final = 6 * 3_600_000

# KEYS: snapshot hash, new topics, new subscriptions. ARGV: grace ms, old keys prefix,
# then field/value pairs of the new hash (``generation`` among them). Returns the
# previous generation ("" when none).
_SWITCH: Final = """
local old = redis.call('HGET', KEYS[1], 'generation') or ''
redis.call('PERSIST', KEYS[2])
redis.call('PERSIST', KEYS[3])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
if old ~= '' then
    for _, suffix in ipairs({':topics', ':subs'}) do
        redis.call('PEXPIRE', ARGV[2] .. old .. suffix, ARGV[1])
    end
end
return old
"""

# KEYS: snapshot hash, current topics, current subscriptions, staged topics, staged
# subscriptions. ARGV: the generation and position the changes were made against, then
# field/value pairs for the hash. A staged field's value is the row, or "" for a row to
# remove. Returns {topics, subscriptions} after the change, or false (nothing changed)
# when the hash names another snapshot.
_APPLY: Final = """
local current = redis.call('HMGET', KEYS[1], 'generation', 'position')
if current[1] ~= ARGV[1] or current[2] ~= ARGV[2] then
    return false
end
for k = 2, 3 do
    local staged = redis.call('HGETALL', KEYS[k + 2])
    for i = 1, #staged, 2 do
        if staged[i + 1] == '' then
            redis.call('HDEL', KEYS[k], staged[i])
        else
            redis.call('HSET', KEYS[k], staged[i], staged[i + 1])
        end
    end
end
redis.call('DEL', KEYS[4], KEYS[5])
local topics = redis.call('HLEN', KEYS[2])
local subscriptions = redis.call('HLEN', KEYS[3])
redis.call('HSET', KEYS[1], 'topics', topics, 'subscriptions', subscriptions, unpack(ARGV, 3))
return {topics, subscriptions}
"""

#: The separator of a subscription's identity in its field (endpoints, topics and
#: decimal ids never contain a newline).
_SEP: Final = "\n"


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    """What the ``pubsub:snapshot`` HASH says of the current snapshot."""

    generation: str
    position: int
    snapshot_ms: int
    topics: int
    subscriptions: int
    schema: int
    trimmed: int = 0
    storage: str = ""

    def fields(self) -> dict[str, str]:
        return {
            "generation": self.generation,
            "position": unpack_id(self.position),
            "snapshot_ms": str(self.snapshot_ms),
            "topics": str(self.topics),
            "subscriptions": str(self.subscriptions),
            "schema": str(self.schema),
            "trimmed": unpack_id(self.trimmed),
            "storage": self.storage,
        }

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SnapshotMeta:
        return cls(
            generation=raw["generation"],
            position=pack_id(raw["position"]),
            snapshot_ms=int(raw["snapshot_ms"]),
            topics=int(raw["topics"]),
            subscriptions=int(raw["subscriptions"]),
            schema=int(raw["schema"]),
            trimmed=pack_id(raw.get("trimmed", "0-0") or "0-0"),
            storage=raw.get("storage", ""),
        )


class SnapshotError(RuntimeError):
    """A snapshot could not be read whole (it was replaced twice during the read)."""


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def next_id(packed: int) -> str:
    """The smallest stream id after ``packed`` (XTRIM MINID keeps ids at or above it)."""
    ms, _, seq = unpack_id(packed).partition("-")
    return f"{ms}-{int(seq) + 1}"


class SnapshotStore:
    """Reads, writes and switches the compact snapshot; trims the log it covers."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self._redis = redis
        self._keys = keys
        self._switch = redis.register_script(_SWITCH)
        self._apply = redis.register_script(_APPLY)

    # ------------------------------------------------------------------ writing

    async def write(
        self,
        generation: str,
        topics: Iterable[TopicRow],
        subscriptions: Iterable[SubscriptionRow],
    ) -> tuple[int, int]:
        """Write a generation's keys (not yet visible to readers); (topics, subscriptions)
        written. A generation left half-written by a job that died is never switched to
        and is removed by :meth:`discard`."""
        keys = self._keys
        topic_key = keys.pubsub_snapshot_topics(generation)
        sub_key = keys.pubsub_snapshot_subscriptions(generation)
        await self._redis.delete(topic_key, sub_key)
        written_topics = await self._write_rows(
            topic_key, ((f"{t.domain} {t.topic}", topic_to_json(t)) for t in topics)
        )
        written_subs = await self._write_rows(
            sub_key,
            ((_SEP.join(s.identity), subscription_to_json(s)) for s in subscriptions),
        )
        for key in (topic_key, sub_key):
            await self._redis.pexpire(key, ABANDON_MS)
        return written_topics, written_subs

    async def _write_rows(self, key: str, rows: Iterable[tuple[str, str]]) -> int:
        count = 0
        batch: dict[str, str] = {}
        async with self._redis.pipeline(transaction=False) as pipe:
            for name, value in rows:
                batch[name] = value
                if len(batch) >= WRITE_BATCH:
                    pipe.hset(key, items=[x for pair in batch.items() for x in pair])
                    count += len(batch)
                    batch = {}
                    if len(pipe) >= 8:
                        await pipe.execute()
            if batch:
                pipe.hset(key, items=[x for pair in batch.items() for x in pair])
                count += len(batch)
            await pipe.execute()
        return count

    async def switch(self, meta: SnapshotMeta, grace_ms: int = DEFAULT_GRACE_MS) -> str:
        """Make ``meta.generation`` the current snapshot in one script; returns the
        previous generation, whose keys expire after ``grace_ms``."""
        prefix = self._keys.pubsub_snapshot_topics("\x00").split("\x00")[0]
        pairs = [x for item in meta.fields().items() for x in item]
        old = await self._switch(
            keys=[
                self._keys.pubsub_snapshot(),
                self._keys.pubsub_snapshot_topics(meta.generation),
                self._keys.pubsub_snapshot_subscriptions(meta.generation),
            ],
            args=[str(grace_ms), prefix, *pairs],
        )
        return _text(old)

    async def discard(self, generation: str) -> None:
        """Remove a generation that was never switched to."""
        await self._redis.delete(
            self._keys.pubsub_snapshot_topics(generation),
            self._keys.pubsub_snapshot_subscriptions(generation),
        )

    async def stage(
        self,
        staging: str,
        topics: Iterable[tuple[TopicRow, bool]],
        subscriptions: Iterable[tuple[SubscriptionRow, bool]],
    ) -> tuple[int, int]:
        """Stage changes under ``staging``'s keys (not visible to readers): each topic
        or subscription with whether it is still there (``False``: removed). Staged
        keys left by a job that died expire by themselves. (topics, subscriptions)
        staged."""
        keys = self._keys
        topic_key = keys.pubsub_snapshot_topics(staging)
        sub_key = keys.pubsub_snapshot_subscriptions(staging)
        await self._redis.delete(topic_key, sub_key)
        staged_topics = await self._write_rows(
            topic_key,
            ((f"{t.domain} {t.topic}", topic_to_json(t) if there else "") for t, there in topics),
        )
        staged_subs = await self._write_rows(
            sub_key,
            (
                (_SEP.join(s.identity), subscription_to_json(s) if there else "")
                for s, there in subscriptions
            ),
        )
        for key in (topic_key, sub_key):
            await self._redis.pexpire(key, ABANDON_MS)
        return staged_topics, staged_subs

    async def apply(
        self, staging: str, against: SnapshotMeta, meta: SnapshotMeta
    ) -> SnapshotMeta | None:
        """Apply what :meth:`stage` staged to the current generation and make ``meta``
        (with the counts the change leaves) the HASH, in one script, when the HASH is
        still ``against``'s; the new meta, or None when it was not (nothing changed)."""
        if meta.generation != against.generation:
            raise ValueError("changes apply in place: the generation stays the same")
        keys = self._keys
        fields = meta.fields()
        del fields["topics"], fields["subscriptions"]
        found = await self._apply(
            keys=[
                keys.pubsub_snapshot(),
                keys.pubsub_snapshot_topics(against.generation),
                keys.pubsub_snapshot_subscriptions(against.generation),
                keys.pubsub_snapshot_topics(staging),
                keys.pubsub_snapshot_subscriptions(staging),
            ],
            args=[
                against.generation,
                unpack_id(against.position),
                *(x for item in fields.items() for x in item),
            ],
        )
        if not found:
            return None
        topics, subscriptions = (int(n) for n in found)
        return SnapshotMeta(**{**asdict(meta), "topics": topics, "subscriptions": subscriptions})

    async def trim(self, position: int) -> int:
        """Drop the log's entries at or before ``position`` and record it as trimmed;
        the number of entries dropped. Call only once a snapshot covering ``position``
        is current."""
        dropped = await self._redis.xtrim(
            self._keys.pubsub_events(), minid=next_id(position), approximate=False
        )
        await self._redis.hset(self._keys.pubsub_snapshot(), "trimmed", unpack_id(position))
        return int(dropped)

    # ------------------------------------------------------------------ reading

    async def meta(self) -> SnapshotMeta | None:
        raw = await self._redis.hgetall(self._keys.pubsub_snapshot())
        if not raw or "generation" not in {_text(k) for k in raw}:
            return None
        return SnapshotMeta.parse({_text(k): _text(v) for k, v in raw.items()})

    async def _scan(self, key: str) -> AsyncIterator[tuple[str, str]]:
        async for name, value in self._redis.hscan_iter(key, count=READ_BATCH):
            yield _text(name), _text(value)

    async def load(self, attempts: int = 3) -> Catalogue | None:
        """The current snapshot as a catalogue (None when there is none). Raises
        :class:`SnapshotError` when every attempt saw the snapshot replaced mid-read."""
        for _ in range(attempts):
            meta = await self.meta()
            if meta is None:
                return None
            catalogue = Catalogue(position=meta.position)
            async for name, value in self._scan(self._keys.pubsub_snapshot_topics(meta.generation)):
                domain, _, topic = name.partition(" ")
                catalogue.topics[(domain, topic)] = topic_from_json(domain, topic, value)
            async for name, value in self._scan(
                self._keys.pubsub_snapshot_subscriptions(meta.generation)
            ):
                parts = name.split(_SEP)
                if len(parts) != 4:
                    continue  # never written by this module
                identity = (parts[0], parts[1], parts[2], parts[3])
                catalogue.subscriptions[identity] = subscription_from_json(identity, value)
            whole = (len(catalogue.topics), len(catalogue.subscriptions)) == (
                meta.topics,
                meta.subscriptions,
            )
            if whole and await self.meta() == meta:
                return catalogue
        raise SnapshotError("the snapshot was replaced during every read")

    async def catch_up(self, catalogue: Catalogue, limit: int | None = None) -> int:
        """Fold the log's events after the catalogue's position into it; the number
        folded. Stops after ``limit`` events when given."""
        key = self._keys.pubsub_events()
        done = 0
        while limit is None or done < limit:
            entries: Any = await self._redis.xrange(
                key, min=f"({unpack_id(catalogue.position)}", count=READ_BATCH
            )
            if not entries:
                break
            for entry_id, fields in entries:
                event = {_text(k): _text(v) for k, v in (fields or {}).items()}
                catalogue.apply(pack_id(_text(entry_id)), event)
                done += 1
            if len(entries) < READ_BATCH:
                break
        return done

    async def catalogue(self) -> tuple[Catalogue, bool]:
        """The current catalogue: the snapshot plus later events, or the whole log when
        there is no snapshot; and whether a snapshot was used."""
        catalogue = await self.load()
        used = catalogue is not None
        if catalogue is None:
            catalogue = Catalogue()
        await self.catch_up(catalogue)
        return catalogue, used


class CatalogueSource:
    """A pod's whole catalogue, loaded in the background and caught up on each read.

    :meth:`start` begins the load and returns at once; :meth:`current` waits for it
    and folds the events since. ``clock`` gives milliseconds (the leases' "now").
    """

    def __init__(self, store: SnapshotStore, clock: Callable[[], int]) -> None:
        self._store = store
        self._clock = clock
        self._catalogue: Catalogue | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        #: True when the catalogue came from a snapshot (not a replay of the log).
        self.from_snapshot = False
        #: Seconds the first load took (a figure of docs/snapshot.md), None until done.
        self.load_seconds: float | None = None

    def start(self) -> None:
        """Begin loading in the background (again, when an earlier load failed)."""
        task = self._task
        if task is None or (task.done() and (task.cancelled() or task.exception())):
            self._task = asyncio.create_task(self._load(), name="pubsub-catalogue-load")

    async def _load(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with self._lock:
            self._catalogue, self.from_snapshot = await self._store.catalogue()
        self.load_seconds = loop.time() - started

    @property
    def loaded(self) -> bool:
        return self._catalogue is not None

    async def current(self) -> Catalogue:
        """The catalogue as of the log's latest event (waits for the first load; a
        failed load raises here and is started again by the next call)."""
        self.start()
        task = self._task
        if task is None:  # pragma: no cover - set by start()
            raise RuntimeError("catalogue not loading")
        await asyncio.shield(task)
        async with self._lock:
            catalogue = self._catalogue
            if catalogue is None:  # pragma: no cover - set by a finished load
                raise RuntimeError("catalogue not loaded")
            meta = await self._store.meta()
            if meta is not None and meta.trimmed > catalogue.position:
                # The log no longer holds what follows this catalogue: start again
                # from the snapshot, which covers at least up to the trim.
                catalogue, self.from_snapshot = await self._store.catalogue()
                self._catalogue = catalogue
            else:
                await self._store.catch_up(catalogue)
            return catalogue

    async def aclose(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)


__all__ = [
    "ABANDON_MS",
    "CatalogueSource",
    "SnapshotError",
    "SnapshotMeta",
    "SnapshotStore",
    "next_id",
]
