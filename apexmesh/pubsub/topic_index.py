"""One topic's subscriptions with their compiled selectors, indexed (sans I/O).

A pod keeps one :class:`TopicIndex` per topic it publishes to, inside the topic's entry
of its subscriber cache (:mod:`apexmesh.store.pubsub_cache`): built from the cached
subscriptions on the topic's first content-based publication, then kept current by the
same subscription events that keep the cached subscriptions current (:meth:`add`,
:meth:`remove`), so a publication never re-reads or re-compiles the topic's
subscriptions. Plain topic subscriptions (no id, no selector) are in it too, matching
every message, so one match answers every subscriber of the topic.

Compiling a selector costs about 110 us (lark): :class:`SelectorCompiler` compiles each
distinct (schemas, class, text) once per pod, however many subscriptions repeat it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from typing import Final

from apexmesh.apex.errors import ApexError
from apexmesh.common.cache import BoundedCache
from apexmesh.pubsub.changes import Subscription
from apexmesh.pubsub.content_core import SubscriptionKey
from apexmesh.pubsub.matcher import Matcher
from apexmesh.pubsub.schema import SchemaCache, TopicSchemas
from apexmesh.pubsub.selection.registry import SelectorClasses
from apexmesh.pubsub.selection.types import Selector
from apexmesh.pubsub.topic_description import TopicSettings
from apexmesh.pubsub.wkt import SUBSCRIPTIONS, own_subscriptions

_log = logging.getLogger(__name__)

#: Distinct compiled selectors a pod keeps.
DEFAULT_COMPILED: Final = 100_000


def settings_version(settings: str) -> int:
    """A version number of a topic's settings text, for :class:`SchemaCache`: settings
    change only with the topic (deleted and created again), and then so does the text."""
    return int.from_bytes(hashlib.blake2b(settings.encode(), digest_size=8).digest(), "big")


class SelectorCompiler:
    """The pod's selector classes and schemas, compiling each distinct selector once."""

    def __init__(
        self,
        classes: SelectorClasses,
        schemas: SchemaCache,
        limit: int = DEFAULT_COMPILED,
    ) -> None:
        self.classes = classes
        self.schemas = schemas
        self._compiled: BoundedCache[tuple[int, str, str], Selector | None] = BoundedCache(
            "pubsub.selectors", limit
        )
        #: Compilations made (tests: identical selectors compile once).
        self.compilations = 0

    def topic_schemas(self, domain: str, topic: str, settings: str) -> TopicSchemas:
        """The topic's compiled schemas (553 as ApexError for schemas it cannot use)."""
        return self.schemas.get(
            domain, topic, settings_version(settings), TopicSettings.from_json(settings)
        )

    def compile(
        self, schemas: TopicSchemas, settings: str, selector_class: str, text: str
    ) -> Selector | None:
        """The compiled selector (None: every message); ApexError 566/567 as at subscribe."""
        if not selector_class and not text.strip():
            return None
        key = (settings_version(settings), selector_class.casefold(), text.strip())

        def build() -> Selector | None:
            self.compilations += 1
            return self.classes.compile(selector_class, text, schemas.types)

        return self._compiled.get_or_build(key, build)


class TopicIndex:
    """One topic's subscriptions by key and their selectors in a :class:`Matcher`."""

    def __init__(
        self, topic: str, settings: str, schemas: TopicSchemas, compiler: SelectorCompiler
    ) -> None:
        self.topic = topic
        self.settings = settings
        self.schemas = schemas
        self._compiler = compiler
        self.matcher: Matcher[SubscriptionKey] = Matcher()
        self.subscriptions: dict[SubscriptionKey, Subscription] = {}

    @classmethod
    def build(
        cls,
        topic: str,
        settings: str,
        schemas: TopicSchemas,
        compiler: SelectorCompiler,
        subscriptions: Iterable[Subscription],
    ) -> TopicIndex:
        index = cls(topic, settings, schemas, compiler)
        for sub in subscriptions:
            index.add(sub)
        return index

    def add(self, sub: Subscription) -> None:
        """Index (or re-index) one subscription. A selector that no longer compiles (it
        did when it was accepted, against the same schemas) selects nothing."""
        key = sub.key
        selector: Selector | None
        try:
            selector = self._compiler.compile(
                self.schemas, self.settings, sub.selector_class, sub.selector
            )
        except ApexError as exc:
            _log.warning("subscription %s of %s: selector unusable (%s)", key, self.topic, exc)
            self.remove(key)
            return
        if self.topic == SUBSCRIPTIONS:
            selector = own_subscriptions(sub.subscriber, selector, self._compiler.classes)
        if key in self.matcher:
            self.matcher.remove(key)
        self.matcher.add(key, selector)
        self.subscriptions[key] = sub

    def remove(self, key: SubscriptionKey) -> None:
        if key in self.matcher:
            self.matcher.remove(key)
        self.subscriptions.pop(key, None)


__all__ = ["DEFAULT_COMPILED", "SelectorCompiler", "TopicIndex", "settings_version"]
