"""An S3 stand-in for the opt-in s3a:// test of the snapshot job: moto's server mode on a
loopback port (from the virtualenv scripts/s3a-stand-in makes: moto cannot share the
project's .venv), and the Spark settings that let the only S3A jars reachable here work.

Those jars (hadoop-aws 3.3.1 with the AWS SDK v1 bundle, shipped by sagemaker-pyspark on
PyPI) were built for Hadoop 3.3; pyspark 4.3.0 carries Hadoop 3.5.0, whose defaults an
older S3A cannot read: durations with units ("60s", where 3.3 parses a number) and an
SDK v2 credentials provider. :data:`S3A_33_ON_HADOOP_35` sets those few back. Production
does not need them: it uses hadoop-aws 3.5.0 through spark.jars.packages (the chart's
snapshot.s3.packages).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from tests.support.polling import scaled
from tests.support.redis_server import free_port

MOTO_ENV: Final = "APEXMESH_TEST_MOTO_SERVER"
JARS_ENV: Final = "APEXMESH_TEST_S3A_JARS"

#: hadoop-aws 3.3 on Hadoop 3.5's defaults (module docstring); milliseconds and seconds
#: as plain numbers, the SDK v1 provider of the same environment variables.
S3A_33_ON_HADOOP_35: Final = (
    (
        "spark.hadoop.fs.s3a.aws.credentials.provider",
        "com.amazonaws.auth.EnvironmentVariableCredentialsProvider",
    ),
    ("spark.hadoop.fs.s3a.threads.keepalivetime", "60"),
    ("spark.hadoop.fs.s3a.connection.timeout", "200000"),
    ("spark.hadoop.fs.s3a.connection.establish.timeout", "30000"),
    ("spark.hadoop.fs.s3a.multipart.purge.age", "86400"),
    ("spark.hadoop.fs.s3a.connection.ttl", "300000"),
    ("spark.hadoop.fs.s3a.connection.idle.time", "60000"),
    ("spark.hadoop.fs.s3a.connection.acquisition.timeout", "60000"),
    ("spark.hadoop.fs.s3a.connection.request.timeout", "60000"),
)


def available() -> str:
    """Why the s3a test cannot run here ("" when it can)."""
    server, jars = os.environ.get(MOTO_ENV, ""), os.environ.get(JARS_ENV, "")
    if not server or not jars:
        return f"set {MOTO_ENV} and {JARS_ENV} (scripts/s3a-stand-in prints them)"
    missing = [p for p in (server, *jars.split(",")) if not Path(p).exists()]
    return f"missing: {', '.join(missing)}" if missing else ""


@contextmanager
def moto_server(timeout: float = 30.0) -> Iterator[str]:
    """moto's S3 on a free loopback port; its endpoint URL."""
    port = free_port()
    process = subprocess.Popen(
        [os.environ[MOTO_ENV], "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + scaled(timeout)
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=scaled(0.5)):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start on port {port}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=scaled(30))
