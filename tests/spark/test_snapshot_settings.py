"""Settings of the snapshot job (spark/settings.py): the chart's variables, defaults and
validation with the variable's name."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from apexmesh.ops.settings import SettingsError
from spark.conf import CONF_FILE_ENV
from spark.settings import DEFAULT_STORAGE, SnapshotSettings
from spark.storage import Storage, s3_options

pytestmark = pytest.mark.unit

BASE = {"APEXMESH_DEV": "1"}


def test_defaults_and_the_charts_variables() -> None:
    settings = SnapshotSettings.from_env(BASE)
    assert settings.storage == DEFAULT_STORAGE
    assert (settings.retention, settings.master, settings.driver_memory) == (24, "local[*]", "1g")
    assert settings.shuffle_partitions == 32
    assert settings.trim
    chart = SnapshotSettings.from_env(
        {
            **BASE,
            "APEXMESH_SNAPSHOT_STORAGE": "s3a://bucket/apex/",
            "APEXMESH_SNAPSHOT_RETENTION": "3",
            "APEXMESH_SNAPSHOT_MASTER": "k8s://https://kubernetes.default.svc",
            "APEXMESH_SNAPSHOT_DRIVER_HOST": "10.1.2.3",
            "APEXMESH_SNAPSHOT_DRIVER_MEMORY": "2g",
            "APEXMESH_PUBSUB_DOMAINS": "example.com",
            "APEXMESH_SNAPSHOT_TRIM": "0",
        }
    )
    assert chart.storage == "s3a://bucket/apex"
    assert (chart.retention, chart.driver_memory, chart.domains) == (3, "2g", ("example.com",))
    assert chart.master.startswith("k8s://")
    assert not chart.trim
    assert Storage(chart.storage).spark_url("events/x") == "s3a://bucket/apex/events/x"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("APEXMESH_SNAPSHOT_STORAGE", "hdfs://nn/x"),
        ("APEXMESH_SNAPSHOT_DRIVER_MEMORY", "lots"),
        ("APEXMESH_SNAPSHOT_RETENTION", "0"),
    ],
)
def test_bad_values_name_their_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        SnapshotSettings.from_env({**BASE, name: value})


def test_redis_needs_a_password_outside_development() -> None:
    with pytest.raises(SettingsError, match=r"APEXMESH_REDIS_URL|password|TLS"):
        SnapshotSettings.from_env({})


K8S = {
    **BASE,
    "APEXMESH_SNAPSHOT_MASTER": "k8s://https://kubernetes.default.svc",
    "APEXMESH_SNAPSHOT_STORAGE": "s3a://snapshots/apex",
}


def test_spark_on_kubernetes_needs_the_drivers_address() -> None:
    with pytest.raises(SettingsError, match="APEXMESH_SNAPSHOT_DRIVER_HOST"):
        SnapshotSettings.from_env(K8S)
    settings = SnapshotSettings.from_env(
        {
            **K8S,
            "APEXMESH_SNAPSHOT_DRIVER_HOST": "10.1.2.3",
            "APEXMESH_SNAPSHOT_DRIVER_POD": "apex-mesh-snapshot-1-abcde",
        }
    )
    conf = dict(settings.session_conf())
    assert conf["spark.driver.host"] == "10.1.2.3"
    assert conf["spark.kubernetes.driver.pod.name"] == "apex-mesh-snapshot-1-abcde"


def test_the_spark_conf_file_is_read_and_checked(tmp_path: Path) -> None:
    conf = tmp_path / "spark.properties"
    conf.write_text(
        "spark.executor.instances 3\n"
        "spark.jars.packages org.apache.hadoop:hadoop-aws:3.5.0\n"
        "spark.hadoop.fs.s3a.endpoint http://minio.storage:9000\n"
        "spark.hadoop.fs.s3a.path.style.access true\n"
    )
    env = {**K8S, CONF_FILE_ENV: str(conf), "APEXMESH_SNAPSHOT_DRIVER_HOST": "10.1.2.3"}
    settings = SnapshotSettings.from_env(env)
    pairs = dict(settings.session_conf())
    assert pairs["spark.executor.instances"] == "3"
    assert pairs["spark.jars.packages"] == "org.apache.hadoop:hadoop-aws:3.5.0"
    # the driver's own S3 access follows the same S3A settings
    storage = Storage.configured(settings.storage, settings.session_conf())
    assert isinstance(storage.filesystem, pafs.S3FileSystem)
    args = storage.filesystem.__reduce__()[1][0]
    assert (args["scheme"], args["endpoint_override"]) == ("http", "minio.storage:9000")
    assert not args["force_virtual_addressing"]
    assert storage.path("events/x") == "snapshots/apex/events/x"
    assert storage.spark_url("events/x") == "s3a://snapshots/apex/events/x"

    conf.write_text("spark.master local[8]\n")
    with pytest.raises(SettingsError, match="APEXMESH_SNAPSHOT_MASTER"):
        SnapshotSettings.from_env(env)
    with pytest.raises(SettingsError, match=CONF_FILE_ENV):
        SnapshotSettings.from_env({**env, CONF_FILE_ENV: str(tmp_path / "missing")})


def test_s3_options_from_the_s3a_settings() -> None:
    assert s3_options([]) == ()
    assert dict(
        s3_options(
            [
                ("spark.hadoop.fs.s3a.endpoint", "s3.eu-west-1.amazonaws.com"),
                ("spark.hadoop.fs.s3a.endpoint.region", "eu-west-1"),
                ("spark.executor.instances", "2"),
            ]
        )
    ) == {
        "endpoint_override": "s3.eu-west-1.amazonaws.com",
        "scheme": "https",
        "force_virtual_addressing": True,
        "region": "eu-west-1",
    }
    plain = dict(
        s3_options(
            [
                ("spark.hadoop.fs.s3a.endpoint", "minio:9000"),
                ("spark.hadoop.fs.s3a.connection.ssl.enabled", "false"),
            ]
        )
    )
    assert plain["scheme"] == "http"
    # a local storage has no S3 options whatever the settings say
    assert Storage.configured("/var/x", [("spark.hadoop.fs.s3a.endpoint", "m:9")]).s3 == ()
