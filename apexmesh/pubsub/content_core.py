"""The decisions of content-based pubsub (draft-wyman-apex-pubsub-00 sections 5.8 to
5.10), sans I/O, in the style of :mod:`apexmesh.pubsub.core`: pure functions of the
operation, the facts the caller read (access decision, the topic's schemas, the
subject's subscriptions, the topic's index) and the time, returning the reply, the
changes to commit and what to send.

- :func:`subscribe`: 537, 553 (no topic, duration), 566 (class the service or the topic
  does not support), 567 (selector incorrect for the selector schema), else 250 with
  the subscription id (a subscribe repeating an existing subscription's selector renews
  it under its id, so periodic renewals do not pile up subscriptions), and, when
  ``cached`` was asked, the cached messages the selector selects.
- :func:`cancel`: the four forms of 5.8.2 over the subject's content-based and plain
  (draft-schwartz) subscriptions: the forms without an id end the plain ones they
  cover too (a plain subscription has no id, so the forms naming one never do); 568
  when nothing matches. :func:`cancel_changes` turns the decision into the changes.
- :func:`publish`: 550, 537, 561 (schema), then one delivery per recipient endpoint with
  the ids of every subscription it matched (InRe, 5.10.1), and what to do with the cache.

Subscription ids are allocated by the caller (a counter in the store, unique per
service and subscriber endpoint, as 5.8 requires) and passed in.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import Element
from apexmesh.pubsub.changes import (
    FORWARDED,
    Change,
    DataRevoked,
    Send,
    Subscribed,
    Subscription,
    Unsubscribed,
)
from apexmesh.pubsub.elements import topic_of
from apexmesh.pubsub.inre import delivery_ids
from apexmesh.pubsub.matcher import Matcher
from apexmesh.pubsub.message import Expiry, MessageContent, ParsedMessage
from apexmesh.pubsub.schema import TopicSchemas
from apexmesh.pubsub.selection.registry import SelectorClasses
from apexmesh.pubsub.selection.types import MessageView, Selector
from apexmesh.pubsub.subscription_elements import (
    ContentCancel,
    ContentSubscribe,
    SubscriptionReply,
)

#: Cached messages replayed to one new subscriber at most (bounds one subscribe's work).
MAX_REPLAYED: Final = 10_000

#: What identifies a subscription in a topic's index: (subscriber, subscription id), the
#: id None for a plain topic subscription (event log v2 identity, less domain and topic).
SubscriptionKey = tuple[Endpoint, int | None]


#: One subscription of section 5.8, as stored and logged: the service's subscription
#: record with its id, selector class and text and ``cached`` (one type for both drafts).
ContentSubscription = Subscription

#: A subscription made or renewed (the store applies it as any subscribe).
ContentSubscribed = Subscribed


def same_selection(sub: Subscription, op: ContentSubscribe) -> bool:
    """Whether ``op`` asks for exactly ``sub``'s selection (it then renews ``sub``)."""
    spec = op.selector
    if spec is None:
        return not sub.selector_class and not sub.selector.strip()
    return (
        sub.selector_class.casefold() == spec.selector_class.casefold()
        and sub.selector.strip() == spec.text.strip()
    )


@dataclass(frozen=True, slots=True)
class ContentUnsubscribed:
    subscription: ContentSubscription
    originator: Endpoint


@dataclass(frozen=True, slots=True)
class CachedMessage:
    """One message of a topic's cache: the envelope as published and its parsed form."""

    message: ParsedMessage
    #: Cache expiry (ms since the epoch), None: never.
    expires_ms: int | None

    def live(self, now_ms: int) -> bool:
        return self.expires_ms is None or self.expires_ms > now_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscribeOutcome:
    code: int
    step: str
    sends: tuple[Send, ...] = ()
    change: ContentSubscribed | None = None
    #: The compiled selector (None: every message), for the topic's index.
    selector: Selector | None = None
    #: Cached messages to deliver to the new subscriber (5.8), oldest first.
    replay: tuple[CachedMessage, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelOutcome:
    code: int
    step: str
    sends: tuple[Send, ...] = ()
    changes: tuple[ContentUnsubscribed, ...] = ()


def _answer(to: Endpoint, reply: SubscriptionReply | Reply) -> tuple[Send, ...]:
    return (Send(to, reply.to_xml()),)


def _refused(step: str, to: Endpoint, trans_id: int, code: int, text: str) -> SubscribeOutcome:
    reply = Reply(code=code, trans_id=trans_id, text=text)
    return SubscribeOutcome(code=code, step=step, sends=_answer(to, reply))


def compile_selection(
    op: ContentSubscribe, schemas: TopicSchemas, classes: SelectorClasses
) -> Selector | None:
    """The subscription's selector checked against the topic: 566, 567 (ApexError)."""
    spec = op.selector
    if spec is None:
        return None
    if not schemas.allows_class(spec.selector_class):
        raise ApexError(
            ApexReplyCode.UNSUPPORTED_SELECTOR_CLASS,
            f"topic {op.topic} offers no selector class {spec.selector_class[:64]!r}",
        )
    return classes.compile(spec.selector_class, spec.text, schemas.types)


def subscribe(
    op: ContentSubscribe,
    originator: Endpoint,
    *,
    allowed: bool,
    exists: bool,
    schemas: TopicSchemas,
    classes: SelectorClasses,
    existing: Iterable[ContentSubscription],
    new_id: int,
    now_ms: int,
    cached: Iterable[CachedMessage] = (),
    forward_to: Endpoint | None = None,
) -> SubscribeOutcome:
    """Section 5.8 after draft-schwartz 4.5 steps 1-3: ``existing`` are the subject's
    subscriptions to the topic. ``forward_to``: the server redistributing the topic to
    the subject's domain (:func:`apexmesh.pubsub.core.redistributor`), to which the
    subscribe goes as it is (4.5 step 4, draft-schwartz 2.6), before any class or
    selector check: 5.7, that server selects for its own subscribers with the classes
    it supports, so a class this service does not offer is applied downstream."""
    if not allowed:
        return _refused("5.8/access", originator, op.trans_id, 537, "action not authorized")
    if not exists:
        return _refused("5.8/topic", originator, op.trans_id, 553, f"no topic {op.topic}")
    if op.duration <= 0:
        return _refused("5.8/duration", originator, op.trans_id, 553, "duration must be positive")
    if forward_to is not None:
        return SubscribeOutcome(
            code=FORWARDED, step="5.7/4.5/4", sends=(Send(forward_to, op.to_xml()),)
        )
    try:
        selector = compile_selection(op, schemas, classes)
    except ApexError as exc:
        step = "5.8.1/566" if exc.code == ApexReplyCode.UNSUPPORTED_SELECTOR_CLASS else "5.8.1/567"
        return _refused(step, originator, op.trans_id, exc.code, str(exc))
    previous = next(
        (sub for sub in existing if sub.subscriber == op.subscriber and same_selection(sub, op)),
        None,
    )
    spec = op.selector
    subscription = ContentSubscription(
        topic=op.topic,
        subscriber=op.subscriber,
        subscription_id=new_id if previous is None else previous.subscription_id,
        originator=originator,
        trans_id=op.trans_id,
        expires_ms=now_ms + op.duration * 1000,
        selector_class="" if spec is None else spec.selector_class,
        selector="" if spec is None else spec.text.strip(),
        cached=op.cached,
        since_ms=previous.since_ms if previous is not None and previous.since_ms else now_ms,
    )
    replay: tuple[CachedMessage, ...] = ()
    if op.cached:
        replay = tuple(replayed(cached, selector, now_ms))
    reply = SubscriptionReply(
        code=250, trans_id=op.trans_id, subscription_id=subscription.subscription_id
    )
    return SubscribeOutcome(
        code=250,
        step="5.8",
        sends=_answer(originator, reply),
        change=ContentSubscribed(subscription, renewed=previous is not None),
        selector=selector,
        replay=replay,
    )


def replayed(
    cached: Iterable[CachedMessage], selector: Selector | None, now_ms: int
) -> Iterable[CachedMessage]:
    """The live cached messages ``selector`` selects, at most :data:`MAX_REPLAYED`."""
    count = 0
    for entry in cached:
        if not entry.live(now_ms):
            continue
        if selector is not None and not selector.matches(MessageView.of(entry.message.root)):
            continue
        yield entry
        count += 1
        if count >= MAX_REPLAYED:
            return


def cancel(
    op: ContentCancel,
    originator: Endpoint,
    *,
    allowed: bool,
    subscriptions: Iterable[ContentSubscription],
    forward_to: Endpoint | None = None,
) -> CancelOutcome:
    """Section 5.8.2: ``subscriptions`` are the subject's (all topics when the cancel
    names none). Cancels what the form selects; 568 when that is nothing. A cancel
    naming a topic that ``forward_to`` redistributes to the subject's domain goes there
    (4.6 step 3, 5.7: the subscriptions, and their ids, are that server's), naming its
    subject; one naming no topic covers this service's subscriptions."""
    if not allowed:
        reply = Reply(code=537, trans_id=op.trans_id, text="action not authorized")
        return CancelOutcome(code=537, step="5.8.2/access", sends=_answer(originator, reply))
    subject = op.subject(originator)
    if forward_to is not None and op.topic is not None:
        forwarded = dataclasses.replace(op, subscriber=subject)
        return CancelOutcome(
            code=FORWARDED, step="5.7/4.6/3", sends=(Send(forward_to, forwarded.to_xml()),)
        )
    chosen = tuple(
        sub
        for sub in subscriptions
        if sub.subscriber == subject
        and (op.topic is None or sub.topic == op.topic)
        and (op.subscription_id is None or sub.subscription_id == op.subscription_id)
    )
    if not chosen:
        what = []
        if op.topic is not None:
            what.append(f"topic {op.topic}")
        if op.subscription_id is not None:
            what.append(f"subscription-id {op.subscription_id}")
        text = f"no subscription of {subject} for {' and '.join(what) or 'any topic'}"
        reply = Reply(code=568, trans_id=op.trans_id, text=text)
        return CancelOutcome(code=568, step="5.8.2/568", sends=_answer(originator, reply))
    reply = Reply(code=250, trans_id=op.trans_id)
    return CancelOutcome(
        code=250,
        step="5.8.2",
        sends=_answer(originator, reply),
        changes=tuple(ContentUnsubscribed(sub, originator) for sub in chosen),
    )


def cancel_changes(
    outcome: CancelOutcome, originator: Endpoint, *, grant_data: bool = False
) -> dict[str, tuple[Change, ...]]:
    """The changes of a decided cancel, by topic (one commit per topic): every chosen
    subscription ends (reason ``cancel``); a plain (draft-schwartz) one also loses the
    ``core:data`` of section 7's "only subscribers publish" policy (``grant_data``), as
    draft-schwartz's own cancel does it (4.6 step 4)."""
    by_topic: dict[str, list[Change]] = {}
    for gone in outcome.changes:
        sub = gone.subscription
        changes = by_topic.setdefault(sub.topic, [])
        changes.append(
            Unsubscribed(sub.topic, sub.subscriber, "cancel", originator, sub.subscription_id)
        )
        if grant_data and sub.subscription_id is None:
            changes.append(DataRevoked(sub.topic, sub.subscriber))
    return {topic: tuple(changes) for topic, changes in sorted(by_topic.items())}


# --------------------------------------------------------------------------- publish


class CacheAction(enum.Enum):
    """What a publication does to the topic's cache (5.2.1, 5.8)."""

    #: Not cached: expiration ``0``, already expired, or no message-id to replace by.
    SKIP = "skip"
    #: A new message-id of its publisher: stored.
    STORE = "store"
    #: A higher revision of a cached message: replaces it.
    REPLACE = "replace"
    #: Not higher than the cached revision: delivered, the cached one kept.
    STALE = "stale"


def cache_action(message: MessageContent, cached_revision: int | None, now_ms: int) -> CacheAction:
    """``cached_revision``: the revision cached under the message's (publisher,
    message-id), None when there is none."""
    if message.message_id is None or not message.cacheable(now_ms):
        return CacheAction.SKIP
    if cached_revision is None:
        return CacheAction.STORE
    return CacheAction.REPLACE if message.revision > cached_revision else CacheAction.STALE


@dataclass(frozen=True, slots=True, kw_only=True)
class ContentPublishPlan:
    """Section 5.9/5.10: the answer and, on 250, one entry per recipient endpoint with
    the subscription ids it matched (its InRe)."""

    code: int
    step: str
    text: str = ""
    deliveries: Mapping[Endpoint, tuple[int, ...]] | None = None
    #: The envelope's transID (5.2.1), None for a body sent without one: what the
    #: deliveries' InRe options carry (5.10.1.1's example: the message's 105) and the
    #: 561 reply to the publisher echoes (5.9.1).
    trans_id: int | None = None


def check_headers(message: MessageContent, topic: str, originator: Endpoint) -> None:
    """5.2.1: the envelope's ``topic`` is "the name of the topic to which the message is
    published" and ``publisher`` "the publisher of the message". A header naming
    another topic or another publisher does not describe this publication: 561
    ("invalid message structure", Appendix A, the only refusal of a publication the
    draft defines). Without this, anyone allowed to publish could name another
    publisher and replace its cached message (same message-id, higher revision).
    A redistributing server (``apex=pubsub/TOPIC@D``, 5.7) forwards others' messages
    and the service announces as itself: their publisher header is not theirs."""
    if message.topic != topic:
        raise ApexError(
            ApexReplyCode.INVALID_MESSAGE,
            f"the message's topic header names {message.topic[:64]!r}, not {topic[:64]!r}",
            trans_id=message.trans_id,
        )
    if topic_of(originator) is not None:
        return
    try:
        named = Endpoint.parse(message.publisher)
    except ValueError:
        named = None
    if named != originator:
        raise ApexError(
            ApexReplyCode.INVALID_MESSAGE,
            f"the message's publisher header names {message.publisher[:64]!r}, "
            f"not its originator {str(originator)[:64]!r}",
            trans_id=message.trans_id,
        )


def expired(message: MessageContent, now_ms: int) -> bool:
    """Whether the message was no longer valid when published (an absolute
    expiration-date at or before now, 5.2.1: "the date after which the message will no
    longer be valid"). ``0`` is distributed once, ``*`` and none are valid."""
    expires = message.expires_ms(None) if message.expiry is Expiry.AT else None
    return expires is not None and expires <= now_ms


def publish(
    originator: Endpoint,
    message: ParsedMessage | Element | None,
    view: MessageView | None,
    *,
    exists: bool,
    allowed: bool,
    schemas: TopicSchemas,
    matcher: Matcher[SubscriptionKey],
    subscriptions: Mapping[SubscriptionKey, ContentSubscription],
    now_ms: int,
    topic: str | None = None,
) -> ContentPublishPlan:
    """Draft-schwartz 4.7.1 with the content-based steps: 550 (no topic), 537 (no
    ``core:data``), 561 (the body does not conform to the message schema), then the
    matching subscriptions, one delivery per endpoint (never back to the redistributing
    server the data came from). ``message`` is the parsed envelope, the root of an XML
    body sent without one (validated as the body itself), or None for a body that is
    not XML (text or not processed: 561 on a topic with a message schema);
    ``view`` is what selectors read of it (:meth:`apexmesh.pubsub.body.Body.view`),
    None for a body not processed, which only subscriptions without a selector
    receive (7.2, 7.3).

    ``topic``: the topic published to, which an envelope's headers must name with the
    originator as publisher (:func:`check_headers`, 561); a message already expired is
    answered 250 and delivered to nobody (:func:`expired`: 5.9.1 names no refusal for
    it, and an invalid message must reach no subscriber)."""
    trans_id = message.envelope.trans_id if isinstance(message, ParsedMessage) else None
    if not exists:
        return ContentPublishPlan(code=ApexReplyCode.ACTION_NOT_TAKEN, step="4.7.1/1")
    if not allowed:
        return ContentPublishPlan(code=ApexReplyCode.NOT_AUTHORIZED, step="4.7.1/access")
    if message is None and schemas.message is not None:
        text = "the topic's messages are XML"
        return ContentPublishPlan(code=ApexReplyCode.INVALID_MESSAGE, step="5.9.1", text=text)
    try:
        if isinstance(message, ParsedMessage):
            if topic is not None:
                check_headers(message.envelope, topic, originator)
            schemas.check(message.content)
        elif message is not None:
            schemas.check_body(message)
    except ApexError as exc:
        return ContentPublishPlan(code=exc.code, step="5.9.1", text=str(exc), trans_id=trans_id)
    if isinstance(message, ParsedMessage) and expired(message.envelope, now_ms):
        text = "expired before it was published: delivered to nobody"
        return ContentPublishPlan(
            code=250, step="5.2.1/expired", text=text, deliveries={}, trans_id=trans_id
        )
    horizon = originator if topic_of(originator) is not None else None
    keys = matcher.without_selector() if view is None else matcher.match(view)
    matched = (
        key
        for key in keys
        if key[0] != horizon and (sub := subscriptions.get(key)) is not None and sub.active(now_ms)
    )
    return ContentPublishPlan(
        code=250, step="5.10", deliveries=delivery_ids(matched), trans_id=trans_id
    )


__all__ = [
    "MAX_REPLAYED",
    "CacheAction",
    "CachedMessage",
    "CancelOutcome",
    "ContentPublishPlan",
    "ContentSubscribed",
    "ContentSubscription",
    "ContentUnsubscribed",
    "SubscribeOutcome",
    "SubscriptionKey",
    "cache_action",
    "cancel",
    "cancel_changes",
    "check_headers",
    "compile_selection",
    "expired",
    "publish",
    "replayed",
    "same_selection",
    "subscribe",
]
