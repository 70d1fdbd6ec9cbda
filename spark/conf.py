"""Extra Spark settings of the snapshot job: a properties file (``spark-defaults.conf``
lines) named by ``APEXMESH_SNAPSHOT_SPARK_CONF_FILE``, and the few settings that must be
known per pod (Spark on Kubernetes in client mode: the driver's address and pod name).

Why a file: the chart renders ``snapshot.sparkConf`` and the Spark-on-Kubernetes
values (executors, their pod template, S3A) into a ConfigMap that the CronJob mounts;
one file carries any number of settings, and the job reads it itself, so that a wrong
key fails the run at once with the variable's name instead of being ignored by Spark.
Secrets never go in it: S3 credentials come from the environment (a Secret), where both
Hadoop's S3A and pyarrow's S3 look for them.

The keys the job sets from its own variables are refused in the file (one place per
setting): ``spark.master`` (``APEXMESH_SNAPSHOT_MASTER``), ``spark.driver.memory``
(``APEXMESH_SNAPSHOT_DRIVER_MEMORY``) and ``spark.sql.shuffle.partitions``
(``APEXMESH_SNAPSHOT_SHUFFLE_PARTITIONS``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from apexmesh.ops.settings import SettingsError

CONF_FILE_ENV: Final = "APEXMESH_SNAPSHOT_SPARK_CONF_FILE"

#: Keys the job sets from a variable of its own, and that variable.
OWNED: Final = {
    "spark.master": "APEXMESH_SNAPSHOT_MASTER",
    "spark.driver.memory": "APEXMESH_SNAPSHOT_DRIVER_MEMORY",
    "spark.sql.shuffle.partitions": "APEXMESH_SNAPSHOT_SHUFFLE_PARTITIONS",
}

# A properties line as spark-submit reads spark-defaults.conf: key, then whitespace or
# "=" or ":", then the value (kept as written, trailing blanks removed).
_LINE: Final = re.compile(r"^(\S+?)(?:\s*[=:]\s*|\s+)(.*?)\s*$")


def parse_properties(text: str, source: str = CONF_FILE_ENV) -> tuple[tuple[str, str], ...]:
    """The (key, value) pairs of a ``spark-defaults.conf``-style text, in order (a key
    given twice: the later wins when set). Blank lines and ``#`` comments are skipped;
    a key that is not ``spark.*``, a line without a value, or a key of :data:`OWNED`
    raise :class:`SettingsError` naming ``source`` and the line."""
    pairs: list[tuple[str, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        found = _LINE.match(line)
        if found is None or not found[2]:
            raise SettingsError(f"{source} line {number}: expected 'key value', got {line!r}")
        key, value = found[1], found[2]
        if not key.startswith("spark."):
            raise SettingsError(f"{source} line {number}: {key!r} is not a spark.* setting")
        if key in OWNED:
            raise SettingsError(
                f"{source} line {number}: {key} is set by {OWNED[key]}, not in this file"
            )
        pairs.append((key, value))
    return tuple(pairs)


def client_mode(driver_host: str, driver_pod: str) -> tuple[tuple[str, str], ...]:
    """What a driver in a pod tells Spark on Kubernetes (client mode): the address its
    executors dial back (the pod's IP; it listens on every interface of the pod), and
    its pod's name, which makes the driver pod the executors' owner so that they go
    when it goes (a killed job leaves no executor behind)."""
    pairs: list[tuple[str, str]] = []
    if driver_host:
        pairs += [("spark.driver.host", driver_host), ("spark.driver.bindAddress", "0.0.0.0")]  # noqa: S104 - inside the pod
    if driver_pod:
        pairs.append(("spark.kubernetes.driver.pod.name", driver_pod))
    return tuple(pairs)


def as_dict(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The settings as Spark ends up with them (a later pair wins)."""
    return dict(pairs)


__all__ = ["CONF_FILE_ENV", "OWNED", "as_dict", "client_mode", "parse_properties"]
