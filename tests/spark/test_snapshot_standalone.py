"""The snapshot job on a real Spark cluster: a standalone master and two workers on
loopback (tests/support/spark_standalone.py, from pyspark's own ``spark-class``), the job
submitted to it as the chart's CronJob runs it (``python -m spark.snapshot``, its master
``spark://...``), and one executor JVM killed with SIGKILL in the middle of a task.

The job holds once its session is up (spark/pause.py, point ``spark``) until both
executors have registered; the test then lets it go and watches the executors' task
logs. When one shows a task started and not finished, the test stops that executor
(SIGSTOP), reads its log again (the executor writes "Finished" before it reports a task,
so a task not finished in the log of a stopped executor is not reported), and kills it
(SIGKILL), else lets it go on and waits for the next. Spark must then do what a lost
node asks of it: run the lost task again, recompute the lost executor's shuffle output
and cached blocks, start a new executor on that worker. The driver's event log shows
it did (the task ended by ExecutorLostFailure, the executor removed and another added),
and the snapshot, in Redis and in Parquet, is still the reference fold of the log.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from redis.asyncio import Redis

from apexmesh.pubsub.catalogue import SubscriptionRow, TopicRow, fold
from apexmesh.store.keys import Keys
from spark.conf import CONF_FILE_ENV
from spark.pause import PAUSE_AT_ENV, PAUSE_FILE_ENV
from tests.spark.test_snapshot_job import redis_catalogue
from tests.support.polling import block_until
from tests.support.pubsub_events import BASE_MS, append, random_log, shifted
from tests.support.redis_server import RedisServer
from tests.support.spark import TEST_JVM
from tests.support.spark_standalone import (
    Executor,
    StandaloneCluster,
    finished,
    in_flight,
    standalone_cluster,
    stop_group,
)

pytestmark = [pytest.mark.system, pytest.mark.spark, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
#: Events in the log, and per exported file: enough files that the fold's scans run as
#: many tasks, spread over both executors, each long enough to be caught running.
EVENTS = 60_000
BATCH = 5_000
#: Tasks finished after the hold before the kill: the executors then hold shuffle
#: output of earlier stages, which the kill loses too.
WARM_TASKS = 6
#: Seconds for a JVM to start, a job to reach its point or to end, on a loaded machine.
TIMEOUT = 600.0


def job_env(
    cluster: StandaloneCluster, server: RedisServer, keys: Keys, root: Path
) -> dict[str, str]:
    """The job's environment as the chart's CronJob gives it, with the cluster as its
    master, the test's JVM options, the executors' task log, Spark's event log, and the
    hold once the session is up."""
    events = root / "event-log"
    events.mkdir()
    conf = root / "spark.properties"
    conf.write_text(
        f"spark.driver.extraJavaOptions {TEST_JVM}\n"
        f"spark.executor.extraJavaOptions {TEST_JVM} "
        f"-Dlog4j2.configurationFile=file:{cluster.executor_log4j}\n"
        "spark.executor.memory 512m\n"
        "spark.eventLog.enabled true\n"
        f"spark.eventLog.dir file://{events}\n"
        "spark.eventLog.compress false\n"
        "spark.eventLog.rolling.enabled false\n"
    )
    return {
        **os.environ,
        "APEXMESH_DEV": "1",
        "APEXMESH_REDIS_URL": server.url,
        "APEXMESH_REDIS_PREFIX": keys.prefix,
        "APEXMESH_SNAPSHOT_STORAGE": str(root / "storage"),
        "APEXMESH_SNAPSHOT_MASTER": cluster.master_url,
        "APEXMESH_SNAPSHOT_EXPORT_BATCH": str(BATCH),
        "SPARK_LOCAL_DIRS": str(root / "driver-local"),
        CONF_FILE_ENV: str(conf),
        PAUSE_AT_ENV: "spark",
        PAUSE_FILE_ENV: str(root / "held"),
    }


def wait_for(what: str, check: Any, job: subprocess.Popen[bytes]) -> Any:
    """Poll ``check()`` until it returns something true; fail if the job ends first."""

    def found() -> Any:
        outcome = check()
        if not outcome and job.poll() is not None:
            pytest.fail(f"the job ended ({job.returncode}) before {what}")
        return outcome

    return block_until(found, TIMEOUT, every=0.05, what=what)


def kill_one_mid_task(
    cluster: StandaloneCluster, app_id: str, job: subprocess.Popen[bytes]
) -> tuple[Executor, int]:
    """Kill an executor of ``app_id`` that has a task in flight (module docstring);
    the executor and the task's id."""
    executors = [e for e in cluster.executors() if e.app_id == app_id]
    before = sum(len(finished(e.tasks_log)) for e in executors)
    while job.poll() is None:
        executors = [e for e in cluster.executors() if e.app_id == app_id]
        done = sum(len(finished(e.tasks_log)) for e in executors)
        for executor in executors:
            if done < before + WARM_TASKS or not in_flight(executor.tasks_log):
                continue
            os.kill(executor.pid, signal.SIGSTOP)
            caught = in_flight(executor.tasks_log)  # read again: it cannot move now
            if caught:
                os.kill(executor.pid, signal.SIGKILL)
                return executor, min(caught)
            os.kill(executor.pid, signal.SIGCONT)
        # Poll interval of a race (catching a task in flight), bounded by the job's end:
        # no condition to wait for, each round may act.
        time.sleep(0.005)
    pytest.fail("the job ended before a task was caught in flight")


def event_log(root: Path) -> list[dict[str, Any]]:
    (path,) = (root / "event-log").iterdir()
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def parquet_rows(directory: Path) -> tuple[set[TopicRow], set[SubscriptionRow]]:
    topics = pq.read_table(directory / "topics").to_pylist()
    subs = pq.read_table(directory / "subscriptions").to_pylist()
    return {TopicRow(**r) for r in topics}, {SubscriptionRow(**r) for r in subs}


def run_on_cluster(
    server: RedisServer, keys: Keys, root: Path
) -> tuple[dict[str, Any], Executor, int]:
    """Start the cluster, run the job on it, kill an executor mid-task (module
    docstring), stop everything; the job's result, the executor killed, its task."""
    held = root / "held"
    with standalone_cluster(root / "cluster", workers=2, cores=1, memory="1g") as cluster:
        workers = cluster.status()["workers"]
        assert [w["state"] for w in workers] == ["ALIVE", "ALIVE"]
        assert all(w["host"] == "127.0.0.1" and w["port"] > 0 for w in workers)
        with (root / "job.log").open("wb") as output:
            job = subprocess.Popen(
                [sys.executable, "-m", "spark.snapshot"],
                cwd=ROOT,
                env=job_env(cluster, server, keys, root),
                stdout=subprocess.PIPE,
                stderr=output,
                start_new_session=True,
            )
        try:
            # held with its session up, until both executors run
            wait_for("the hold", held.exists, job)
            (app,) = wait_for("the application", lambda: cluster.status()["activeapps"], job)
            wait_for(
                "two executors",
                lambda: len([e for e in cluster.executors() if e.tasks_log.exists()]) == 2,
                job,
            )
            held.unlink()  # go on
            killed, task = kill_one_mid_task(cluster, app["id"], job)
            out, _ = job.communicate(timeout=TIMEOUT)
        finally:
            stop_group(job)
            if job.stdout:
                job.stdout.close()
        stderr = (root / "job.log").read_text(errors="replace")[-6000:]
        assert job.returncode == 0, stderr
    # the master had the worker that lost its executor start another
    worker_log = (root / "cluster" / f"{killed.directory.parents[1].name}.log").read_text()
    launched = set(re.findall(rf"Asked to launch executor {killed.app_id}/(\d+)", worker_log))
    assert killed.executor_id in launched
    assert launched - {killed.executor_id}, worker_log[-4000:]
    return json.loads(out.decode().splitlines()[-1]), killed, task


async def test_the_job_on_a_standalone_cluster_survives_an_executor_killed_mid_task(
    redis: Redis, redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    # a log around now, so that the job's own clock sees live leases
    log = shifted(random_log(EVENTS, seed=61), time.time_ns() // 1_000_000 - BASE_MS)
    await append(redis, keys.pubsub_events(), log)
    result, killed, task = await asyncio.to_thread(run_on_cluster, redis_server, keys, tmp_path)
    assert result["kind"] == "full"

    # Spark saw the kill land in the middle of a task, and recovered from it
    events = event_log(tmp_path)
    lost = [
        e
        for e in events
        if e["Event"] == "SparkListenerTaskEnd"
        and e["Task End Reason"]["Reason"] == "ExecutorLostFailure"
    ]
    assert task in {e["Task Info"]["Task ID"] for e in lost}, lost
    assert {e["Task End Reason"]["Executor ID"] for e in lost} == {killed.executor_id}
    removed = [e["Executor ID"] for e in events if e["Event"] == "SparkListenerExecutorRemoved"]
    assert killed.executor_id in removed

    # and the snapshot is the reference fold of the whole log, in Redis and in Parquet
    expected = fold(log, result["snapshot_ms"])
    assert expected.subscriptions, "the log keeps live subscriptions at the job's clock"
    assert await redis_catalogue(redis, keys) == expected
    directory = Path(result["directory"].removeprefix("file://"))
    assert parquet_rows(directory) == (
        set(expected.topics.values()),
        set(expected.subscriptions.values()),
    )
