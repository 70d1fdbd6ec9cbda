"""The snapshot job on s3a:// storage, end to end, when an S3 stand-in and S3A jars are
at hand (opt in: scripts/s3a-stand-in sets them up; skipped otherwise, as in CI: Maven,
where hadoop-aws 3.5.0 and the AWS SDK live, is not reachable here, and moto cannot live
in the project's .venv; docs/snapshot.md "s3a:// storage").

``python -m spark.snapshot`` runs as the chart's CronJob runs it, configured only through
APEXMESH_SNAPSHOT_STORAGE, a spark.properties file (APEXMESH_SNAPSHOT_SPARK_CONF_FILE)
and AWS_* variables: the driver exports the log to S3 with pyarrow, Spark reads and
writes the snapshot through S3A, and the Redis snapshot is the reference fold. A second
run folds the first one's snapshot, read back from S3, with the later events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from redis.asyncio import Redis

from apexmesh.pubsub.catalogue import fold, pack_id
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub_snapshot import SnapshotStore
from spark.conf import CONF_FILE_ENV
from spark.export import exported
from spark.layers import snapshots
from spark.storage import Storage
from tests.support import s3
from tests.support.polling import scaled
from tests.support.pubsub_events import BASE_MS, append, random_log, shifted
from tests.support.redis_server import RedisServer
from tests.support.spark import TEST_CONF

pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.timeout(900),
    pytest.mark.skipif(bool(s3.available()), reason=s3.available() or "s3a test"),
]

ROOT = Path(__file__).resolve().parents[2]
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "stand-in", "AWS_SECRET_ACCESS_KEY": "stand-in"}


def run_job(server: RedisServer, keys: Keys, storage: str, conf: Path) -> dict[str, object]:
    env = {
        **os.environ,
        **CREDENTIALS,
        "APEXMESH_DEV": "1",
        "APEXMESH_REDIS_URL": server.url,
        "APEXMESH_REDIS_PREFIX": keys.prefix,
        "APEXMESH_SNAPSHOT_STORAGE": storage,
        "APEXMESH_SNAPSHOT_MASTER": "local[2]",
        "APEXMESH_SNAPSHOT_EXPORT_BATCH": "700",
        CONF_FILE_ENV: str(conf),
    }
    done = subprocess.run(
        [sys.executable, "-m", "spark.snapshot"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(600),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


async def test_the_job_on_s3a_storage(
    redis: Redis, redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    log = shifted(random_log(2000, seed=23), time.time_ns() // 1_000_000 - BASE_MS)
    with s3.moto_server() as endpoint:
        settings = (
            ("spark.jars", os.environ[s3.JARS_ENV]),
            ("spark.hadoop.fs.s3a.endpoint", endpoint),
            ("spark.hadoop.fs.s3a.path.style.access", "true"),
            ("spark.hadoop.fs.s3a.endpoint.region", "us-east-1"),
            *s3.S3A_33_ON_HADOOP_35,
            *TEST_CONF,
        )
        conf = tmp_path / "spark.properties"
        conf.write_text("".join(f"{k} {v}\n" for k, v in settings))
        storage = Storage.configured("s3a://apex-snapshots/test", settings)
        os.environ.update(CREDENTIALS)  # pyarrow in this process, as in the job's
        bucket = pafs.S3FileSystem(**dict(storage.s3), allow_bucket_creation=True)
        bucket.create_dir("apex-snapshots")

        for part, now in ((log[:1300], 1), (log[1300:], 2)):
            await append(redis, keys.pubsub_events(), part)
            result = run_job(redis_server, keys, storage.url, conf)
            assert result["directory"] == f"{storage.url}/{snapshots(storage)[-1].directory}"
            meta = await SnapshotStore(redis, keys).meta()
            assert meta is not None
            so_far = log[: 1300 if now == 1 else len(log)]
            assert meta.position == pack_id(so_far[-1][0])
            found = await SnapshotStore(redis, keys).load()
            assert found == fold(so_far, meta.snapshot_ms)
            assert found is not None
            assert found.subscriptions
            assert await redis.xlen(keys.pubsub_events()) == 0  # trimmed after the switch
        # both snapshots in S3, the second built on the first; the ranges only the
        # first covered still there (retention keeps 24)
        assert len(snapshots(storage)) == 2
        assert exported(storage)
