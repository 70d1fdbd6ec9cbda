"""The job's SparkSession, with the settings this machine and the chart need
(shared/ECOSYSTEM.md section 5: loopback, no UI, an ivy dir and a Python for the workers
that exist under a UID without a home).

Shuffle partitions: the fold's one big shuffle is sorted on the reduce side (spark/fold.py).
With a few large partitions that sort outgrew a task's share of a 1-2 GB driver and
spilled (452 MB spilled at 10 million events with 4 partitions: docs/snapshot.md). So a
shuffle may have up to ``shuffle_partitions`` partitions and adaptive execution coalesces
them to about 16 MB of shuffle data each (Spark's 64 MB default is sized for executors
with more memory): a small log still runs as one or two tasks, a large one as many
tasks that each sort in memory."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Final

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

#: What S3A needs on Spark's classpath, and where the chart's values set it.
S3A_MISSING = (
    "s3a:// storage needs Hadoop's S3A on Spark's classpath (hadoop-aws of the Hadoop "
    "version of Spark's own jars, and the AWS SDK it depends on): set spark.jars.packages "
    "(the chart's snapshot.s3.packages, fetched from Maven Central or its mirror when the "
    "session starts) or put the jars in the image's pyspark/jars"
)


def spark_session(
    master: str = "local[*]",
    *,
    driver_memory: str = "1g",
    shuffle_partitions: int = 32,
    app_name: str = "apex-mesh-snapshot",
    conf: Iterable[tuple[str, str]] = (),
) -> SparkSession:
    """A session (the running one when there is one: a test session's fixture).
    ``conf`` is set last, over these defaults (spark/settings.py: the chart's
    ``snapshot.sparkConf`` and the Spark-on-Kubernetes settings)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.adaptive.advisoryPartitionSizeInBytes", "16m")
        .config("spark.jars.ivy", "/tmp/.ivy2")  # noqa: S108 - Spark's ivy cache, no secrets
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.compression.codec", "snappy")
    )
    for key, value in conf:
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


#: Below this many rows to fold (events after the base snapshot, plus its rows), the
#: driver's JIT compiles with C1 alone (:func:`jit_conf`).
QUICK_JIT_ROWS: Final = 200_000


def jit_conf(rows: int) -> tuple[tuple[str, str], ...]:
    """The driver JVM's compiler for a fold of ``rows``: a small fold is all warm-up (each
    query is new generated code, run once over little data), so C2's optimizing work
    never pays back and C1 alone finishes sooner (measured: a 300-event run's fold 6.5-8.1
    s instead of 10.2-13.4 s; a 4,000-event fold 5.7-5.9 s instead of 8.0-10.5 s,
    docs/snapshot.md). A large fold keeps C2. Settings given later (the chart's
    ``snapshot.sparkConf``) override this."""
    if rows < QUICK_JIT_ROWS:
        return (("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1"),)
    return ()


def require_s3a(spark: SparkSession) -> None:
    """Fail now, with what to change, when Hadoop has no ``s3a`` file system (instead of
    a ClassNotFoundException deep in the first write)."""
    context = spark.sparkContext
    jvm = getattr(context, "_jvm", None)
    conf = getattr(context, "_jsc", None)
    if jvm is None or conf is None:  # pragma: no cover - a classic session has both
        return
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass("s3a", conf.hadoopConfiguration())
    except Py4JJavaError as exc:
        raise RuntimeError(S3A_MISSING) from exc


__all__ = ["QUICK_JIT_ROWS", "S3A_MISSING", "jit_conf", "require_s3a", "spark_session"]
