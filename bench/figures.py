"""The figures every bench script prints as its last line of output (one JSON list)."""

from __future__ import annotations

from typing import Any


def figure(name: str, value: float, unit: str, baseline: float | None = None) -> dict[str, Any]:
    """One figure: name, value and unit, with the same-run baseline and the ratio to it
    when there is one."""
    entry: dict[str, Any] = {"name": name, "value": round(value, 1), "unit": unit}
    if baseline:
        entry["baseline"] = round(baseline, 1)
        entry["ratio"] = round(value / baseline, 3)
    return entry
