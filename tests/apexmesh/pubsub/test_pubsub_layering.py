"""The pubsub core is sans-I/O like the cores of apexmesh/apex (tests/test_architecture.py
covers those; this package is checked here, by the same AST rule)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[3] / "apexmesh" / "pubsub"
FORBIDDEN = {"asyncio", "socket", "ssl", "grpc", "redis", "fastapi", "uvicorn", "time", "lxml"}


def test_pubsub_core_imports_no_io() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert files
    offenders = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []
