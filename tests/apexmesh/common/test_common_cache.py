"""BoundedCache: the named limit, both eviction orders, caller-supplied expiry."""

from __future__ import annotations

import pytest

from apexmesh.common.cache import BoundedCache, Eviction

pytestmark = pytest.mark.unit


def test_a_full_lru_cache_evicts_the_least_recently_used_entry_only() -> None:
    cache: BoundedCache[str, int] = BoundedCache("test", 3)
    for number, key in enumerate("abc"):
        cache.put(key, number)
    assert cache.get("a") == 0  # a is now the most recently used
    assert cache.put("d", 3) == ("b", 1)  # the evicted entry, for its owner to release
    assert "b" not in cache
    assert list(cache) == ["c", "a", "d"]
    assert cache.evictions == 1
    assert len(cache) == 3


def test_a_fifo_cache_evicts_the_oldest_entry_whatever_was_read() -> None:
    cache: BoundedCache[int, bool] = BoundedCache("closed", 2, policy=Eviction.FIFO)
    cache.put(1, True)
    cache.put(2, True)
    assert cache.get(1)
    cache.put(3, True)
    assert 1 not in cache
    assert 2 in cache
    assert 3 in cache


def test_rewriting_a_key_does_not_evict_and_refreshes_it_under_lru() -> None:
    cache: BoundedCache[str, int] = BoundedCache("test", 2)
    assert cache.put("a", 1) is None
    cache.put("b", 2)
    assert cache.put("a", 10) is None
    cache.put("c", 3)
    assert cache.get("a") == 10
    assert "b" not in cache
    assert cache.evictions == 1


def test_expiry_is_judged_by_the_callers_clock() -> None:
    cache: BoundedCache[str, str] = BoundedCache("locations", 4)
    cache.put("fred", "pod-1", expires=10.0)
    cache.put("barney", "pod-2")
    assert cache.get("fred", now=9.9) == "pod-1"
    assert cache.get("fred", now=10.0) is None
    assert cache.get("fred") == "pod-1"  # without a clock the stale entry is still there
    assert cache.expiry("fred") == 10.0
    assert cache.get("barney", now=1e9) == "pod-2"
    cache.put("fred", "pod-3")  # rewritten without expiry: never expires
    assert cache.expiry("fred") is None
    assert cache.get("fred", now=1e9) == "pod-3"


def test_pop_and_clear_forget_entries_and_their_expiry() -> None:
    cache: BoundedCache[str, int] = BoundedCache("test", 2)
    cache.put("a", 1, expires=5.0)
    assert cache.pop("a") == 1
    assert cache.pop("a") is None
    assert cache.expiry("a") is None
    cache.put("b", 2, expires=1.0)
    cache.clear()
    assert len(cache) == 0
    assert cache.expiry("b") is None


def test_an_evicted_entry_takes_its_expiry_with_it() -> None:
    cache: BoundedCache[str, int] = BoundedCache("test", 1)
    cache.put("a", 1, expires=5.0)
    cache.put("b", 2)
    assert cache.expiry("a") is None


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


def test_a_cache_without_room_is_refused() -> None:
    with pytest.raises(ValueError, match="room"):
        BoundedCache("test", 0)
