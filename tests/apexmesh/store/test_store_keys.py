"""Every Redis key is named in apexmesh/store/keys.py, with a docstring, under the prefix."""

from __future__ import annotations

import inspect

import pytest

from apexmesh.store.keys import Keys

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
