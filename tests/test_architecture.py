"""Layering rules that keep the protocol cores sans-I/O and the services independent.

The cores (``apexmesh/beep``, ``apexmesh/apex``, ``apexmesh/pubsub``, the relaying core
``apexmesh/relay``) import no I/O library and draw no randomness (a caller passes it in;
the SASL mechanisms alone need fresh nonces and salts from the OS, RFC 2831 and RFC 5802,
and take fixed ones in tests); the relaying core uses none of the library's adapters;
the BEEP core knows nothing of APEX; lxml is imported only by the one hardened parser
module; services never import one another (they talk gRPC) and open internal
gRPC channels only through ``apexmesh/rpc/channels.py``; nothing uses relative imports.
Checked on the AST, so a function-level import cannot slip through.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
CORES = (
    "apexmesh/beep",
    "apexmesh/apex",
    "apexmesh/common",
    "apexmesh/pubsub",
    "apexmesh/relay",
)
#: The library's adapters (event loop, gRPC, Redis, SDK, CLI, operations), which the
#: relaying core never reaches for: it is fed facts, it does not fetch them.
ADAPTERS = (
    "apexmesh.aio",
    "apexmesh.rpc",
    "apexmesh.store",
    "apexmesh.client",
    "apexmesh.cli",
    "apexmesh.ops",
)
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
RANDOMNESS = {"random", "secrets", "uuid"}
#: Where randomness is drawn on purpose: SASL nonces and salts (see the docstring).
RANDOMNESS_ALLOWED = ("apexmesh/beep/sasl/",)
CHANNELS_MODULE = "apexmesh/rpc/channels.py"


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
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "contracts" not in p.parts)


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


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


@pytest.mark.parametrize("core", CORES)
def test_cores_draw_no_randomness(core: str) -> None:
    offenders = [
        f"{relative(path)} imports {name}"
        for path in python_files(core)
        for name in imported_modules(path)
        if name.split(".")[0] in RANDOMNESS and not relative(path).startswith(RANDOMNESS_ALLOWED)
    ]
    assert offenders == []


def test_the_relaying_core_uses_no_adapter() -> None:
    """apexmesh/relay decides from values (issue #28): no asyncio future, gRPC stub,
    Redis store or SDK type in its imports, so its decisions are tested without a loop."""
    offenders = [
        f"{relative(path)} imports {name}"
        for path in python_files("apexmesh/relay")
        for name in imported_modules(path)
        if name.startswith(ADAPTERS)
    ]
    assert python_files("apexmesh/relay"), "the relaying core must exist"
    assert offenders == []


#: Folders whose modules stay short enough to read whole (issue #28: one concept each).
SHORT_MODULES = ("apexmesh/relay", "services/relay")
MAX_MODULE_LINES = 500


@pytest.mark.parametrize("folder", SHORT_MODULES)
def test_relaying_modules_stay_short(folder: str) -> None:
    lengths = {
        relative(p): len(p.read_text(encoding="utf-8").splitlines()) for p in python_files(folder)
    }
    assert {path: n for path, n in lengths.items() if n > MAX_MODULE_LINES} == {}


def test_the_beep_core_knows_nothing_of_apex() -> None:
    offenders = [
        f"{relative(path)} imports {name}"
        for path in python_files("apexmesh/beep")
        for name in imported_modules(path)
        if name.startswith("apexmesh.")
        and not name.startswith(("apexmesh.beep", "apexmesh.common"))
    ]
    assert offenders == []


def test_no_relative_imports() -> None:
    offenders = []
    for folder in ("apexmesh", "services", "tests", "bench", "scripts"):
        for path in python_files(folder):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            offenders += [
                f"{relative(path)}:{node.lineno}"
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.level > 0
            ]
    assert offenders == []


def test_internal_grpc_channels_come_from_one_place() -> None:
    """Every channel between services gets the same reconnect policy (a restarted peer
    is reached again within a second)."""
    offenders = []
    for path in python_files("apexmesh") + python_files("services"):
        if relative(path) == CHANNELS_MODULE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        offenders += [
            f"{relative(path)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr in ("insecure_channel", "secure_channel")
        ]
    assert offenders == []
