"""The snapshot job end to end (spark/snapshot.py): a real redis-server, a real local
SparkSession, a storage directory. What it writes (Parquet, manifest, _SUCCESS, the
Redis snapshot), that its result is the reference fold, that the log is trimmed only up
to what a switched snapshot covers, and that a run stopped between any two steps
(export, fold, switch, trim) loses and duplicates nothing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest
from redis.asyncio import Redis

from apexmesh.pubsub.catalogue import Catalogue, fold, pack_id
from apexmesh.store.connection import RedisPoolSettings
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub_snapshot import SnapshotStore
from spark.export import EVENTS_DIR, exported
from spark.layers import MANIFEST, SUCCESS, Kind, snapshots
from spark.settings import SnapshotSettings
from spark.snapshot import JobStopped, SnapshotJob
from spark.storage import Storage
from tests.support.pubsub_events import BASE_MS, Entry, append, random_log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A SparkSession starts in 5 s on a quiet machine, 40 s or more on a loaded one.
pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

#: The job's clock: every lease of random_log ending before it is dropped.
NOW = BASE_MS + 5_000_000


def settings_for(keys: Keys, storage: Path, **kw: object) -> SnapshotSettings:
    values: dict[str, object] = {
        "storage": str(storage),
        "retention": 3,
        "master": "local[2]",
        "driver_memory": "1g",
        "shuffle_partitions": 4,
        "export_batch": 700,
        "trim": True,
        "grace_ms": 60_000,
        "redis_url": "redis://127.0.0.1:0/0",
        "redis_prefix": keys.prefix,
        "redis_pool": RedisPoolSettings(max_connections=8, timeout=5.0),
    }
    values.update(kw)
    return SnapshotSettings(**values)  # type: ignore[arg-type]


def job(
    spark: SparkSession, redis: Redis, keys: Keys, storage: Path, now: int = NOW, **kw: object
) -> SnapshotJob:
    return SnapshotJob(settings_for(keys, storage, **kw), spark, redis, clock=lambda: now)


def reference(log: list[Entry], at: int = NOW) -> Catalogue:
    return fold(log, at)


async def redis_catalogue(redis: Redis, keys: Keys) -> Catalogue:
    found = await SnapshotStore(redis, keys).load()
    assert found is not None
    return found


def exported_ids(storage: Path) -> list[int]:
    ids: list[int] = []
    for item in exported(Storage(str(storage))):
        ids += pq.read_table(storage / EVENTS_DIR / item.name, columns=["id"])["id"].to_pylist()
    return ids


async def test_runs_write_parquet_and_redis_fold_incrementally_trim_and_retain(
    spark: SparkSession, redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    log = random_log(3000, seed=2)
    parts = [log[:1500], log[1500:1501], log[1501:]]
    for number, part in enumerate(parts):
        await append(redis, keys.pubsub_events(), part)
        # every run writes a full layer (the first a rebuild, the next ones compactions
        # of the previous snapshot and the new events), so the Redis snapshot is written
        # whole each time; runs writing change layers: test_snapshot_incremental.py
        result = await job(
            spark, redis, keys, tmp_path, now=NOW + number, retention=2, compact_after=0
        ).run()
        assert result.kind == (Kind.FULL if number == 0 else Kind.COMPACTED)
        so_far = log[: sum(len(p) for p in parts[: number + 1])]
        # each run's Redis snapshot is the fold of everything so far, and the log is
        # trimmed up to what it covers
        expected = reference(so_far, NOW + number)
        assert await redis_catalogue(redis, keys) == expected
        meta = await SnapshotStore(redis, keys).meta()
        assert meta is not None
        assert meta.position == pack_id(so_far[-1][0]) == meta.trimmed
        assert (meta.topics, meta.subscriptions) == (
            len(expected.topics),
            len(expected.subscriptions),
        )
        assert await redis.xlen(keys.pubsub_events()) == 0
        assert result.trimmed == result.exported_events == len(part)
        if number == 0:
            (info,) = snapshots(Storage(str(tmp_path)))
            directory = tmp_path / info.directory
            assert (directory / SUCCESS).exists()
            manifest = (directory / MANIFEST).read_text()
            assert '"schema": 1' in manifest
            assert '"format": 2' in manifest
            assert f'"position": "{log[1499][0]}"' in manifest
            assert (info.topics, info.subscriptions) == (meta.topics, meta.subscriptions)
            assert pq.read_table(directory / "subscriptions").num_rows == meta.subscriptions
            assert pq.read_table(directory / "topics").num_rows == meta.topics
            assert len(result.exported_files) == 3  # 700 events a file at most
    kept = snapshots(Storage(str(tmp_path)))
    assert len(kept) == 2  # retention
    assert not (tmp_path / "snapshots" / f"{NOW:013d}").exists()
    # the exported ranges the oldest kept snapshot covers are gone, the rest remain
    assert kept[0].position == pack_id(log[1500][0])
    assert sorted(exported_ids(tmp_path)) == [
        pack_id(i) for i, _ in log if pack_id(i) > kept[0].position
    ]


@pytest.mark.parametrize("step", ["fold", "switch"])
async def test_a_run_stopped_between_steps_loses_and_duplicates_nothing(
    spark: SparkSession, redis: Redis, keys: Keys, tmp_path: Path, step: str
) -> None:
    log = random_log(2000, seed=3)
    first, second = log[:1200], log[1200:]
    await append(redis, keys.pubsub_events(), first)
    with pytest.raises(JobStopped):
        await job(spark, redis, keys, tmp_path, now=NOW).run(stop_before=step)
    # nothing switched or trimmed before the switch; the log still has everything
    assert await SnapshotStore(redis, keys).meta() is None
    assert await redis.xlen(keys.pubsub_events()) == 1200
    # a temporary file a death mid-write would leave is not a range
    (tmp_path / EVENTS_DIR).mkdir(exist_ok=True)
    (
        tmp_path / EVENTS_DIR / ".tmp-dead-00000000000000000001-00000000000000000002.parquet"
    ).write_bytes(b"half")

    await append(redis, keys.pubsub_events(), second)
    # the next run, looked at before its trim and retention (which drop covered ranges)
    with pytest.raises(JobStopped):
        await job(spark, redis, keys, tmp_path, now=NOW + 1).run(stop_before="trim")
    ids = exported_ids(tmp_path)
    assert sorted(ids) == [pack_id(i) for i, _ in log]  # each event exactly once
    assert len(ids) == len(set(ids))
    assert not [n for n in (tmp_path / EVENTS_DIR).iterdir() if n.name.startswith(".tmp-")]
    assert await redis_catalogue(redis, keys) == reference(log, NOW + 1)
    assert await redis.xlen(keys.pubsub_events()) == 2000  # not trimmed yet
