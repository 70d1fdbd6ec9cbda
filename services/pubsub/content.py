"""Content-based selection of a publication (draft-wyman-apex-pubsub-00 5.9, 5.10).

:class:`ContentSelection` is what :class:`services.pubsub.publishing.Publisher` asks for
a topic that has content-based subscriptions, schemas, or a ``message-content``
envelope: it reads the body as selectors do (:mod:`apexmesh.pubsub.body`: XML as
elements, ``text/*`` as text, other types not processed), checks it against the topic's
message schema (561 with the validator's first error), matches it against the topic's
selector index (kept in the topic's entry of the pod's subscriber cache, built on first
use, kept current by the event log: :mod:`apexmesh.pubsub.topic_index`), caches an
envelope with a message-id (:mod:`apexmesh.store.pubsub_messages`) and returns one
delivery per recipient endpoint with the ids of every subscription it matched. Delivery
itself is the publisher's fan-out, the same as for topic pubsub.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Final

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import MimePart, resolve_content
from apexmesh.apex.data import Data
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub import content_core
from apexmesh.pubsub.body import Body, read_body
from apexmesh.pubsub.content_core import CacheAction, CachedMessage, ContentPublishPlan
from apexmesh.pubsub.message import ParsedMessage, parse_message
from apexmesh.pubsub.plain import is_plain
from apexmesh.pubsub.topic_index import SelectorCompiler, TopicIndex
from apexmesh.store.pubsub_cache import TopicState
from apexmesh.store.pubsub_messages import MessageStore, StoredMessage
from services.pubsub.metrics import PubsubMetrics

#: Largest message body (octets) by default: one octet more is 554.
DEFAULT_MAX_MESSAGE_OCTETS: Final = 1024 * 1024

#: How long a message without an expiration-date stays cached (the service's default
#: of 5.2.1), milliseconds.
DEFAULT_MESSAGE_LIFETIME_MS: Final = 3_600_000


class ContentSelection:
    """See the module docstring."""

    def __init__(
        self,
        *,
        compiler: SelectorCompiler,
        messages: MessageStore,
        metrics: PubsubMetrics,
        clock: Callable[[], int],
        max_octets: int = DEFAULT_MAX_MESSAGE_OCTETS,
        lifetime_ms: int = DEFAULT_MESSAGE_LIFETIME_MS,
    ) -> None:
        self.compiler = compiler
        self.messages = messages
        self._metrics = metrics
        self._clock = clock
        self.max_octets = max_octets
        self.lifetime_ms = lifetime_ms

    @staticmethod
    def applies(state: TopicState, body: bytes) -> bool:
        """Whether a publication needs selection: the topic has schemas or
        content-based subscriptions, or the body is an envelope (to be cached); the
        rule relays share (:func:`apexmesh.pubsub.plain.is_plain`)."""
        return not is_plain(state, body)

    def index(self, domain: str, topic: str, state: TopicState) -> TopicIndex:
        """The topic's index, built from the cached subscriptions on first use."""
        index = state.index
        if index is None or index.settings != state.settings:
            schemas = self.compiler.topic_schemas(domain, topic, state.settings)
            index = TopicIndex.build(
                topic, state.settings, schemas, self.compiler, state.subscriptions.values()
            )
            state.index = index
        return index

    def read(self, data: Data, body: bytes, parts: Sequence[MimePart]) -> Body:
        """The body as selectors read it (:mod:`apexmesh.pubsub.body`: XML as elements,
        ``text/*`` as text, other types not processed); 554 over the size limit,
        500/501 for a broken ``message-content`` envelope."""
        if len(body) > self.max_octets:
            parse_message(body, max_octets=self.max_octets)  # raises its 554
        by_id = {part.content_id: part for part in parts if part.content_id is not None}
        return read_body(resolve_content(data, by_id), body)

    async def select(
        self,
        domain: str,
        topic: str,
        originator: Endpoint,
        state: TopicState,
        data: Data,
        body: bytes,
        parts: Sequence[MimePart],
    ) -> ContentPublishPlan:
        """5.9/5.10 for one publication (``data`` and ``parts`` as delivered; ``body``
        the content octets)."""
        try:
            index = self.index(domain, topic, state)
            read = self.read(data, body, parts)
        except ApexError as exc:
            return ContentPublishPlan(code=exc.code, step="5.9", text=str(exc)[:200])
        started = time.perf_counter()
        plan = content_core.publish(
            originator,
            read.message,
            read.view(),
            exists=state.exists,
            allowed=True,
            schemas=index.schemas,
            matcher=index.matcher,
            subscriptions=index.subscriptions,
            now_ms=self._clock(),
            topic=topic,
        )
        self._metrics.selector_match.observe(time.perf_counter() - started)
        if (
            plan.code == ApexReplyCode.SUCCESS
            and plan.deliveries is not None
            and (isinstance(read.message, ParsedMessage))
            and plan.step != "5.2.1/expired"
        ):
            await self._cache(domain, topic, read.message, body)
        return plan

    async def _cache(self, domain: str, topic: str, message: ParsedMessage, body: bytes) -> None:
        envelope = message.envelope
        now = self._clock()
        if envelope.message_id is None or not envelope.cacheable(now):
            return
        cached = await self.messages.revision(
            domain, topic, envelope.publisher, envelope.message_id
        )
        action = content_core.cache_action(envelope, cached, now)
        if action in (CacheAction.STORE, CacheAction.REPLACE):
            stored = StoredMessage(
                body, envelope.expires_ms(now + self.lifetime_ms), envelope.revision
            )
            await self.messages.put(domain, topic, envelope.publisher, envelope.message_id, stored)

    async def cached(self, domain: str, topic: str) -> list[tuple[CachedMessage, bytes]]:
        """The topic's live cached messages, parsed, each with its octets as published
        (replayed as they are)."""
        out: list[tuple[CachedMessage, bytes]] = []
        for stored in await self.messages.live(domain, topic, self._clock()):
            try:
                parsed = parse_message(stored.body, max_octets=self.max_octets)
            except ApexError:
                continue
            out.append((CachedMessage(parsed, stored.expires_ms), stored.body))
        return out


__all__ = [
    "DEFAULT_MAX_MESSAGE_OCTETS",
    "DEFAULT_MESSAGE_LIFETIME_MS",
    "ContentSelection",
]
