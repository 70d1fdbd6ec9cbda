"""A bounded least-recently-used cache with a named limit.

Stand-in for the project's one bounded cache type (the ``BoundedCache`` the coordinator
is adding in issue #16): compiled XML Schemas and parsed selectors are costly to build
and small in number, so each is built once and kept, but never without a bound (a topic
churn must not grow a pod's memory). The interface is the small one the pubsub code
needs (``get``, ``put``, ``get_or_build``, ``discard``, ``len``), so swapping in the shared
type later is a change of import.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``limit`` entries; the least recently used entry goes first.

    ``name`` says what is cached (``"pubsub.message_schemas"``), for metrics and for the
    error an operator reads when a limit is set to nonsense.
    """

    __slots__ = ("_entries", "limit", "name")

    def __init__(self, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"{name}: cache limit must be at least 1, not {limit}")
        self.name = name
        self.limit = limit
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        """The entry for ``key`` (now the most recently used), or None."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Store ``value``, evicting the least recently used entry when full."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def get_or_build(self, key: K, build: Callable[[], V]) -> V:
        """The cached entry, or ``build()`` stored under ``key``. An exception from
        ``build`` is not cached (the next caller tries again)."""
        value = self.get(key)
        if value is None:
            value = build()
            self.put(key, value)
        return value

    def discard(self, key: K) -> None:
        self._entries.pop(key, None)


__all__ = ["BoundedCache"]
