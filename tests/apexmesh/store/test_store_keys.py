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


def test_on_a_cluster_every_key_carries_its_slot_group_and_standalone_names_stay() -> None:
    """Redis Cluster runs a script or MULTI only on keys of one slot: every key has one
    hash tag naming its slot group (docs/redis.md, "Slot groups"); without ``cluster``
    the names are the ones deployments already hold."""
    plain, tagged = Keys("p"), Keys("p", cluster=True)
    groups: dict[str, set[str]] = {}
    for name, method in inspect.getmembers(Keys, inspect.isfunction):
        if name.startswith("_"):
            continue
        args = ["owner"] * (len(inspect.signature(method).parameters) - 1)
        old, new = getattr(plain, name)(*args), getattr(tagged, name)(*args)
        if name == "access_changes":  # a channel, not a key: a cluster broadcasts it
            assert new == old
            continue
        assert new.count("{") == 1, new
        group = new.split("{", 1)[1].split("}", 1)[0]
        assert new == old.replace("p:", f"p:{{{group}}}:", 1)
        groups.setdefault(group, set()).add(name)
    assert set(groups) == {"access", "relay", "presence", "pubsub", "ops"}
    # A hold checks the attachment in its script: one group.
    assert {"attachment", "held_queue", "held_seq", "pod_attachments"} <= groups["relay"]
