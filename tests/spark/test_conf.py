"""The job's extra Spark settings (spark/conf.py): the properties file the chart renders,
refused keys with the line and the variable to use, and client mode's per-pod settings."""

from __future__ import annotations

import pytest

from apexmesh.ops.settings import SettingsError
from spark.conf import CONF_FILE_ENV, as_dict, client_mode, parse_properties

pytestmark = pytest.mark.unit


def test_properties_as_spark_defaults_conf_reads_them() -> None:
    text = """
# Spark on Kubernetes
spark.executor.instances   4
spark.kubernetes.executor.label.app.kubernetes.io/component=snapshot-executor
spark.hadoop.fs.s3a.endpoint: http://minio.storage:9000
! also a comment
spark.executor.instances 6
"""
    pairs = parse_properties(text)
    assert pairs[0] == ("spark.executor.instances", "4")
    assert pairs[1] == (
        "spark.kubernetes.executor.label.app.kubernetes.io/component",
        "snapshot-executor",
    )
    assert pairs[2] == ("spark.hadoop.fs.s3a.endpoint", "http://minio.storage:9000")
    assert as_dict(pairs)["spark.executor.instances"] == "6"  # the later one wins


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("spark.master k8s://https://x", "APEXMESH_SNAPSHOT_MASTER"),
        ("spark.driver.memory 4g", "APEXMESH_SNAPSHOT_DRIVER_MEMORY"),
        ("spark.sql.shuffle.partitions=8", "APEXMESH_SNAPSHOT_SHUFFLE_PARTITIONS"),
        ("fs.s3a.endpoint x", "not a spark"),
        ("spark.executor.instances", "expected 'key value'"),
    ],
)
def test_refused_lines_name_the_file_variable_the_line_and_why(line: str, says: str) -> None:
    with pytest.raises(SettingsError, match=f"{CONF_FILE_ENV} line 2: .*{says}"):
        parse_properties(f"spark.ok 1\n{line}\n")


def test_client_mode_settings_of_the_driver_pod() -> None:
    assert client_mode("", "") == ()
    assert as_dict(client_mode("10.1.2.3", "apex-mesh-snapshot-29-x7")) == {
        "spark.driver.host": "10.1.2.3",
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.kubernetes.driver.pod.name": "apex-mesh-snapshot-29-x7",
    }
