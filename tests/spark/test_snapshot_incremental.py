"""Incremental runs of the snapshot job (docs/snapshot.md "Incremental runs"): a run on a
previous snapshot writes only a change layer of the events since, and changes the Redis
snapshot in place by as much, with the same result as a full rebuild of the same log;
the job decides itself when it must rebuild in full (no previous snapshot, another
format, a trimmed log gap) or compact (a long chain, Redis behind), and says so in its
result and manifest. A real redis-server, the session's SparkSession, storage
directories."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from redis.asyncio import Redis

from apexmesh.pubsub.catalogue import Catalogue, SubscriptionRow, TopicRow, fold, pack_id
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub_snapshot import SnapshotStore
from spark.export import exported
from spark.layers import MANIFEST, Kind, SnapshotInfo, read_view, snapshots
from spark.plan import Why
from spark.snapshot import JobResult, JobStopped
from spark.storage import Storage
from tests.spark.test_snapshot_job import NOW, job, redis_catalogue
from tests.support.pubsub_events import Entry, append, random_log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(900)]

Rows = tuple[set[TopicRow], set[SubscriptionRow]]


def rows(catalogue: Catalogue) -> Rows:
    return set(catalogue.topics.values()), set(catalogue.subscriptions.values())


def parquet_view(spark: SparkSession, storage: Path) -> Rows:
    """The newest snapshot of ``storage``, read with its layers, at its time."""
    info = snapshots(Storage(str(storage)))[-1]
    folded = read_view(spark, Storage(str(storage)), info)
    try:
        return (
            {TopicRow(**r.asDict()) for r in folded.topics.collect()},
            {SubscriptionRow(**r.asDict()) for r in folded.subscriptions.collect()},
        )
    finally:
        if folded.ids is not None:
            folded.ids.unpersist()


async def redis_view(redis: Redis, keys: Keys, at: int) -> Catalogue:
    """The Redis snapshot as a pod reads it at ``at`` (its rows judged then)."""
    return (await redis_catalogue(redis, keys)).snapshot(at)


def newest(storage: Path) -> SnapshotInfo:
    return snapshots(Storage(str(storage)))[-1]


def manifest(storage: Path, info: SnapshotInfo) -> dict[str, object]:
    return Storage(str(storage)).read_json(f"{info.directory}/{MANIFEST}")  # type: ignore[no-any-return]


async def check(
    spark: SparkSession, redis: Redis, keys: Keys, storage: Path, log: list[Entry], at: int
) -> None:
    """The newest snapshot, in Parquet and in Redis, is the reference fold of ``log``."""
    expected = fold(log, at)
    assert await redis_view(redis, keys, at) == expected
    assert parquet_view(spark, storage) == rows(expected)
    meta = await SnapshotStore(redis, keys).meta()
    assert meta is not None
    assert meta.position == pack_id(log[-1][0])


def touched(entries: list[Entry]) -> tuple[int, int]:
    """Topic keys and subscription identities some of ``entries`` change."""
    topics = {(e["domain"], e["topic"]) for _, e in entries if e["type"].startswith("topic.")}
    subs = {
        (e["domain"], e["topic"], e.get("subscriber", ""), e.get("subscription_id", ""))
        for _, e in entries
        if e["type"].startswith("subscription.")
    }
    return len(topics), len(subs)


async def test_incremental_runs_equal_a_full_rebuild_of_the_same_log(
    spark: SparkSession, redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    log = random_log(3000, seed=41)
    parts = [log[:1500], log[1500:2400], log[2400:]]
    storage = tmp_path / "incremental"
    results: list[JobResult] = []
    for number, part in enumerate(parts):
        await append(redis, keys.pubsub_events(), part)
        results.append(await job(spark, redis, keys, storage, now=NOW + number).run())
    assert [r.kind for r in results] == [Kind.FULL, Kind.INCREMENTAL, Kind.INCREMENTAL]
    assert results[0].why == Why.NO_PREVIOUS
    assert "from the log's first event" in results[0].reason
    at = NOW + 2
    await check(spark, redis, keys, storage, log, at)

    # the same log at once, in a storage and a Redis prefix of its own: a full rebuild
    other = Keys(f"{keys.prefix}-full")
    await append(redis, other.pubsub_events(), log)
    full_storage = tmp_path / "full"
    rebuilt = await job(spark, redis, other, full_storage, now=at).run()
    assert rebuilt.kind == Kind.FULL
    assert parquet_view(spark, full_storage) == parquet_view(spark, storage)
    assert await redis_view(redis, other, at) == await redis_view(redis, keys, at)

    # what the last run did followed its own events: it read only the files it
    # exported, and its layer has one row per key they touched, nothing of the rest
    last, info = results[-1], newest(storage)
    assert last.folded_files == len(last.exported_files) == 1
    assert (last.topics, last.subscriptions) == touched(parts[-1])
    written = manifest(storage, info)
    assert (written["kind"], written["why"]) == ("incremental", "")
    assert written["base"] == snapshots(Storage(str(storage)))[0].directory
    assert written["layers"] == [s.directory for s in snapshots(Storage(str(storage)))[1:]]
    assert written["exports"] == last.exported_files
    # the Redis snapshot was changed in place: same generation, the counts of its rows
    meta = await SnapshotStore(redis, keys).meta()
    assert meta is not None
    assert meta.generation == results[0].generation == last.generation
    state = await redis_catalogue(redis, keys)
    assert (meta.topics, meta.subscriptions) == (len(state.topics), len(state.subscriptions))
    assert meta.trimmed == meta.position  # and the log trimmed up to it
    assert await redis.xlen(keys.pubsub_events()) == 0


async def test_a_long_chain_of_change_layers_is_compacted(
    spark: SparkSession, redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    log = random_log(2000, seed=43)
    parts = [log[:800], log[800:1200], log[1200:1600], log[1600:]]
    kinds = []
    for number, part in enumerate(parts):
        await append(redis, keys.pubsub_events(), part)
        done = await job(
            spark, redis, keys, tmp_path, now=NOW + number, compact_after=1, retention=1
        ).run()
        kinds.append((done.kind, done.why))
        so_far = log[: sum(len(p) for p in parts[: number + 1])]
        await check(spark, redis, keys, tmp_path, so_far, NOW + number)
    assert kinds == [
        (Kind.FULL, Why.NO_PREVIOUS),
        (Kind.INCREMENTAL, Why.NONE),
        (Kind.COMPACTED, Why.LAYERS),
        (Kind.INCREMENTAL, Why.NONE),
    ]
    # retention 1 keeps the newest snapshot and the full layer it is read from (the
    # compacted one); the first two are gone
    kept = snapshots(Storage(str(tmp_path)))
    assert [s.kind for s in kept] == [Kind.COMPACTED, Kind.INCREMENTAL]
    assert kept[1].base == kept[0].directory


async def test_a_previous_snapshot_of_another_format_is_rebuilt_from_redis(
    spark: SparkSession, redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    log = random_log(1600, seed=47)
    await append(redis, keys.pubsub_events(), log[:1000])
    await job(spark, redis, keys, tmp_path, now=NOW).run()
    # the manifest as format 1 wrote it (no format, kind or layers)
    info = newest(tmp_path)
    old = {
        k: v
        for k, v in manifest(tmp_path, info).items()
        if k not in ("format", "kind", "base", "layers")
    }
    Storage(str(tmp_path)).write_json(f"{info.directory}/{MANIFEST}", old)
    await append(redis, keys.pubsub_events(), log[1000:])
    done = await job(spark, redis, keys, tmp_path, now=NOW + 1).run()
    assert (done.kind, done.why) == (Kind.FULL, Why.FORMAT)
    assert "full rebuild from the Redis snapshot at" in done.reason
    written = manifest(tmp_path, newest(tmp_path))
    assert written["seed"] == f"redis@{log[999][0]}"
    assert (written["kind"], written["why"]) == ("full", "format")
    await check(spark, redis, keys, tmp_path, log, NOW + 1)


async def test_a_trimmed_log_gap_is_rebuilt_from_redis(
    spark: SparkSession, redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    """A storage restored from an old backup: the live storage's later runs trimmed the
    log past what the old one holds."""
    log = random_log(2400, seed=53)
    live, restored = tmp_path / "live", tmp_path / "restored"
    await append(redis, keys.pubsub_events(), log[:1000])
    await job(spark, redis, keys, live, now=NOW).run()
    shutil.copytree(live, restored)  # the backup
    await append(redis, keys.pubsub_events(), log[1000:1800])
    assert (await job(spark, redis, keys, live, now=NOW + 1).run()).kind == Kind.INCREMENTAL
    await append(redis, keys.pubsub_events(), log[1800:])
    done = await job(spark, redis, keys, restored, now=NOW + 2).run()
    assert (done.kind, done.why) == (Kind.FULL, Why.GAP)
    assert f"trimmed up to {log[1799][0]}" in done.reason
    # the export started again after the Redis snapshot's position
    fresh = [r for r in exported(Storage(str(restored))) if r.first > pack_id(log[999][0])]
    assert fresh
    assert fresh[0].first == pack_id(log[1800][0])
    await check(spark, redis, keys, restored, log, NOW + 2)


@pytest.mark.parametrize("step", ["switch", "trim"])
async def test_an_incremental_run_that_died_is_followed_soundly(
    spark: SparkSession, redis: Redis, keys: Keys, tmp_path: Path, step: str
) -> None:
    """Stopped before its switch, an incremental run changed nothing in Redis (its staged
    changes expire); the next run compacts and writes Redis whole. Stopped after it,
    before the trim, the next run goes on incrementally."""
    log = random_log(2200, seed=59)
    await append(redis, keys.pubsub_events(), log[:1000])
    first = await job(spark, redis, keys, tmp_path, now=NOW).run()
    await append(redis, keys.pubsub_events(), log[1000:1600])
    with pytest.raises(JobStopped):
        await job(spark, redis, keys, tmp_path, now=NOW + 1).run(stop_before=step)
    meta = await SnapshotStore(redis, keys).meta()
    assert meta is not None
    if step == "switch":
        assert meta.position == pack_id(log[999][0])  # unchanged
        assert await redis_view(redis, keys, NOW) == fold(log[:1000], NOW)
        staged = f"{first.generation}.changes.{NOW + 1}"
        assert await redis.pttl(keys.pubsub_snapshot_subscriptions(staged)) > 0
    else:
        assert meta.position == pack_id(log[1599][0])
    await append(redis, keys.pubsub_events(), log[1600:])
    done = await job(spark, redis, keys, tmp_path, now=NOW + 2).run()
    expected = (
        (Kind.COMPACTED, Why.REDIS_BEHIND) if step == "switch" else (Kind.INCREMENTAL, Why.NONE)
    )
    assert (done.kind, done.why) == expected
    await check(spark, redis, keys, tmp_path, log, NOW + 2)
