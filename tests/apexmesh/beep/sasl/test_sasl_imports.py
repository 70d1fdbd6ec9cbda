"""The SASL package stays sans-I/O (STYLE.md 3.3 habit 1): importing it pulls in no
event loop, socket, TLS, gRPC, Redis or web framework, and no module of it names one."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import apexmesh.beep.sasl
from tests.support.polling import scaled

FORBIDDEN = {"asyncio", "socket", "ssl", "grpc", "redis", "fastapi", "time", "datetime"}
PACKAGE_DIR = Path(apexmesh.beep.sasl.__file__).parent


@pytest.mark.unit
def test_modules_import_nothing_forbidden() -> None:
    for path in sorted(PACKAGE_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
                assert name.split(".")[0] != "lxml", f"{path.name} bypasses beep.xml"


@pytest.mark.unit
def test_importing_the_package_loads_no_io_module() -> None:
    code = (
        "import sys, apexmesh.beep.sasl; "
        "print(sorted(m for m in ('asyncio', 'socket', 'ssl') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=scaled(60)
    )
    assert result.stdout.strip() == "[]", result.stderr
