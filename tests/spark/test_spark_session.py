"""The job's SparkSession (spark/session.py) in a real local JVM: the settings it starts
with, and the s3a:// check that names what to change when Hadoop's S3A is missing (as
it is here: hadoop-aws and the AWS SDK come from Maven, which this machine cannot
reach, and no PyPI package ships a hadoop-aws of pyspark 4.3's Hadoop, 3.5.0)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from spark.session import S3A_MISSING, require_s3a

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]


def test_the_sessions_settings(spark: SparkSession) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.sql.session.timeZone") == "UTC"
    assert conf.get("spark.sql.adaptive.advisoryPartitionSizeInBytes") == "16m"
    assert conf.get("spark.jars.ivy") == "/tmp/.ivy2"  # noqa: S108 - the job's ivy cache


def test_s3a_storage_without_hadoop_aws_fails_with_what_to_change(spark: SparkSession) -> None:
    with pytest.raises(RuntimeError, match=r"spark\.jars\.packages") as caught:
        require_s3a(spark)
    assert str(caught.value) == S3A_MISSING
    assert "S3AFileSystem" in str(caught.value.__cause__)
