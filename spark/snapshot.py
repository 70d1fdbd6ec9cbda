"""The snapshot job: ``python -m spark.snapshot`` (docs/snapshot.md).

One run, in this order, each step safe to die in:

1. **plan** what to build from what the storage and Redis hold (``spark/plan.py``): by
   default a change layer on the previous snapshot, so that an hourly run costs what
   the events since the last one cost; a full rebuild when there is no sound previous
   snapshot (none, another format, a missing layer, a trimmed log gap); a compaction
   into a full layer when the chain of change layers is long, or when Redis is not at
   the previous snapshot;
2. **export** the closed ranges of the event log not yet exported (``spark/export.py``);
3. **fold** the new events (after the previous snapshot's position) into a change layer,
   or, for a full layer, the whole history: the previous snapshot's layers, or the
   Redis snapshot, or nothing, then every exported event after it
   (``spark/fold.py``);
4. **write** it as ``snapshots/<snapshot_ms>/`` (the layer in Parquet, ``manifest.json``,
   then ``_SUCCESS``: a directory without it is not a snapshot and is removed by the
   next run; ``spark/layers.py``);
5. **switch** the compact Redis snapshot to it: a new generation written whole and
   switched to, or the changes applied in place (``apexmesh/store/pubsub_snapshot.py``),
   recording the position covered;
6. **trim** the log up to that position, then apply retention.

Dying between any two steps loses nothing (the log is trimmed last, only up to what a
switched snapshot covers) and duplicates nothing (export ranges are exactly once; the
fold drops duplicate ids; the next run starts from the newest complete snapshot).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType
from redis.asyncio import Redis

from apexmesh.pubsub.catalogue import SNAPSHOT_SCHEMA, unpack_id
from apexmesh.store.connection import connect_redis, keys_for
from apexmesh.store.pubsub_snapshot import SnapshotMeta, SnapshotStore
from spark import pause
from spark.export import EVENT_SCHEMA, EVENTS_DIR, export, export_position, exported, rows_after
from spark.fold import (
    SUBSCRIPTION_SCHEMA,
    TOPIC_SCHEMA,
    history_of_events,
    history_of_rows,
    live_topics,
)
from spark.layers import (
    FORMAT,
    FULL_SUBSCRIPTIONS,
    FULL_TOPICS,
    MANIFEST,
    SNAPSHOTS_DIR,
    SUCCESS,
    Kind,
    SnapshotInfo,
    chain_rows,
    history,
    needed,
    read_subscription_changes,
    read_subscriptions,
    read_topic_changes,
    read_topics,
    readable,
    snapshots,
    write_changes,
    write_full,
)
from spark.plan import Plan, plan_run
from spark.seed import SEED_DIR, Seed, write_seed
from spark.session import QUICK_JIT_ROWS, jit_conf, require_s3a, spark_session
from spark.settings import SnapshotSettings
from spark.storage import Storage

_log = logging.getLogger("spark.snapshot")

#: The exported files' schema as Spark reads it (explicit: no inference pass).
SPARK_EVENT_SCHEMA: Final = StructType(
    [
        StructField(f.name, LongType() if f.name == "id" else StringType(), False)
        for f in EVENT_SCHEMA
    ]
)

#: The steps, in order; a run can be stopped before one (the kill tests).
STEPS: Final = ("export", "fold", "switch", "trim")


class JobStopped(RuntimeError):  # noqa: N818 - names what happened, as a death would
    """The run was stopped before a step, as if the job had died there (tests)."""


@dataclass(slots=True)
class JobResult:
    """What a run did (printed by :func:`main`, one JSON line)."""

    directory: str = ""
    snapshot_ms: int = 0
    position: str = "0-0"
    #: What the run built (``spark/layers.py`` Kind), why, and the sentence saying so.
    kind: str = ""
    why: str = ""
    reason: str = ""
    #: Change layers the new snapshot is read with, after its full layer.
    layers: int = 0
    #: Rows of the snapshot's own layer (a change layer's: the keys it changed).
    topics: int = 0
    subscriptions: int = 0
    #: Rows of the Redis snapshot after the switch.
    redis_topics: int = 0
    redis_subscriptions: int = 0
    exported_files: list[str] = field(default_factory=list)
    exported_events: int = 0
    folded_files: int = 0
    generation: str = ""
    trimmed: int = 0
    removed_snapshots: list[str] = field(default_factory=list)
    removed_exports: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


class SnapshotJob:
    """One deployment's snapshot job: settings, a SparkSession, a Redis client.

    ``spark`` is a session, or a function that makes one for a fold of so many rows
    (:func:`spark.session.jit_conf`): then the JVM is started only when the fold needs
    it, after the export (a run held or killed during the export, as the kill tests do,
    never starts one)."""

    def __init__(
        self,
        settings: SnapshotSettings,
        spark: SparkSession | Callable[[int], SparkSession],
        redis: Redis,
        *,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.settings = settings
        self._spark = spark
        self.redis = redis
        self.keys = keys_for(settings.redis_url, settings.redis_prefix)
        self.store = SnapshotStore(redis, self.keys)
        self.storage = Storage.configured(settings.storage, settings.session_conf())
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)

    @property
    def spark(self) -> SparkSession:
        """The session (made on first use when a function was given)."""
        return self._session(QUICK_JIT_ROWS)

    def _session(self, rows: int) -> SparkSession:
        if not isinstance(self._spark, SparkSession):
            self._spark = self._spark(rows)
        return self._spark

    def _events(self, after: int) -> tuple[DataFrame, int]:
        files = [r.name for r in exported(self.storage) if r.last > after]
        if not files:
            return self.spark.createDataFrame([], SPARK_EVENT_SCHEMA), 0
        urls = [self.storage.spark_url(f"{EVENTS_DIR}/{name}") for name in files]
        return self.spark.read.schema(SPARK_EVENT_SCHEMA).parquet(*urls), len(files)

    def plan(self, meta: SnapshotMeta | None) -> tuple[Plan, SnapshotInfo | None]:
        """What this run builds (spark/plan.py), and the previous snapshot."""
        complete = snapshots(self.storage)
        previous = complete[-1] if complete else None
        held = max(export_position(self.storage), previous.position if previous else 0)
        decided = plan_run(
            previous,
            meta,
            held,
            compact_after=self.settings.compact_after,
            chain_readable=previous is None or readable(self.storage, previous),
        )
        return decided, previous

    async def run(self, stop_before: str | None = None) -> JobResult:
        """One run (module docstring); ``stop_before`` one of :data:`STEPS` stops it
        there as a death would (nothing after it happens)."""
        result = JobResult()
        timer = time.perf_counter
        storage = self.storage
        now_ms = self._clock()

        def stop(step: str) -> None:
            if stop_before == step:
                raise JobStopped(f"stopped before {step}")
            pause.reached(step)  # a test's kill point (spark/pause.py)

        stop("export")
        meta = await self.store.meta()
        decided, previous = self.plan(meta)
        result.kind, result.why, result.reason = decided.kind, decided.why, decided.reason
        _log.info("%s", decided.reason)
        started = timer()
        done = await export(
            self.redis, self.keys, storage, self.settings.export_batch, start=decided.export_from
        )
        result.exported_files = list(done.files)
        result.exported_events = done.events
        result.seconds["export"] = round(timer() - started, 3)

        stop("fold")
        if previous is not None and now_ms <= previous.snapshot_ms:
            # a clock that did not move on (or went back): the new snapshot must not
            # take the name, and the place, of the one it is built from
            now_ms = previous.snapshot_ms + 1
        directory = f"{SNAPSHOTS_DIR}/{now_ms:013d}"
        storage.delete(directory)  # a dead attempt at the same millisecond
        started = timer()
        seed = None
        if decided.seed_from_redis:
            seed = await write_seed(self.store, storage, f"{directory}/{SEED_DIR}")
            result.seconds["seed"] = round(timer() - started, 3)
        # what the fold starts from: nothing, the seed, or the previous snapshot's layers
        if decided.kind is Kind.FULL or previous is None:
            after = seed.position if seed else 0
            base_rows = seed.topics + seed.subscriptions if seed else 0
        else:
            after = previous.position
            base_rows = 0
            if decided.kind is Kind.COMPACTED:
                base_rows = chain_rows(storage, previous)
        started = timer()
        if not isinstance(self._spark, SparkSession):
            self._session(rows_after(storage, after) + base_rows)
            result.seconds["session"] = round(timer() - started, 3)
        pause.reached("spark")  # a test's point (spark/pause.py): the session is up
        if self.settings.storage.startswith("s3a://"):
            require_s3a(self.spark)
        started = timer()
        events, result.folded_files = self._events(after)
        found = history_of_events(events, after=after)
        url = storage.spark_url(directory)
        if decided.kind is Kind.INCREMENTAL and previous is not None:
            previous_topics = live_topics(history(self.spark, storage, previous))
            write_changes(found, previous_topics, url)
        else:
            if seed is not None:
                found = found.union(
                    history_of_rows(
                        self.spark.read.schema(TOPIC_SCHEMA).parquet(
                            storage.spark_url(f"{directory}/{SEED_DIR}/{FULL_TOPICS}")
                        ),
                        self.spark.read.schema(SUBSCRIPTION_SCHEMA).parquet(
                            storage.spark_url(f"{directory}/{SEED_DIR}/{FULL_SUBSCRIPTIONS}")
                        ),
                    )
                )
            elif decided.kind is Kind.COMPACTED and previous is not None:
                found = history(self.spark, storage, previous).union(found)
            write_full(self.spark, found, now_ms, url)
            storage.delete(f"{directory}/{SEED_DIR}")
        result.seconds["fold"] = round(timer() - started, 3)
        position = max(after, done.position)
        await self._publish(
            result, decided, previous, meta, seed, directory, now_ms, position, stop
        )
        self._retain(result)
        return result

    async def _publish(
        self,
        result: JobResult,
        decided: Plan,
        previous: SnapshotInfo | None,
        meta: SnapshotMeta | None,
        seed: Seed | None,
        directory: str,
        now_ms: int,
        position: int,
        stop: Callable[[str], None],
    ) -> None:
        """Write the Redis side (a whole generation, or the change layer staged), the
        manifest and ``_SUCCESS``, then switch (or apply) and trim."""
        storage = self.storage
        timer = time.perf_counter
        started = timer()
        staging = ""
        if decided.kind is Kind.INCREMENTAL and previous is not None and meta is not None:
            base, layers, generation = previous.base, (*previous.layers, directory), meta.generation
            staging = f"{generation}.changes.{now_ms}"
            topics, subscriptions = await self.store.stage(
                staging,
                read_topic_changes(storage, directory),
                read_subscription_changes(storage, directory),
            )
        else:
            base, layers, generation = directory, (), f"{now_ms}-{uuid.uuid4().hex[:8]}"
            topics, subscriptions = await self.store.write(
                generation, read_topics(storage, directory), read_subscriptions(storage, directory)
            )
        after = previous.position if previous and decided.kind is not Kind.FULL else 0
        manifest = {
            "format": FORMAT,
            "schema": SNAPSHOT_SCHEMA,
            "kind": str(decided.kind),
            "why": str(decided.why),
            "reason": decided.reason,
            "snapshot_ms": now_ms,
            "position": unpack_id(position),
            "position_packed": position,
            "previous": previous.directory if previous else "",
            "base": base,
            "layers": list(layers),
            # a full rebuild's start: the Redis snapshot at this position, or the log's
            "seed": f"redis@{unpack_id(seed.position)}" if seed else "",
            "exports": [r.name for r in exported(storage) if r.last > after],
            "topics": topics,
            "subscriptions": subscriptions,
            "generation": generation,
        }
        storage.write_json(f"{directory}/{MANIFEST}", manifest)
        storage.write_bytes(f"{directory}/{SUCCESS}", b"")
        result.seconds["redis_write"] = round(timer() - started, 3)
        result.directory = storage.spark_url(directory)
        result.snapshot_ms, result.position = now_ms, unpack_id(position)
        result.topics, result.subscriptions, result.layers = topics, subscriptions, len(layers)

        stop("switch")
        started = timer()
        info = SnapshotMeta(
            generation=generation,
            position=position,
            snapshot_ms=now_ms,
            topics=topics,
            subscriptions=subscriptions,
            schema=SNAPSHOT_SCHEMA,
            trimmed=meta.trimmed if meta else 0,
            storage=result.directory,
        )
        if staging and meta is not None:
            applied = await self.store.apply(staging, meta, info)
            if applied is None:
                await self.store.discard(staging)
                raise RuntimeError(
                    f"the Redis snapshot changed during this run (another run of the job?): "
                    f"{directory} is written, the next run writes the Redis snapshot whole"
                )
            result.redis_topics, result.redis_subscriptions = applied.topics, applied.subscriptions
        else:
            await self.store.switch(info, self.settings.grace_ms)
            result.redis_topics, result.redis_subscriptions = topics, subscriptions
        result.generation = generation
        result.seconds["switch"] = round(timer() - started, 3)

        stop("trim")
        if self.settings.trim:
            result.trimmed = await self.store.trim(position)

    def _retain(self, result: JobResult) -> None:
        """Keep the newest ``retention`` complete snapshots and every layer they are read
        from; drop older ones, directories a dead run left without ``_SUCCESS``, and
        exported ranges that only the dropped snapshots needed (every kept one covers
        them)."""
        storage = self.storage
        keep = snapshots(storage)[-self.settings.retention :]
        need = needed(keep)
        newest = keep[-1].directory.rpartition("/")[2] if keep else ""
        for name in storage.list(SNAPSHOTS_DIR):
            directory = f"{SNAPSHOTS_DIR}/{name}"
            if directory not in need and (not keep or name < newest):
                storage.delete(directory)
                result.removed_snapshots.append(directory)
        if keep:
            oldest = min(s.position for s in keep)
            for exported_range in exported(storage):
                if exported_range.last <= oldest:
                    storage.delete(f"{EVENTS_DIR}/{exported_range.name}")
                    result.removed_exports += 1


async def run_once(settings: SnapshotSettings, spark: SparkSession | None = None) -> JobResult:
    """One run with this process's session (or a new one, started once the export is
    done and stopped at the end) and Redis pool."""
    made: list[SparkSession] = []

    def session(rows: int) -> SparkSession:
        made.append(
            spark_session(
                settings.master,
                driver_memory=settings.driver_memory,
                shuffle_partitions=settings.shuffle_partitions,
                conf=jit_conf(rows) + settings.session_conf(),
            )
        )
        return made[0]

    redis = connect_redis(settings.redis_url, settings.redis_pool)
    try:
        return await SnapshotJob(settings, spark or session, redis).run()
    finally:
        await redis.aclose()
        for started in made:
            started.stop()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = SnapshotSettings.from_env()
    result = asyncio.run(run_once(settings))
    changed = " changed" if result.kind == Kind.INCREMENTAL else ""
    print(  # noqa: T201 - what the run wrote is this command's output
        f"snapshot {result.directory}: {result.topics} topics, {result.subscriptions} "
        f"subscriptions{changed}, log position {result.position}; {result.reason}; exported "
        f"{result.exported_events} events in {len(result.exported_files)} files; trimmed "
        f"{result.trimmed}; redis generation {result.generation} ({result.redis_topics} "
        f"topics, {result.redis_subscriptions} subscriptions)"
    )
    print(json.dumps(asdict(result), sort_keys=True))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
