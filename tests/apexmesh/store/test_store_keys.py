"""Every Redis key is named in apexmesh/store/keys.py, with a docstring, under the prefix."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import apexmesh
from apexmesh.store.keys import DEFAULT_PREFIX, Keys

pytestmark = pytest.mark.unit


def test_every_key_is_documented_and_prefixed() -> None:
    keys = Keys("p")
    methods = [
        (name, member)
        for name, member in inspect.getmembers(Keys, inspect.isfunction)
        if not name.startswith("_")
    ]
    assert methods
    for name, method in methods:
        assert method.__doc__, name
        args = ["owner"] * (len(inspect.signature(method).parameters) - 1)
        assert getattr(keys, name)(*args).startswith("p:")


def test_no_key_is_spelled_outside_keys_module() -> None:
    root = Path(apexmesh.__file__).parent
    offenders = [
        f"{path.relative_to(root)}:{node.lineno}"
        for path in root.rglob("*.py")
        if path.name != "keys.py" and "contracts" not in path.parts
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith(f"{DEFAULT_PREFIX}:")
    ]
    assert offenders == []
