"""The job's SparkSession, with the settings this machine and the chart need
(shared/ECOSYSTEM.md section 5: loopback, no UI, few shuffle partitions, an ivy dir and a
Python for the workers that exist under a UID without a home)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from pyspark.sql import SparkSession


def spark_session(
    master: str = "local[*]",
    *,
    driver_memory: str = "1g",
    shuffle_partitions: int = 4,
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
        .config("spark.jars.ivy", "/tmp/.ivy2")  # noqa: S108 - Spark's ivy cache, no secrets
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.compression.codec", "snappy")
    )
    for key, value in conf:
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


__all__ = ["spark_session"]
