"""A test-only hook that holds a run of the snapshot job at a named point, so that a test
can kill the real process there (SIGKILL, as a node or the OOM killer would) instead of
sleeping and hoping the kill lands between the right two steps.

Inert unless both variables are set, which nothing but a test does (the chart, the
image and ``scripts/run`` never set them):

- ``APEXMESH_SNAPSHOT_TEST_PAUSE_AT``: ``<point>`` or ``<point>:<n>`` (the n-th time
  the run reaches that point; the first by default), ``<point>`` one of :data:`POINTS`;
- ``APEXMESH_SNAPSHOT_TEST_PAUSE_FILE``: a path. On reaching the point the job writes
  it (whole, by a rename) with its pid and the point, then waits there as long as the
  file exists: the test sees the file, and knows the process is at that point and
  stays there until killed, or until the test removes the file (then it goes on: a test
  that does something to the cluster at a known point of the run).

The points (``spark/snapshot.py`` and ``spark/export.py`` call :func:`reached`):

- ``export``: nothing done yet;
- ``export.publish``: an exported range is written under its temporary name and not
  yet renamed into place (the n-th range of the run: mid-export);
- ``fold``: the export is complete, nothing folded yet;
- ``spark``: the SparkSession is up (its executors asked for), nothing folded yet;
- ``switch``: the Parquet snapshot (with ``_SUCCESS``) and the new Redis generation are
  written, the switch to it is not done;
- ``trim``: switched, the log not yet trimmed.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Final

PAUSE_AT_ENV: Final = "APEXMESH_SNAPSHOT_TEST_PAUSE_AT"
PAUSE_FILE_ENV: Final = "APEXMESH_SNAPSHOT_TEST_PAUSE_FILE"

POINTS: Final = ("export", "export.publish", "fold", "spark", "switch", "trim")
#: Seconds between two looks at the file while held.
HOLD_POLL: Final = 0.05

#: How often each point was reached in this process (for ``<point>:<n>``).
_reached: Counter[str] = Counter()


def parse(value: str) -> tuple[str, int]:
    """``"export.publish:2"`` as ``("export.publish", 2)``; ValueError names the
    variable when the point or the count is wrong."""
    point, _, count = value.partition(":")
    if point not in POINTS:
        raise ValueError(f"{PAUSE_AT_ENV}: {point!r} is not one of {', '.join(POINTS)}")
    if count and (not count.isdigit() or int(count) < 1):
        raise ValueError(f"{PAUSE_AT_ENV}: the count {count!r} is not a positive integer")
    return point, int(count or 1)


def wanted(point: str, env: Mapping[str, str] | None = None) -> Path | None:
    """The file to write when this arrival at ``point`` is the one to hold (None:
    go on). Counts the arrival."""
    env = os.environ if env is None else env
    _reached[point] += 1
    setting, path = env.get(PAUSE_AT_ENV, ""), env.get(PAUSE_FILE_ENV, "")
    if not setting or not path:
        return None
    target, count = parse(setting)
    return Path(path) if target == point and _reached[point] == count else None


def reached(point: str) -> None:
    """Called at each point; holds the process there while the file exists when the
    environment asks for this point (module docstring), else returns at once."""
    path = wanted(point)
    if path is None:
        return
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps({"pid": os.getpid(), "point": point}))
    temporary.replace(path)
    while path.exists():  # until the test kills this process, or removes the file
        time.sleep(HOLD_POLL)


__all__ = ["PAUSE_AT_ENV", "PAUSE_FILE_ENV", "POINTS", "parse", "reached", "wanted"]
