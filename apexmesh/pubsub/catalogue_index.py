"""Sorted names and counts of a :class:`~apexmesh.pubsub.catalogue.Catalogue`, kept as
events are folded (sans I/O), so that an admin page costs what it shows (issue #33).

Listing the first 50 of 100,000 topics, or counting a domain's subscriptions, must not
walk all of them: the dashboard asks every second. So a catalogue that is listed keeps,
per domain, its topic names and its subscription identities in sorted lists (a page is
a bisect and a slice), and the number of subscriptions of each topic. The index is built
once, on the first listing (a pod nobody lists pays nothing), and then follows every
event :meth:`Catalogue.apply` folds.

A subscription is *counted* when its topic exists and was created before it: the rule of
:meth:`Catalogue.live` without the lease end, which the leader turns into an end event
within a tick (as the live Redis keys, where a lapsed lease stays until it is ended). A
topic created again starts with none, as the fold says.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field

#: A subscription within its domain: (topic, subscriber, subscription_id).
SubKey = tuple[str, str, str]
#: Sorts after every string that starts with the prefix it is appended to.
_HIGH = "\U0010ffff"


def _upper(prefix: str) -> str:
    return prefix + _HIGH


@dataclass(slots=True)
class CatalogueIndex:
    """Per domain: sorted topic names, sorted counted subscriptions, and counts."""

    topics: dict[str, list[str]] = field(default_factory=dict)
    subscriptions: dict[str, list[SubKey]] = field(default_factory=dict)
    per_topic: dict[tuple[str, str], int] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        topics: Iterable[tuple[str, str]],
        counted: Iterable[tuple[str, str, str, str]],
    ) -> CatalogueIndex:
        """The index of existing ``topics`` (domain, topic) and ``counted``
        subscription identities (domain, topic, subscriber, id)."""
        index = cls()
        for domain, topic in topics:
            index.topics.setdefault(domain, []).append(topic)
            index.per_topic[(domain, topic)] = 0
        for names in index.topics.values():
            names.sort()
        for domain, topic, subscriber, sub_id in counted:
            index.subscriptions.setdefault(domain, []).append((topic, subscriber, sub_id))
            index.per_topic[(domain, topic)] = index.per_topic.get((domain, topic), 0) + 1
        for keys in index.subscriptions.values():
            keys.sort()
        return index

    # ------------------------------------------------------------------ following

    def topic_created(self, domain: str, topic: str) -> None:
        """A topic (again) exists: listed once, with no subscription counted."""
        self._drop_subscriptions(domain, topic)
        names = self.topics.setdefault(domain, [])
        at = bisect_left(names, topic)
        if at == len(names) or names[at] != topic:
            names.insert(at, topic)
        self.per_topic[(domain, topic)] = 0

    def topic_deleted(self, domain: str, topic: str) -> None:
        self._drop_subscriptions(domain, topic)
        names = self.topics.get(domain, [])
        at = bisect_left(names, topic)
        if at < len(names) and names[at] == topic:
            del names[at]
        self.per_topic.pop((domain, topic), None)

    def subscription(self, identity: tuple[str, str, str, str], counted: bool) -> None:
        """A subscription's last event says whether it is ``counted`` now."""
        domain, topic, subscriber, sub_id = identity
        key = (topic, subscriber, sub_id)
        keys = self.subscriptions.setdefault(domain, [])
        at = bisect_left(keys, key)
        present = at < len(keys) and keys[at] == key
        if counted and not present:
            keys.insert(at, key)
            self.per_topic[(domain, topic)] = self.per_topic.get((domain, topic), 0) + 1
        elif present and not counted:
            del keys[at]
            self.per_topic[(domain, topic)] -= 1

    def _drop_subscriptions(self, domain: str, topic: str) -> None:
        keys = self.subscriptions.get(domain)
        if not keys:
            return
        low = bisect_left(keys, (topic,))
        high = bisect_left(keys, (topic, _HIGH))
        del keys[low:high]

    # ------------------------------------------------------------------ reading

    def counts(self, domain: str) -> tuple[int, int]:
        """(topics, counted subscriptions) of ``domain``."""
        return len(self.topics.get(domain, ())), len(self.subscriptions.get(domain, ()))

    def subscriptions_of(self, domain: str, topic: str) -> int:
        return self.per_topic.get((domain, topic), 0)

    def topic_count(self, domain: str, prefix: str = "") -> int:
        """How many topics of ``domain`` start with ``prefix`` (O(log n))."""
        names = self.topics.get(domain, [])
        if not prefix:
            return len(names)
        return bisect_left(names, _upper(prefix)) - bisect_left(names, prefix)

    def topic_page(
        self, domain: str, prefix: str = "", after: str = "", limit: int = 0
    ) -> list[str]:
        """Up to ``limit`` (0: all) topic names of ``domain`` starting with ``prefix``,
        in order, after the name ``after``."""
        names = self.topics.get(domain, [])
        low = bisect_left(names, prefix)
        if after:
            low = max(low, bisect_right(names, after))
        high = bisect_left(names, _upper(prefix), low) if prefix else len(names)
        if limit:
            high = min(high, low + limit)
        return names[low:high]

    def subscription_page(
        self,
        domain: str,
        *,
        topic: str | None = None,
        prefix: str = "",
        after: SubKey | None = None,
        limit: int = 0,
    ) -> list[SubKey]:
        """Up to ``limit`` (0: all) subscriptions of ``domain``, in (topic, subscriber,
        id) order: of one ``topic`` when given, else of the topics starting with
        ``prefix``; after the key ``after``."""
        keys = self.subscriptions.get(domain, [])
        if topic is not None:
            low, high = bisect_left(keys, (topic,)), bisect_left(keys, (topic, _HIGH))
        else:
            low = bisect_left(keys, (prefix,))
            high = bisect_left(keys, (_upper(prefix),), low) if prefix else len(keys)
        if after is not None:
            low = max(low, bisect_right(keys, after))
        if limit:
            high = min(high, low + limit)
        return keys[low:high] if high > low else []


__all__ = ["CatalogueIndex", "SubKey"]
