"""Which subscriptions of a topic a message satisfies, without trying every selector.

The index clusters subscriptions by one *access predicate* each, in the manner of the
filtering algorithm of Fabret et al. (SIGMOD 2001) and of Siena's counting forwarding
table: a condition every message the selector selects must satisfy (a top-level conjunct
``symbol = 'XMPL'``, ``symbol IN (...)``, ``price > 10``, ``x BETWEEN a AND b``, or an OR
of equalities on one name), taken from :meth:`Selector.access_predicates`. For a message:

1. equality clusters are found by hashing each instance of each indexed identifier
   (one dictionary probe per instance, whatever the number of subscriptions);
2. range clusters are found by bisecting the sorted bounds of each indexed identifier
   (the satisfied bounds are a prefix or suffix of the list);
3. only the subscriptions so found, plus those whose selector offers no access predicate
   (evaluated every time), are evaluated in full; subscriptions without a selector match
   every message.

So the cost of a message grows with the subscriptions whose access predicate it satisfies
(a superset of those it matches, usually close to it), not with all subscriptions. Each
subscription's access predicate is the most selective one it offers: an equality on few
keys before a range. The full evaluation after the lookup keeps the result exact: the
index only has to find a superset, which is what the property tests check (the index's
answer equals evaluating every selector).

Adding and removing a subscription is incremental (a dictionary entry, or a bisected
insertion into a sorted list), so the service keeps one index per topic current from the
subscription event stream.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from apexmesh.pubsub.selection.types import (
    MISMATCH,
    AccessPredicate,
    AtLeast,
    AtMost,
    Equals,
    Kind,
    MessageView,
    Selector,
    equality_key,
)

K = TypeVar("K", bound=Hashable)


def choose(predicates: Iterable[AccessPredicate]) -> AccessPredicate | None:
    """The access predicate to cluster by: the equality with fewest keys, else a range."""
    best: AccessPredicate | None = None
    for predicate in predicates:
        if isinstance(predicate, Equals):
            if not isinstance(best, Equals) or len(predicate.keys) < len(best.keys):
                best = predicate
        elif best is None:
            best = predicate
    return best


@dataclass(slots=True)
class _Entry(Generic[K]):
    key: K
    selector: Selector | None
    access: AccessPredicate | None
    #: Position in the bounds lists (a counter, so equal bounds keep a total order).
    serial: int


@dataclass(slots=True)
class _Bounds:
    """Sorted ``(bound, serial)`` pairs of one identifier read as one kind."""

    pairs: list[tuple[float, int]] = field(default_factory=list)


class Matcher(Generic[K]):
    """The selectors of one topic, indexed. ``K`` identifies a subscription (the
    service uses (subscriber, subscription id))."""

    __slots__ = (
        "_at_least",
        "_at_most",
        "_entries",
        "_equal",
        "_everything",
        "_fallback",
        "_serial",
        "_serials",
    )

    def __init__(self) -> None:
        self._entries: dict[K, _Entry[K]] = {}
        self._serials: dict[int, K] = {}
        self._serial = 0
        #: Subscriptions without a selector: every message.
        self._everything: set[K] = set()
        #: Selectors without an access predicate: evaluated for every message.
        self._fallback: set[K] = set()
        #: (identifier, kind) -> equality key -> subscriptions.
        self._equal: dict[tuple[str, Kind], dict[object, set[K]]] = {}
        self._at_least: dict[tuple[str, Kind], _Bounds] = {}
        self._at_most: dict[tuple[str, Kind], _Bounds] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        return iter(self._entries)

    def selector(self, key: K) -> Selector | None:
        return self._entries[key].selector

    # ---------------------------------------------------------------- changes

    def add(self, key: K, selector: Selector | None) -> None:
        """Index ``key``'s selector (None: every message); replaces an earlier one."""
        if key in self._entries:
            self.remove(key)
        access = None if selector is None else choose(selector.access_predicates())
        self._serial += 1
        entry = _Entry(key, selector, access, self._serial)
        self._entries[key] = entry
        self._serials[entry.serial] = key
        if selector is None:
            self._everything.add(key)
        elif access is None:
            self._fallback.add(key)
        elif isinstance(access, Equals):
            keys = self._equal.setdefault((access.identifier, access.kind), {})
            for value in access.keys:
                keys.setdefault(value, set()).add(key)
        else:
            bounds = self._bounds_of(access).setdefault((access.identifier, access.kind), _Bounds())
            insort(bounds.pairs, (access.bound, entry.serial))

    def remove(self, key: K) -> None:
        """Forget ``key`` (nothing happens if it is not indexed)."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        del self._serials[entry.serial]
        access = entry.access
        self._everything.discard(key)
        self._fallback.discard(key)
        if isinstance(access, Equals):
            table = self._equal[(access.identifier, access.kind)]
            for value in access.keys:
                holders = table[value]
                holders.discard(key)
                if not holders:
                    del table[value]
            if not table:
                del self._equal[(access.identifier, access.kind)]
        elif access is not None:
            lists = self._bounds_of(access)
            bounds = lists[(access.identifier, access.kind)]
            pair = (access.bound, entry.serial)
            index = bisect_left(bounds.pairs, pair)
            del bounds.pairs[index]
            if not bounds.pairs:
                del lists[(access.identifier, access.kind)]

    def _bounds_of(self, access: AtLeast | AtMost) -> dict[tuple[str, Kind], _Bounds]:
        return self._at_least if isinstance(access, AtLeast) else self._at_most

    # ---------------------------------------------------------------- matching

    def candidates(self, view: MessageView) -> set[K]:
        """Subscriptions whose access predicate the message satisfies, and those with
        none (a superset of :meth:`match` less the selector-less ones)."""
        found: set[K] = set(self._fallback)
        for (identifier, kind), table in self._equal.items():
            for value in view.values(identifier, kind):
                if value is MISMATCH:
                    continue
                holders = table.get(equality_key(value))
                if holders:
                    found |= holders
        serials = self._serials
        for (identifier, kind), bounds in self._at_least.items():
            top = _extreme(view, identifier, kind, largest=True)
            if top is not None:
                # Every bound <= the largest instance is satisfied: a prefix.
                end = bisect_right(bounds.pairs, (top, self._serial + 1))
                found.update(serials[serial] for _, serial in bounds.pairs[:end])
        for (identifier, kind), bounds in self._at_most.items():
            bottom = _extreme(view, identifier, kind, largest=False)
            if bottom is not None:
                start = bisect_left(bounds.pairs, (bottom, 0))
                found.update(serials[serial] for _, serial in bounds.pairs[start:])
        return found

    def match(self, view: MessageView) -> set[K]:
        """Exactly the subscriptions whose selector selects the message."""
        entries = self._entries
        chosen = {
            key
            for key in self.candidates(view)
            if entries[key].selector.matches(view)  # type: ignore[union-attr]
        }
        chosen |= self._everything
        return chosen

    def without_selector(self) -> set[K]:
        """The subscriptions without a selector: all that a message no selector can read
        reaches (draft-wyman 7.2, 7.3: content not processed; 5.6: they match every
        message)."""
        return set(self._everything)

    def match_all(self, view: MessageView) -> set[K]:
        """The same answer by evaluating every selector (the naive loop; tests and the
        benchmark's baseline)."""
        return {
            key
            for key, entry in self._entries.items()
            if entry.selector is None or entry.selector.matches(view)
        }


def _extreme(view: MessageView, identifier: str, kind: Kind, *, largest: bool) -> float | None:
    """The largest (or smallest) number among the identifier's instances."""
    numbers = [
        float(v)
        for v in view.values(identifier, kind)
        if isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v)
    ]
    if not numbers:
        return None
    return max(numbers) if largest else min(numbers)


__all__ = ["Matcher", "choose"]
