"""The subscribe, reply and cancel of content-based pubsub (draft-wyman-apex-pubsub-00
sections 5.6, 5.8 and 5.8.2, schema of 8.2).

The draft extends draft-schwartz's attribute-only ``subscribe`` and ``cancel`` with child
elements (its examples put every field in one: ``<ps:topic>``, ``<ps:subscriber>``,
``<ps:duration>``, ``<ps:cached>``, ``<ps:selector>``). Both forms are read: a field may
be an attribute (draft-schwartz's DTD) or a child element (the 8.2 schema), not both.
Elements may be in no namespace or in a pubsub namespace (:data:`PUBSUB_NAMESPACES`: the
8.2 schema's and the examples'); they are written in :data:`PUBSUB_NS` with the ``ps``
prefix, as the examples write them.

Readings (also in docs/pubsub.md):

- The selector is the ``selector`` child (the examples; the prose and the 8.1 DTD call
  it ``select``, accepted too). A ``selector='#Name'`` attribute of ``subscribe`` must
  name it by its ``Name``; at most one selector. Its ``class`` is required (5.6: "must
  include an attribute referring to the message selector class").
- ``cached`` asks for cached messages when present "with a non-empty value" (5.8); the
  values ``false``, ``0`` and ``no`` are read as not asking, as a user writing them means.
- ``cancel``: topic and subscription-id are each optional (5.8.2's four forms); the
  ``transID`` is required as draft-schwartz's DTD says (the reply names it).
- ``reply`` answering a subscribe carries ``<subscription-id>`` (5.8); any other reply is
  the APEX core's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.elements import Reply, reply_from
from apexmesh.apex.endpoint import Endpoint
from apexmesh.beep.xml import Element, escape_text
from apexmesh.pubsub._fields import (
    PUBSUB_NS,
    field,
    fields_of,
    naming,
    number,
    pubsub_tag,
    text_of,
)
from apexmesh.pubsub.elements import (
    MAX_SECONDS,
    CreateTopic,
    DeleteTopic,
    ListTopics,
    check_topic,
    operation_from,
)

#: Longest subscription identifier (the 8.2 schema types it xs:int).
MAX_SUBSCRIPTION_ID: Final = 2_147_483_647

_NOT_ASKED: Final = frozenset({"", "false", "0", "no"})


def subscription_id_of(value: str, trans_id: int | None) -> int:
    return number(value, "subscription-id", trans_id, low=0, high=MAX_SUBSCRIPTION_ID)


def _element(tag: str, text: str) -> str:
    return f"<ps:{tag}>{escape_text(text)}</ps:{tag}>"


# --------------------------------------------------------------------------- selector


@dataclass(frozen=True, slots=True, kw_only=True)
class SelectorSpec:
    """A ``selector`` element (section 5.6): its class and text, not yet compiled."""

    selector_class: str
    text: str
    name: str | None = None

    def to_xml(self) -> str:
        head = "" if self.name is None else _dtd.attr("Name", self.name)
        head += _dtd.attr("class", self.selector_class)
        return f"<ps:selector{head}>{escape_text(self.text)}</ps:selector>"


def selector_from(element: Element, trans_id: int | None) -> SelectorSpec:
    attrs = _dtd.attributes(element, allowed=("Name", "class", "dtd"), required=("class",))
    if not attrs["class"].strip():
        _dtd.fail("selector: empty class", trans_id=trans_id)
    return SelectorSpec(
        selector_class=attrs["class"].strip(),
        text=text_of(element, trans_id),
        name=attrs.get("Name"),
    )


# --------------------------------------------------------------------------- subscribe


@dataclass(frozen=True, slots=True, kw_only=True)
class ContentSubscribe:
    """``subscribe`` of section 5.8 (draft-schwartz's fields, plus cached and selector).

    ``duration`` is kept signed (draft-schwartz 4.5 step 3 answers a duration <= 0 with
    553, so it is a value to refuse, not XML that cannot be read)."""

    topic: str
    subscriber: Endpoint
    duration: int
    trans_id: int
    cached: bool = False
    selector: SelectorSpec | None = None

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "subscribe")
        check_topic(self.topic, trans_id=self.trans_id)
        if abs(self.duration) > MAX_SECONDS:
            _dtd.fail(f"subscribe: duration {self.duration} out of range", trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        head = _dtd.attr("transID", str(self.trans_id))
        if self.selector is not None and self.selector.name is not None:
            head += _dtd.attr("selector", f"#{self.selector.name}")
        body = (
            _element("topic", self.topic)
            + _element("subscriber", str(self.subscriber))
            + _element("duration", str(self.duration))
            + (_element("cached", "true") if self.cached else "")
            + ("" if self.selector is None else self.selector.to_xml())
        )
        return f"<ps:subscribe{head} xmlns:ps='{PUBSUB_NS}'>{body}</ps:subscribe>".encode()


def content_subscribe_from(element: Element) -> ContentSubscribe:
    """Either form of ``subscribe``; 501 for what neither allows, 553 for a malformed
    topic or subscriber."""
    raw = element.attrib.get("transID")
    trans_id = _dtd.trans_id(None if raw is None else str(raw), "subscribe")
    with naming(trans_id):
        attrs, children = fields_of(
            element,
            attributes=("transID", "Name", "selector", "subscriber", "topic", "duration", "cached"),
            children=("topic", "subscriber", "duration", "cached", "selector", "select"),
            trans_id=trans_id,
        )
        values = {
            name: field(name, attrs, children, trans_id, "subscribe")
            for name in ("topic", "subscriber", "duration", "cached")
        }
        for name in ("topic", "subscriber", "duration"):
            if values[name] is None:
                _dtd.fail(f"subscribe: missing {name}", trans_id=trans_id)
        if "selector" in children and "select" in children:
            _dtd.fail("subscribe: more than one selector", trans_id=trans_id)
        chosen = children.get("selector", children.get("select"))
        selector = None if chosen is None else selector_from(chosen, trans_id)
        reference = attrs.get("selector")
        if reference is not None and (selector is None or f"#{selector.name}" != reference):
            _dtd.fail(
                f"subscribe: selector {reference[:48]!r} names no selector", trans_id=trans_id
            )
        duration = number(
            str(values["duration"]), "duration", trans_id, low=-MAX_SECONDS, high=MAX_SECONDS
        )
        subscriber = _dtd.endpoint(str(values["subscriber"]), "subscribe", trans_id=trans_id)
        return ContentSubscribe(
            topic=check_topic(str(values["topic"]), trans_id=trans_id),
            subscriber=subscriber,
            duration=duration,
            trans_id=trans_id,
            cached=(values["cached"] or "").strip().lower() not in _NOT_ASKED,
            selector=selector,
        )


# --------------------------------------------------------------------------- reply


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionReply:
    """The ``reply`` to a subscribe (section 5.8): the code and, on success, the id."""

    code: int
    trans_id: int
    subscription_id: int | None = None
    text: str = ""

    def __post_init__(self) -> None:
        _dtd.check_code(self.code, "reply")
        _dtd.check_uniqid(self.trans_id, "reply")
        if self.subscription_id is not None and not (
            0 <= self.subscription_id <= MAX_SUBSCRIPTION_ID
        ):
            _dtd.fail(f"reply: subscription-id {self.subscription_id} out of range")

    def to_xml(self) -> bytes:
        if self.subscription_id is None:
            return Reply(code=self.code, trans_id=self.trans_id, text=self.text).to_xml()
        head = _dtd.attr("code", str(self.code)) + _dtd.attr("transID", str(self.trans_id))
        child = f"<subscription-id>{self.subscription_id}</subscription-id>"
        return f"<reply{head}>{child}</reply>".encode()


def subscription_reply_from(element: Element) -> SubscriptionReply:
    """A ``reply`` with or without ``subscription-id``."""
    children = list(_dtd.element_children(element)) if len(element) else []
    if not children:
        reply = reply_from(element)
        trans_id = reply.trans_id or 0  # reply_from requires it: never 0
        return SubscriptionReply(code=reply.code, trans_id=trans_id, text=reply.text)
    attrs = _dtd.attributes(element, allowed=("code", "transID"), required=("code", "transID"))
    trans_id = _dtd.trans_id(attrs["transID"], "reply")
    if len(children) != 1 or pubsub_tag(children[0]) != "subscription-id":
        _dtd.fail("reply: only a subscription-id may be inside", trans_id=trans_id)
    return SubscriptionReply(
        code=_dtd.reply_code(attrs["code"], "reply"),
        trans_id=trans_id,
        subscription_id=subscription_id_of(text_of(children[0], trans_id), trans_id),
    )


# --------------------------------------------------------------------------- cancel


@dataclass(frozen=True, slots=True, kw_only=True)
class ContentCancel:
    """``cancel`` of section 5.8.2, in any of its four forms: topic and id (that
    subscription), topic only (all the subject's subscriptions to the topic), id only
    (that subscription, whatever its topic), neither (all the subject's subscriptions).
    ``subscriber`` is draft-schwartz's optional subject (the originator when absent)."""

    trans_id: int
    topic: str | None = None
    subscription_id: int | None = None
    subscriber: Endpoint | None = None

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "cancel")
        if self.topic is not None:
            check_topic(self.topic, trans_id=self.trans_id)
        if self.subscription_id is not None and not (
            0 <= self.subscription_id <= MAX_SUBSCRIPTION_ID
        ):
            _dtd.fail("cancel: subscription-id out of range", trans_id=self.trans_id)

    def subject(self, originator: Endpoint) -> Endpoint:
        return originator if self.subscriber is None else self.subscriber

    def to_xml(self) -> bytes:
        head = _dtd.attr("transID", str(self.trans_id))
        if self.subscriber is not None:
            head += _dtd.attr("subscriber", str(self.subscriber))
        body = "" if self.topic is None else _element("topic", self.topic)
        if self.subscription_id is not None:
            body += _element("subscription-id", str(self.subscription_id))
        return f"<ps:cancel{head} xmlns:ps='{PUBSUB_NS}'>{body}</ps:cancel>".encode()


def content_cancel_from(element: Element) -> ContentCancel:
    raw = element.attrib.get("transID")
    trans_id = _dtd.trans_id(None if raw is None else str(raw), "cancel")
    with naming(trans_id):
        attrs, children = fields_of(
            element,
            attributes=("transID", "topic", "subscriber", "subscription-id"),
            children=("topic", "subscription-id"),
            trans_id=trans_id,
        )
        topic = field("topic", attrs, children, trans_id, "cancel")
        identifier = field("subscription-id", attrs, children, trans_id, "cancel")
        subscriber = None
        if "subscriber" in attrs:
            subscriber = _dtd.endpoint(attrs["subscriber"], "cancel", trans_id=trans_id)
        return ContentCancel(
            trans_id=trans_id,
            topic=None if topic is None else check_topic(topic, trans_id=trans_id),
            subscription_id=None
            if identifier is None
            else subscription_id_of(identifier, trans_id),
            subscriber=subscriber,
        )


ContentOperation = CreateTopic | DeleteTopic | ListTopics | ContentSubscribe | ContentCancel


def content_operation_from(root: Element) -> ContentOperation:
    """An operation sent to a content-based service: every subscribe and cancel, in
    either form and namespace, as :class:`ContentSubscribe` / :class:`ContentCancel`
    (draft-schwartz's form is the content-based one without the extensions); the other
    operations as :func:`apexmesh.pubsub.elements.operation_from` reads them."""
    tag = pubsub_tag(root)
    if tag == "subscribe":
        return content_subscribe_from(root)
    if tag == "cancel":
        return content_cancel_from(root)
    operation = operation_from(root)
    if not isinstance(operation, CreateTopic | DeleteTopic | ListTopics):
        _dtd.fail(f"unexpected operation {tag[:32]!r}")  # unreachable: handled above
    return operation


def parse_content_operation(body: bytes | str) -> ContentOperation:
    """Parse an operation sent to ``apex=pubsub``: 500, 501, 553 as
    :func:`apexmesh.pubsub.elements.parse_operation`, with the draft's extensions."""
    return content_operation_from(_dtd.parse_root(body))


def is_content_form(element: Element) -> bool:
    """True when a subscribe or cancel uses the draft's extensions (a namespace, child
    elements, or attributes draft-schwartz's DTD lacks), so the caller routes it here;
    draft-schwartz's attribute form stays with :mod:`apexmesh.pubsub.elements`."""
    tag = _dtd.tag_of(element)
    extra = {"cached", "selector", "Name", "subscription-id"}
    return (
        tag.startswith("{")
        or next(element.iterchildren(), None) is not None
        or any(str(name) in extra for name in element.attrib)
    )


__all__ = [
    "MAX_SUBSCRIPTION_ID",
    "ContentCancel",
    "ContentOperation",
    "ContentSubscribe",
    "SelectorSpec",
    "SubscriptionReply",
    "content_cancel_from",
    "content_operation_from",
    "content_subscribe_from",
    "is_content_form",
    "parse_content_operation",
    "selector_from",
    "subscription_id_of",
    "subscription_reply_from",
]
