"""The snapshot job: ``python -m spark.snapshot`` (docs/snapshot.md).

One run, in this order, each step safe to die in:

1. **export** the closed ranges of the event log not yet exported (``spark/export.py``);
2. **fold** the latest complete snapshot of the storage plus the exported events after
   its position into the catalogue at the run's time (``spark/fold.py``);
3. **write** it as ``snapshots/<snapshot_ms>/`` (``topics/`` and ``subscriptions/`` in
   Parquet, ``manifest.json``, then ``_SUCCESS``: a directory without it is not a
   snapshot and is removed by the next run);
4. **switch** the compact Redis snapshot to it (new keys, one script:
   ``apexmesh/store/pubsub_snapshot.py``), recording the position covered;
5. **trim** the log up to that position, then apply retention.

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
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import pyarrow.dataset as pads
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType
from redis.asyncio import Redis

from apexmesh.pubsub.catalogue import (
    SNAPSHOT_SCHEMA,
    SubscriptionRow,
    TopicRow,
    unpack_id,
)
from apexmesh.store.connection import connect_redis
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub_snapshot import SnapshotMeta, SnapshotStore
from spark import pause
from spark.export import EVENT_SCHEMA, EVENTS_DIR, export, exported, rows_after
from spark.fold import (
    SUBSCRIPTION_SCHEMA,
    TOPIC_SCHEMA,
    fold_subscriptions_and_ids,
    fold_topics,
)
from spark.session import QUICK_JIT_ROWS, jit_conf, require_s3a, spark_session
from spark.settings import SnapshotSettings
from spark.storage import Storage

_log = logging.getLogger("spark.snapshot")

SNAPSHOTS_DIR: Final = "snapshots"
MANIFEST: Final = "manifest.json"
SUCCESS: Final = "_SUCCESS"

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


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A complete snapshot of the storage, from its manifest."""

    directory: str
    snapshot_ms: int
    position: int
    topics: int
    subscriptions: int


@dataclass(slots=True)
class JobResult:
    """What a run did (printed by :func:`main`, one JSON line)."""

    directory: str = ""
    snapshot_ms: int = 0
    position: str = "0-0"
    topics: int = 0
    subscriptions: int = 0
    exported_files: list[str] = field(default_factory=list)
    exported_events: int = 0
    folded_files: int = 0
    generation: str = ""
    trimmed: int = 0
    removed_snapshots: list[str] = field(default_factory=list)
    removed_exports: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def snapshots(storage: Storage) -> list[SnapshotInfo]:
    """The complete snapshots of the storage, oldest first."""
    out = []
    for name in storage.list(SNAPSHOTS_DIR):
        directory = f"{SNAPSHOTS_DIR}/{name}"
        if not name.isdigit() or not storage.exists(f"{directory}/{SUCCESS}"):
            continue
        manifest = storage.read_json(f"{directory}/{MANIFEST}")
        out.append(
            SnapshotInfo(
                directory,
                int(manifest["snapshot_ms"]),
                int(manifest["position_packed"]),
                int(manifest["topics"]),
                int(manifest["subscriptions"]),
            )
        )
    return sorted(out, key=lambda s: s.snapshot_ms)


def _rows(storage: Storage, relative: str) -> Iterator[dict[str, Any]]:
    dataset = pads.dataset(storage.path(relative), format="parquet", filesystem=storage.filesystem)
    for batch in dataset.to_batches():
        yield from batch.to_pylist()


def read_topics(storage: Storage, directory: str) -> Iterator[TopicRow]:
    for row in _rows(storage, f"{directory}/topics"):
        yield TopicRow(**row)


def read_subscriptions(storage: Storage, directory: str) -> Iterator[SubscriptionRow]:
    for row in _rows(storage, f"{directory}/subscriptions"):
        yield SubscriptionRow(**row)


def write_folded(
    spark: SparkSession,
    events: DataFrame,
    at_ms: int,
    topics_url: str,
    subscriptions_url: str,
    *,
    after: int = 0,
    previous: tuple[DataFrame, DataFrame] | None = None,
) -> None:
    """Fold ``events`` after ``after`` (on top of a ``previous`` snapshot's topics and
    subscriptions) at ``at_ms`` and write both as Parquet: the topics first, then the
    subscriptions joined with the topics just written, read back (spark/fold.py: the
    events are scanned for topics once, and the small topics join by broadcast). The
    subscriptions' winning ids stay cached during their write and are released after
    it. The job and bench/snapshot.py both fold through here."""
    base_topics, base_subs = previous if previous is not None else (None, None)
    fold_topics(events, after=after, topics=base_topics).write.mode("overwrite").parquet(topics_url)
    written = spark.read.schema(TOPIC_SCHEMA).parquet(topics_url)
    subscriptions, ids = fold_subscriptions_and_ids(
        events, at_ms, written, after=after, subscriptions=base_subs
    )
    try:
        subscriptions.write.mode("overwrite").parquet(subscriptions_url)
    finally:
        ids.unpersist()


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
        self.keys = Keys(settings.redis_prefix)
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
        started = timer()
        done = await export(self.redis, self.keys, storage, self.settings.export_batch)
        result.exported_files = list(done.files)
        result.exported_events = done.events
        result.seconds["export"] = round(timer() - started, 3)

        stop("fold")
        complete = snapshots(storage)
        base = complete[-1] if complete else None
        after = base.position if base else 0
        if not isinstance(self._spark, SparkSession):
            started = timer()
            rows = rows_after(storage, after) + (base.topics + base.subscriptions if base else 0)
            self._session(rows)
            result.seconds["session"] = round(timer() - started, 3)
        if self.settings.storage.startswith("s3a://"):
            require_s3a(self.spark)
        started = timer()
        if base is not None and now_ms <= base.snapshot_ms:
            # a clock that did not move on (or went back): the new snapshot must not
            # take the name, and the place, of the one it is built from
            now_ms = base.snapshot_ms + 1
        meta = await self.store.meta()
        if meta is not None and meta.trimmed > max(after, done.position):
            raise RuntimeError(
                f"the log is trimmed up to {unpack_id(meta.trimmed)} but the storage's "
                f"snapshots and exports end at {unpack_id(max(after, done.position))}: "
                "is APEXMESH_SNAPSHOT_STORAGE the storage of earlier runs?"
            )
        events, result.folded_files = self._events(after)
        previous = (
            (
                self.spark.read.schema(TOPIC_SCHEMA).parquet(
                    storage.spark_url(f"{base.directory}/topics")
                ),
                self.spark.read.schema(SUBSCRIPTION_SCHEMA).parquet(
                    storage.spark_url(f"{base.directory}/subscriptions")
                ),
            )
            if base
            else None
        )
        position = max(after, done.position)
        directory = f"{SNAPSHOTS_DIR}/{now_ms:013d}"
        storage.delete(directory)  # a dead attempt at the same millisecond
        write_folded(
            self.spark,
            events,
            now_ms,
            storage.spark_url(f"{directory}/topics"),
            storage.spark_url(f"{directory}/subscriptions"),
            after=after,
            previous=previous,
        )
        result.seconds["fold"] = round(timer() - started, 3)

        started = timer()
        generation = f"{now_ms}-{uuid.uuid4().hex[:8]}"
        topics, subscriptions = await self.store.write(
            generation,
            read_topics(storage, directory),
            read_subscriptions(storage, directory),
        )
        manifest = {
            "schema": SNAPSHOT_SCHEMA,
            "snapshot_ms": now_ms,
            "position": unpack_id(position),
            "position_packed": position,
            "previous": base.directory if base else "",
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
        result.topics, result.subscriptions = topics, subscriptions

        stop("switch")
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
        await self.store.switch(info, self.settings.grace_ms)
        result.generation = generation

        stop("trim")
        if self.settings.trim:
            result.trimmed = await self.store.trim(position)
        self._retain(result)
        return result

    def _retain(self, result: JobResult) -> None:
        """Keep the newest ``retention`` complete snapshots; drop older ones, directories
        a dead run left without ``_SUCCESS``, and exported ranges that only the dropped
        snapshots needed (every kept one covers them)."""
        storage = self.storage
        complete = snapshots(storage)
        keep = complete[-self.settings.retention :]
        kept = {s.directory for s in keep}
        for name in storage.list(SNAPSHOTS_DIR):
            directory = f"{SNAPSHOTS_DIR}/{name}"
            if directory not in kept and (not keep or name < keep[-1].directory.split("/")[-1]):
                storage.delete(directory)
                result.removed_snapshots.append(directory)
        if keep:
            oldest = keep[0].position
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
    print(  # noqa: T201 - what the run wrote is this command's output
        f"snapshot {result.directory}: {result.topics} topics, {result.subscriptions} "
        f"subscriptions, log position {result.position}; exported {result.exported_events} "
        f"events in {len(result.exported_files)} files; trimmed {result.trimmed}; "
        f"redis generation {result.generation}"
    )
    print(json.dumps(asdict(result), sort_keys=True))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
