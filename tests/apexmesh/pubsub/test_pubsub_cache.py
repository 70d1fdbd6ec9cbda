"""The bounded LRU cache stand-in (apexmesh/pubsub/cache.py)."""

from __future__ import annotations

import pytest

from apexmesh.pubsub.cache import BoundedCache

pytestmark = pytest.mark.unit


def test_least_recently_used_goes_first() -> None:
    cache: BoundedCache[str, int] = BoundedCache("test", 2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)
    assert "b" not in cache
    assert (cache.get("a"), cache.get("c"), len(cache)) == (1, 3, 2)
    cache.discard("a")
    assert len(cache) == 1


def test_get_or_build_builds_once_and_not_on_failure() -> None:
    cache: BoundedCache[str, list[int]] = BoundedCache("test", 4)
    built: list[int] = []

    def build() -> list[int]:
        built.append(1)
        return built

    assert cache.get_or_build("k", build) is cache.get_or_build("k", build)
    assert built == [1]

    def fail() -> list[int]:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        cache.get_or_build("x", fail)
    assert "x" not in cache


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BoundedCache("pubsub.nothing", 0)
