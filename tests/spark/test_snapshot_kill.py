"""The snapshot job killed for real: ``python -m spark.snapshot`` runs as its own process
(with its own JVM once it folds) against the test's redis-server and storage, is held
at a named point by the test-only hook (spark/pause.py: it writes a file there and
waits), and is then SIGKILLed with its whole process group, as a node loss or the OOM
killer would end the CronJob's pod. Nothing of it runs after the kill: no ``finally``,
no shutdown hook.

Two deaths in a row, then a run that lives: the first job is killed mid-export (its
second range written under a temporary name, the first renamed into place); the next is
killed between its export and its switch (the Parquet snapshot with ``_SUCCESS`` and the
new Redis generation written, the switch not done). The last run (in this process, on
the session's SparkSession: a third JVM start would buy nothing, what matters is the
state the killed processes left) exports, folds and switches. Each event is in exactly
one exported file, the Redis snapshot is the reference fold of the whole log, and no
killed run switched or trimmed anything. (A run stopped in-process before the fold is
tests/spark/test_snapshot_job.py's.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest
from redis.asyncio import Redis

from apexmesh.pubsub.catalogue import fold, pack_id
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub_snapshot import SnapshotStore
from spark.conf import CONF_FILE_ENV
from spark.export import EVENTS_DIR, exported
from spark.layers import snapshots
from spark.pause import PAUSE_AT_ENV, PAUSE_FILE_ENV
from spark.snapshot import JobStopped, SnapshotJob
from spark.storage import Storage
from tests.spark.test_snapshot_job import exported_ids, redis_catalogue, settings_for
from tests.support.polling import block_until, scaled
from tests.support.pubsub_events import BASE_MS, append, random_log, shifted
from tests.support.redis_server import RedisServer
from tests.support.spark import properties
from tests.support.spark_standalone import group_alive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
#: Events a file in both the killed run and the next one.
BATCH = 500
#: Seconds the killed job gets to reach its point (a JVM start on a loaded machine).
REACH_TIMEOUT = 300.0


def job_env(
    server: RedisServer, keys: Keys, storage: Path, point: str, ready: Path
) -> dict[str, str]:
    """The job's environment as the chart's CronJob gives it, plus the hold at ``point``
    (spark/pause.py) and the tests' JVM option (tests/support/spark.py)."""
    conf = ready.with_suffix(".properties")
    conf.write_text(properties())
    return {
        **os.environ,
        "APEXMESH_DEV": "1",
        "APEXMESH_REDIS_URL": server.url,
        "APEXMESH_REDIS_PREFIX": keys.prefix,
        "APEXMESH_SNAPSHOT_STORAGE": str(storage),
        "APEXMESH_SNAPSHOT_MASTER": "local[2]",
        "APEXMESH_SNAPSHOT_EXPORT_BATCH": str(BATCH),
        "APEXMESH_SNAPSHOT_RETENTION": "3",
        # the killed JVM's scratch space (no shutdown hook removes it) under the test's
        "SPARK_LOCAL_DIRS": str(ready.parent / "spark-local"),
        CONF_FILE_ENV: str(conf),
        PAUSE_AT_ENV: point,
        PAUSE_FILE_ENV: str(ready),
    }


def run_and_kill(env: dict[str, str]) -> None:
    """Start the job in a process group of its own, wait until it holds at its point,
    SIGKILL the group and wait until none of it runs."""
    ready = Path(env[PAUSE_FILE_ENV])
    job = subprocess.Popen(
        [sys.executable, "-m", "spark.snapshot"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def reached() -> bool:
            if ready.exists():
                return True
            if job.poll() is not None:
                output = job.stdout.read().decode() if job.stdout else ""
                pytest.fail(f"the job ended ({job.returncode}) before its point:\n{output}")
            return False

        block_until(reached, REACH_TIMEOUT, every=0.1, what=f"the job at {env[PAUSE_AT_ENV]}")
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=scaled(60))
        if job.stdout:
            job.stdout.close()
    assert job.returncode == -signal.SIGKILL
    block_until(
        lambda: not group_alive(job.pid),
        60,
        every=0.1,
        what="no process of the killed job outliving the kill",
    )


async def test_runs_killed_mid_export_and_before_the_switch_lose_and_duplicate_nothing(
    spark: SparkSession,
    redis: Redis,
    redis_server: RedisServer,
    keys: Keys,
    tmp_path: Path,
) -> None:
    # a log around now, so that the killed jobs' own clock sees live leases
    log = shifted(random_log(2000, seed=17), time.time_ns() // 1_000_000 - BASE_MS)
    first, second = log[:1200], log[1200:]
    await append(redis, keys.pubsub_events(), first)
    storage = tmp_path / "storage"
    events_dir = storage / EVENTS_DIR
    store = SnapshotStore(redis, keys)

    def temporaries() -> list[str]:
        return [p.name for p in events_dir.iterdir() if p.name.startswith(".tmp-")]

    # 1. killed mid-export: the first range renamed into place, the second written under
    # its temporary name and not renamed
    run_and_kill(job_env(redis_server, keys, storage, "export.publish:2", tmp_path / "held-1"))
    (only,) = exported(Storage(str(storage)))
    assert exported_ids(storage) == [pack_id(i) for i, _ in first[:BATCH]]
    (half,) = temporaries()
    assert pq.read_table(events_dir / half).num_rows == BATCH
    assert only.name != half
    assert await store.meta() is None  # nothing switched
    assert await redis.xlen(keys.pubsub_events()) == len(first)  # nothing trimmed

    # 2. the next run, killed after its export, fold, Parquet snapshot and Redis
    # generation, just before the switch
    run_and_kill(job_env(redis_server, keys, storage, "switch", tmp_path / "held-2"))
    assert not temporaries()  # the dead run's half file is gone, its range exported again
    assert sorted(exported_ids(storage)) == [pack_id(i) for i, _ in first]  # once each
    (written,) = snapshots(Storage(str(storage)))
    manifest = Storage(str(storage)).read_json(f"{written.directory}/manifest.json")
    for key in (
        keys.pubsub_snapshot_topics(manifest["generation"]),
        keys.pubsub_snapshot_subscriptions(manifest["generation"]),
    ):
        assert await redis.pttl(key) > 0  # written, never switched to, expires by itself
    assert await store.meta() is None
    assert await redis.xlen(keys.pubsub_events()) == len(first)

    # 3. more events, and a run that lives, looked at before its trim and retention
    # (which drop covered ranges)
    await append(redis, keys.pubsub_events(), second)
    rerun = SnapshotJob(settings_for(keys, storage, export_batch=BATCH), spark, redis)
    with pytest.raises(JobStopped):
        await rerun.run(stop_before="trim")
    ids = exported_ids(storage)
    assert sorted(ids) == [pack_id(i) for i, _ in log]  # each event exactly once
    assert len(ids) == len(set(ids))
    assert not temporaries()
    meta = await store.meta()
    assert meta is not None
    assert meta.position == pack_id(log[-1][0])
    expected = fold(log, meta.snapshot_ms)
    assert await redis_catalogue(redis, keys) == expected
    assert expected.subscriptions, "the log keeps live subscriptions at the job's clock"
    assert await redis.xlen(keys.pubsub_events()) == len(log)  # not trimmed yet
