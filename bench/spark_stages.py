"""Where a Spark run's time went, from Spark's own event log (``spark.eventLog.*``): per
job description (``SparkContext.setJobDescription``), each stage's wall time, the CPU
time and run time of its tasks, GC, records read, shuffle bytes written and bytes
spilled. bench/snapshot.py prints it with ``--event-log DIR`` (docs/snapshot.md "Where
the time goes"): the figures that show which step of the fold costs what.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def event_log_conf(directory: Path) -> dict[str, str]:
    """The session settings that write an uncompressed event log under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": f"file://{directory}",
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }


@dataclass(frozen=True, slots=True)
class Stage:
    description: str
    stage_id: int
    name: str
    tasks: int
    wall_s: float
    cpu_s: float
    run_s: float
    gc_s: float
    records_read: int
    shuffle_written_mb: float
    spilled_mb: float


def _metrics(info: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for accumulable in info.get("Accumulables", []):
        try:
            out[str(accumulable["Name"])] = float(accumulable.get("Value") or 0)
        except (TypeError, ValueError):
            continue
    return out


def stages(directory: Path) -> list[Stage]:
    """Every completed stage of the event logs under ``directory``, in completion order."""
    found: list[Stage] = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        if "appstatus" in path.name or path.name.startswith("."):
            continue
        described: dict[int, str] = defaultdict(str)
        for line in path.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerJobStart":
                text = (event.get("Properties") or {}).get("spark.job.description", "")
                for stage_id in event.get("Stage IDs", []):
                    described[int(stage_id)] = text
            elif event["Event"] == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                m = _metrics(info)
                found.append(
                    Stage(
                        description=described[int(info["Stage ID"])],
                        stage_id=int(info["Stage ID"]),
                        name=str(info["Stage Name"]).split(" at ")[0][:30],
                        tasks=int(info["Number of Tasks"]),
                        wall_s=(info["Completion Time"] - info["Submission Time"]) / 1000,
                        cpu_s=m.get("internal.metrics.executorCpuTime", 0) / 1e9,
                        run_s=m.get("internal.metrics.executorRunTime", 0) / 1000,
                        gc_s=m.get("internal.metrics.jvmGCTime", 0) / 1000,
                        records_read=int(m.get("internal.metrics.input.recordsRead", 0)),
                        shuffle_written_mb=m.get("internal.metrics.shuffle.write.bytesWritten", 0)
                        / 2**20,
                        spilled_mb=m.get("internal.metrics.diskBytesSpilled", 0) / 2**20,
                    )
                )
    return found


def report(directory: Path) -> list[str]:
    """One line per stage, grouped by job description, with a total per description."""
    lines: list[str] = []
    by: dict[str, list[Stage]] = defaultdict(list)
    for stage in stages(directory):
        by[stage.description].append(stage)
    for description, group in by.items():
        lines.append(f"stages of {description or '(no description)'}:")
        lines.extend(
            f"  stage {s.stage_id:3d} {s.name:30s} tasks {s.tasks:3d} wall {s.wall_s:6.1f} s"
            f" task cpu {s.cpu_s:6.1f} s run {s.run_s:6.1f} s gc {s.gc_s:5.1f} s"
            f" read {s.records_read:>10} shuffle {s.shuffle_written_mb:7.1f} MB"
            f" spill {s.spilled_mb:6.1f} MB"
            for s in group
        )
        lines.append(
            f"  total: wall {sum(s.wall_s for s in group):.1f} s, task cpu "
            f"{sum(s.cpu_s for s in group):.1f} s, gc {sum(s.gc_s for s in group):.1f} s"
        )
    return lines


__all__ = ["Stage", "event_log_conf", "report", "stages"]
