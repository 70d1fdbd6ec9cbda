"""Settings of the snapshot job (spark/settings.py): the chart's variables, defaults and
validation with the variable's name."""

from __future__ import annotations

import pytest

from apexmesh.ops.settings import SettingsError
from spark.settings import DEFAULT_STORAGE, SnapshotSettings
from spark.storage import Storage

pytestmark = pytest.mark.unit

BASE = {"APEXMESH_DEV": "1"}


def test_defaults_and_the_charts_variables() -> None:
    settings = SnapshotSettings.from_env(BASE)
    assert settings.storage == DEFAULT_STORAGE
    assert (settings.retention, settings.master, settings.driver_memory) == (24, "local[*]", "1g")
    assert settings.shuffle_partitions == 4
    assert settings.trim
    chart = SnapshotSettings.from_env(
        {
            **BASE,
            "APEXMESH_SNAPSHOT_STORAGE": "s3a://bucket/apex/",
            "APEXMESH_SNAPSHOT_RETENTION": "3",
            "APEXMESH_SNAPSHOT_MASTER": "k8s://https://kubernetes.default.svc",
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
