"""The one bounded cache of apex-mesh: a map with a named limit, owned by its user.

Every cache in the mesh (parsed control documents, option parses, endpoint locations,
access decisions, subscriber lists, recently closed channels, seen submission ids) is a
:class:`BoundedCache`. A cache that is "cleared when full" forgets its whole working set
at once: the next request of every client misses at the same moment (the relay once
answered 500 to a late SEQ because its record of recently closed channels had just been
wiped). A bounded cache evicts one entry at a time instead, the least recently used one
(``LRU``) or the oldest one (``FIFO``, for records whose value is their recency, such as
the channels a session closed last).

Sans-I/O: no clock is read here. An entry may carry an expiry that the caller computes
from its own clock, and lookups pass the caller's ``now``; the owner is the object that
uses the cache, never the module (no module-level state).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")


class Eviction(enum.Enum):
    """Which entry makes room when the cache is full."""

    #: The least recently read or written entry.
    LRU = "lru"
    #: The entry written first (reads do not refresh it).
    FIFO = "fifo"


class BoundedCache(Generic[_K, _V]):
    """A map of at most ``limit`` entries; see the module docstring.

    ``name`` says what the cache holds (metrics and logs use it); ``evictions`` counts the
    entries pushed out by newer ones, so an undersized cache shows in the figures instead
    of as a slow path.
    """

    __slots__ = ("_entries", "_expiring", "evictions", "limit", "name", "policy")

    def __init__(self, name: str, limit: int, *, policy: Eviction = Eviction.LRU) -> None:
        if limit < 1:
            raise ValueError(f"cache {name!r} needs room for at least one entry")
        self.name = name
        self.limit = limit
        self.policy = policy
        self.evictions = 0
        self._entries: OrderedDict[_K, _V] = OrderedDict()
        #: Expiry (in the caller's clock) of the entries that have one.
        self._expiring: dict[_K, float] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[_K]:
        return iter(tuple(self._entries))

    def get(self, key: _K, now: float | None = None) -> _V | None:
        """The value of ``key``, or None when absent or expired at ``now``.

        An LRU cache counts the read as a use. Without ``now`` expiry is not checked
        (for callers that keep stale entries on purpose, see :meth:`expiry`).
        """
        entries = self._entries
        value = entries.get(key)
        if value is None:
            return None
        if now is not None and self._expiring:
            expires = self._expiring.get(key)
            if expires is not None and expires <= now:
                return None
        if self.policy is Eviction.LRU:
            entries.move_to_end(key)
        return value

    def expiry(self, key: _K) -> float | None:
        """When the entry of ``key`` expires (None: never, or absent)."""
        return self._expiring.get(key)

    def put(self, key: _K, value: _V, *, expires: float | None = None) -> tuple[_K, _V] | None:
        """Store ``value`` under ``key`` (expiring at ``expires`` in the caller's clock),
        evicting the entry :attr:`policy` names when the cache is full.

        Returns the evicted entry (None when nothing was), so an owner whose values hold
        a resource (a gRPC channel) releases it instead of leaking it with the entry.
        """
        entries = self._entries
        evicted: tuple[_K, _V] | None = None
        if key in entries:
            if self.policy is Eviction.LRU:
                entries.move_to_end(key)
        elif len(entries) >= self.limit:
            evicted = entries.popitem(last=False)
            self._expiring.pop(evicted[0], None)
            self.evictions += 1
        entries[key] = value
        if expires is None:
            self._expiring.pop(key, None)
        else:
            self._expiring[key] = expires
        return evicted

    def get_or_build(self, key: _K, build: Callable[[], _V]) -> _V:
        """The entry of ``key``, or ``build()`` stored under it. An exception from
        ``build`` is not cached (the next caller tries again)."""
        value = self.get(key)
        if value is None:
            value = build()
            self.put(key, value)
        return value

    def pop(self, key: _K) -> _V | None:
        """Remove ``key``; its value, or None when it was absent."""
        self._expiring.pop(key, None)
        return self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget everything (an owner whose facts all became wrong at once)."""
        self._entries.clear()
        self._expiring.clear()


__all__ = ["BoundedCache", "Eviction"]
