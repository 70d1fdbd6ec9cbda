"""How apexctl prints: a table for people, JSON or YAML for scripts (``--json``,
``-o json``, ``-o yaml``), the same data either way. Progress and notes go to stderr,
so a script reading stdout only ever sees the data."""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

#: Data (stdout) and notes (stderr).
out = Console(soft_wrap=True)
err = Console(stderr=True)


class Format(enum.StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def emit(
    data: Any,
    fmt: Format,
    *,
    columns: Sequence[str] | None = None,
    title: str | None = None,
) -> None:
    """Print ``data`` (a list of rows, or one mapping) in ``fmt``."""
    if fmt is Format.JSON:
        out.print_json(json.dumps(data, default=str))
        return
    if fmt is Format.YAML:
        out.print(
            yaml.safe_dump(data, sort_keys=False, default_flow_style=False),
            end="",
            markup=False,
            highlight=False,
        )
        return
    if isinstance(data, Mapping):
        table = Table(title=title, show_header=False, box=None)
        table.add_column(style="bold")
        table.add_column()
        for key, value in data.items():
            table.add_row(str(key), _cell(value))
        out.print(table)
        return
    rows = list(data)
    if not rows:
        out.print(f"[dim]no {title or 'items'}[/dim]")
        return
    names = list(columns or rows[0].keys())
    table = Table(title=title, header_style="bold cyan")
    for name in names:
        table.add_column(name)
    for row in rows:
        table.add_row(*(_cell(row.get(name)) for name in names))
    out.print(table)


def rfc3339(epoch: float | None) -> str:
    """The one time format of apexctl's output: RFC 3339 in UTC, to the second
    (``2026-12-02T13:05:09Z``); "" for no time."""
    if not epoch:
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items())
    return str(value)


__all__ = ["Format", "emit", "err", "out", "rfc3339"]
