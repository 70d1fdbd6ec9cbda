"""Settings of the snapshot job, read once from environment variables (the chart's
CronJob sets them: charts/apex-mesh/templates/snapshot-cronjob.yaml).

- ``APEXMESH_SNAPSHOT_STORAGE`` (``/var/lib/apex-mesh/snapshots``): where exported events
  and snapshots go: a local directory (a PVC in the chart), ``file://...`` or
  ``s3a://bucket/prefix`` (Spark through Hadoop's S3A, the driver through pyarrow's S3).
- ``APEXMESH_SNAPSHOT_RETENTION`` (``24``): complete snapshots kept; older ones, and
  exported events they alone covered, are removed.
- ``APEXMESH_SNAPSHOT_MASTER`` (``local[*]``): the Spark master (``k8s://...`` on a
  cluster).
- ``APEXMESH_SNAPSHOT_DRIVER_MEMORY`` (``1g``): ``spark.driver.memory``.
- ``APEXMESH_SNAPSHOT_SHUFFLE_PARTITIONS`` (``32``): ``spark.sql.shuffle.partitions``, the
  most partitions a shuffle gets; adaptive execution coalesces them to about 16 MB each
  (``spark/session.py``), so a small log still runs as one or two tasks.
- ``APEXMESH_SNAPSHOT_EXPORT_BATCH`` (``200000``): events per exported file at most.
- ``APEXMESH_SNAPSHOT_COMPACT_AFTER`` (``24``): change layers a snapshot may be read
  with (one per incremental run, spark/layers.py); the run that would add one more
  folds them into a full layer instead (a compaction). ``0``: every run writes a full
  layer.
- ``APEXMESH_SNAPSHOT_TRIM`` (``1``): trim the log up to what the new snapshot covers.
- ``APEXMESH_SNAPSHOT_GRACE_MS`` (``600000``): how long the previous Redis snapshot stays
  readable after the switch.
- ``APEXMESH_SNAPSHOT_SPARK_CONF_FILE`` (optional): a ``spark-defaults.conf``-style file
  of further Spark settings (``spark/conf.py``): the chart's ``snapshot.sparkConf``,
  Spark on Kubernetes, S3A. The S3A endpoint, region and path style there also set the
  driver's own S3 access (``spark/storage.py``), so both reach the same store.
- ``APEXMESH_SNAPSHOT_DRIVER_HOST``, ``APEXMESH_SNAPSHOT_DRIVER_POD``: with a ``k8s://``
  master (client mode, the driver in the CronJob's pod), the pod's IP (required: the
  executors dial the driver there) and the pod's name (the executors' owner).
- ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (not read here): S3 credentials, read
  from the environment by Hadoop's S3A and by pyarrow alike.
- ``APEXMESH_REDIS_URL``, ``APEXMESH_REDIS_PREFIX``, ``APEXMESH_REDIS_MAX_CONNECTIONS``,
  ``APEXMESH_REDIS_POOL_TIMEOUT_SECONDS``, ``APEXMESH_DEV``: as for the services.
- ``APEXMESH_PUBSUB_DOMAINS`` (optional): reported in the summary; the snapshot holds
  every domain of the log.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from apexmesh.ops.settings import (
    DEV_FLAG,
    SettingsError,
    check_redis_url,
    env_flag,
    env_int,
    env_list,
)
from apexmesh.store.connection import RedisPoolSettings
from apexmesh.store.pubsub_snapshot import DEFAULT_GRACE_MS
from spark.conf import CONF_FILE_ENV, client_mode, parse_properties

#: The storage of the chart's CronJob (its PVC's mount).
DEFAULT_STORAGE = "/var/lib/apex-mesh/snapshots"
#: Most partitions of a shuffle (coalesced by adaptive execution: spark/session.py).
DEFAULT_SHUFFLE_PARTITIONS = 32
#: Change layers a snapshot is read with at most: a day of hourly runs (docs/snapshot.md
#: "Incremental runs").
DEFAULT_COMPACT_AFTER = 24


@dataclass(frozen=True, slots=True)
class SnapshotSettings:
    storage: str
    retention: int
    master: str
    driver_memory: str
    shuffle_partitions: int
    export_batch: int
    trim: bool
    grace_ms: int
    redis_url: str
    redis_prefix: str
    redis_pool: RedisPoolSettings
    domains: tuple[str, ...] = ()
    compact_after: int = DEFAULT_COMPACT_AFTER
    #: Further Spark settings, in order (``APEXMESH_SNAPSHOT_SPARK_CONF_FILE``).
    spark_conf: tuple[tuple[str, str], ...] = ()
    driver_host: str = ""
    driver_pod: str = ""

    def session_conf(self) -> tuple[tuple[str, str], ...]:
        """Everything the session gets beyond master, memory and partitions: the file's
        settings, then the per-pod client-mode ones."""
        return self.spark_conf + client_mode(self.driver_host, self.driver_pod)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SnapshotSettings:
        """Read and validate; raise :class:`SettingsError` with the variable's name."""
        env = os.environ if env is None else env
        dev = env_flag(env, DEV_FLAG)
        storage = env.get("APEXMESH_SNAPSHOT_STORAGE", "") or DEFAULT_STORAGE
        if "://" in storage and not storage.startswith(("file://", "s3a://")):
            raise SettingsError("APEXMESH_SNAPSHOT_STORAGE must be a path, file:// or s3a://")
        memory = env.get("APEXMESH_SNAPSHOT_DRIVER_MEMORY", "") or "1g"
        if not memory[:-1].isdigit() or memory[-1].lower() not in "kmgt":
            raise SettingsError("APEXMESH_SNAPSHOT_DRIVER_MEMORY must look like 512m or 2g")
        master = env.get("APEXMESH_SNAPSHOT_MASTER", "") or "local[*]"
        driver_host = env.get("APEXMESH_SNAPSHOT_DRIVER_HOST", "")
        if master.startswith("k8s://") and not driver_host:
            raise SettingsError(
                "APEXMESH_SNAPSHOT_DRIVER_HOST: required with a k8s:// master (the address "
                "the executors reach the driver at: its pod's IP)"
            )
        conf_file = env.get(CONF_FILE_ENV, "")
        spark_conf: tuple[tuple[str, str], ...] = ()
        if conf_file:
            try:
                text = Path(conf_file).read_text(encoding="utf-8")
            except OSError as exc:
                raise SettingsError(f"{CONF_FILE_ENV}: cannot read {conf_file}: {exc}") from exc
            spark_conf = parse_properties(text)
        return cls(
            storage=storage.rstrip("/"),
            retention=env_int(env, "APEXMESH_SNAPSHOT_RETENTION", 24, low=1, high=100_000),
            master=master,
            driver_memory=memory,
            shuffle_partitions=env_int(
                env,
                "APEXMESH_SNAPSHOT_SHUFFLE_PARTITIONS",
                DEFAULT_SHUFFLE_PARTITIONS,
                low=1,
                high=100_000,
            ),
            export_batch=env_int(
                env, "APEXMESH_SNAPSHOT_EXPORT_BATCH", 200_000, low=1, high=100_000_000
            ),
            trim=env.get("APEXMESH_SNAPSHOT_TRIM", "1") != "0",
            grace_ms=env_int(
                env, "APEXMESH_SNAPSHOT_GRACE_MS", DEFAULT_GRACE_MS, low=0, high=86_400_000
            ),
            redis_url=check_redis_url(
                env.get("APEXMESH_REDIS_URL", "redis://127.0.0.1:6379/0"), dev=dev
            ),
            redis_prefix=env.get("APEXMESH_REDIS_PREFIX", "apexmesh") or "apexmesh",
            redis_pool=RedisPoolSettings.from_env(env),
            domains=env_list(env, "APEXMESH_PUBSUB_DOMAINS"),
            compact_after=env_int(
                env, "APEXMESH_SNAPSHOT_COMPACT_AFTER", DEFAULT_COMPACT_AFTER, low=0, high=10_000
            ),
            spark_conf=spark_conf,
            driver_host=driver_host,
            driver_pod=env.get("APEXMESH_SNAPSHOT_DRIVER_POD", ""),
        )


__all__ = [
    "DEFAULT_COMPACT_AFTER",
    "DEFAULT_SHUFFLE_PARTITIONS",
    "DEFAULT_STORAGE",
    "SnapshotSettings",
]
