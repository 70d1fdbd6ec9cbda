"""Layering rules that keep the protocol cores sans-I/O and the services independent.

The cores (``apexmesh/beep``, ``apexmesh/apex``) import no I/O library; lxml is imported
only by the one hardened parser module; services never import one another (they talk
gRPC). Checked on the AST, so a function-level import cannot slip through.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
CORES = ("apexmesh/beep", "apexmesh/apex", "apexmesh/common")
FORBIDDEN_IN_CORES = {
    "asyncio",
    "socket",
    "ssl",
    "grpc",
    "redis",
    "fastapi",
    "uvicorn",
    "selectors",
    "threading",
    "time",
}
XML_MODULE = "apexmesh/beep/xml.py"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_cores_exist() -> None:
    assert python_files("apexmesh/beep"), "the BEEP core must exist"


@pytest.mark.parametrize("core", CORES)
def test_cores_import_no_io(core: str) -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in python_files(core)
        for name in imported_modules(path)
        if name.split(".")[0] in FORBIDDEN_IN_CORES
    ]
    assert offenders == []


def test_lxml_only_in_the_hardened_parser() -> None:
    relative = (
        str(p.relative_to(ROOT)) for p in python_files("apexmesh") + python_files("services")
    )
    offenders = [
        rel
        for rel in relative
        if rel != XML_MODULE
        and not rel.startswith("apexmesh/contracts/")
        and any(name.split(".")[0] == "lxml" for name in imported_modules(ROOT / rel))
    ]
    assert offenders == []


def test_services_never_import_one_another() -> None:
    services = ROOT / "services"
    if not services.exists():
        return
    offenders = []
    for service in sorted(
        p for p in services.iterdir() if p.is_dir() and not p.name.startswith("_")
    ):
        for path in service.rglob("*.py"):
            for name in imported_modules(path):
                parts = name.split(".")
                if parts[0] == "services" and len(parts) > 1 and parts[1] != service.name:
                    offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_the_library_never_imports_services() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in python_files("apexmesh")
        for name in imported_modules(path)
        if name.split(".")[0] == "services"
    ]
    assert offenders == []
