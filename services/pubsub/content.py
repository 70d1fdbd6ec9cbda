"""Content-based selection of a publication (draft-wyman-apex-pubsub-00 5.9, 5.10).

:class:`ContentSelection` is what :class:`services.pubsub.publishing.Publisher` asks for
a topic that has content-based subscriptions, schemas, or a ``message-content``
envelope: it checks the body against the topic's message schema (561 with the
validator's first error), matches it against the topic's selector index (kept in the
topic's entry of the pod's subscriber cache, built on first use, kept current by the
event log: :mod:`apexmesh.pubsub.topic_index`), caches an envelope with a message-id
(:mod:`apexmesh.store.pubsub_messages`) and returns one delivery per recipient endpoint
with the ids of every subscription it matched. Delivery itself is the publisher's
fan-out, the same as for topic pubsub.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import MimePart
from apexmesh.apex.data import Data
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import Element
from apexmesh.pubsub import content_core
from apexmesh.pubsub._fields import pubsub_tag
from apexmesh.pubsub.content_core import CacheAction, CachedMessage, ContentPublishPlan
from apexmesh.pubsub.message import ParsedMessage, message_from, parse_message
from apexmesh.pubsub.schema import TopicSchemas
from apexmesh.pubsub.selection.types import MessageView
from apexmesh.pubsub.topic_index import SelectorCompiler, TopicIndex
from apexmesh.store.pubsub_cache import TopicState
from apexmesh.store.pubsub_messages import MessageStore, StoredMessage
from services.pubsub.metrics import PubsubMetrics

#: Largest message body (octets) by default: one octet more is 554.
DEFAULT_MAX_MESSAGE_OCTETS: Final = 1024 * 1024

#: How long a message without an expiration-date stays cached (the service's default
#: of 5.2.1), milliseconds.
DEFAULT_MESSAGE_LIFETIME_MS: Final = 3_600_000

_ENVELOPE: Final = b"message-content"


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
        content-based subscriptions, or the body is an envelope (to be cached)."""
        return (
            bool(state.settings)
            or state.index is not None
            or _ENVELOPE in body[:512]
            or any(identifier for _, identifier in state.subscriptions)
        )

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

    def parse(self, body: bytes, schemas: TopicSchemas) -> ParsedMessage | Element:
        """The envelope, or the body's root; 554 over the size limit, 561 for a body
        that is not XML on a topic with a message schema, 500/501 for a broken
        envelope. A body that is not XML on a topic without one is selected as a
        message without identifiers."""
        if len(body) > self.max_octets:
            parse_message(body, max_octets=self.max_octets)  # raises its 554
        try:
            root = _dtd.parse_root(body)
        except ApexError:
            if schemas.message is not None:
                raise ApexError(
                    ApexReplyCode.INVALID_MESSAGE, "the topic's messages are XML"
                ) from None
            return _dtd.parse_root(b"<content/>")
        if pubsub_tag(root) == "message-content":
            return message_from(root)
        return root

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
        del data, parts  # text/* bodies: see docs/pubsub.md, "Missing"
        try:
            index = self.index(domain, topic, state)
            message = self.parse(body, index.schemas)
        except ApexError as exc:
            return ContentPublishPlan(code=exc.code, step="5.9", text=str(exc)[:200])
        started = time.perf_counter()
        view = MessageView.of(message.root if isinstance(message, ParsedMessage) else message)
        plan = content_core.publish(
            originator,
            message,
            view,
            exists=state.exists,
            allowed=True,
            schemas=index.schemas,
            matcher=index.matcher,
            subscriptions=index.subscriptions,
            now_ms=self._clock(),
        )
        self._metrics.selector_match.observe(time.perf_counter() - started)
        if plan.code == ApexReplyCode.SUCCESS and isinstance(message, ParsedMessage):
            await self._cache(domain, topic, message, body)
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
