"""apexmesh.apex stays sans-I/O: it imports no event loop, socket, TLS, gRPC, Redis, web
framework, and no lxml (XML goes through apexmesh.beep.xml only)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import apexmesh.apex

pytestmark = pytest.mark.unit

FORBIDDEN = {"asyncio", "socket", "ssl", "grpc", "redis", "fastapi", "lxml", "uvicorn"}


def test_apex_imports_no_io_library() -> None:
    root = Path(apexmesh.apex.__file__).parent
    offenders: list[str] = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders.extend(
                f"{path.name}: {name}" for name in names if name.split(".")[0] in FORBIDDEN
            )
    assert offenders == []
