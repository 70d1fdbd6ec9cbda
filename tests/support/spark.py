"""Spark settings of the tests (the session fixture in tests/conftest.py, and the job
processes the kill tests start): the job's own settings plus one JVM option that only
saves time.

``-XX:TieredStopAtLevel=1``: the JIT stops at C1, the quick compiler. A test's folds are a
few thousand rows and every query is new generated code, so C2's optimizing work never
pays back; measured on this project's 2-core machine, the first fold of a 4,000-event
log took 5.7-5.9 s instead of 8.0-10.5 s and a repeated one 1.3-1.4 s instead of
1.8-2.8 s (docs/snapshot.md "Tests"). The bench and the chart's job keep the default:
at millions of events C2 pays back.
"""

from __future__ import annotations

from typing import Final

TEST_JVM: Final = "-XX:TieredStopAtLevel=1"

#: What the tests give spark_session (spark/session.py) beyond the job's own settings.
TEST_CONF: Final = (("spark.driver.extraJavaOptions", TEST_JVM),)


def properties() -> str:
    """:data:`TEST_CONF` as a spark.properties file (APEXMESH_SNAPSHOT_SPARK_CONF_FILE)."""
    return "".join(f"{key} {value}\n" for key, value in TEST_CONF)
