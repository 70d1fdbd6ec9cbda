"""The pubsub service elements (draft-schwartz-apex-pubsub-02 section 6.1) and topic names.

Topic names are hierarchical, NNTP-like (section 2): components separated by ``.``. The
DTD's TOPIC syntax is ``[a-z][a-z0-9.-_]*``; read literally ``.-_`` is a character range
(``.`` to ``_``, which would admit ``/``, ``@`` and upper case), an evident slip for the
three characters ``.``, ``-`` and ``_``, which is what is accepted here. Empty components
(``a..b``, a trailing ``.``) are refused as NNTP refuses them, and names are bounded by
:data:`MAX_TOPIC_OCTETS`. A malformed topic is 553 ("parameter invalid"), as a malformed
ENDPOINT is: the DTD types TOPIC as CDATA, so it is the value, not the XML, that is bad.

Elements are parsed from trees built by the one hardened parser (through
:mod:`apexmesh.apex._dtd`): poorly-formed XML is 500; an unknown element or attribute, a
missing ``#REQUIRED`` attribute, content in an EMPTY element, a bad transID or a duration
that is not a number is 501; a malformed endpoint or topic is 553. Errors carry the
transID when it could be read, so the ``reply`` names it (section 4.2, last paragraph).

Two readings of the draft, written down here and in docs/pubsub.md:

- ``cancel``: the prose of section 4.6 gives it a ``subscriber`` attribute, the DTD does
  not. It is accepted and optional; absent, the subject is the originator.
- ``listtopics``: the DTD gives it no attributes, yet section 4.4 step 2 answers "having
  the same transID attribute value". An optional ``transID`` is accepted and echoed.
- The DTD's ``<!ATTLIST name %TOPIC; #REQUIRED>`` is read as the ``name`` attribute of
  ``topic``, as the example of section 2.3 uses it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Reply, reply_from
from apexmesh.apex.endpoint import Endpoint, well_known
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import Element
from apexmesh.pubsub._fields import pubsub_tag
from apexmesh.pubsub.robust.settings import ATTRIBUTES as ROBUST_ATTRIBUTES
from apexmesh.pubsub.robust.settings import settings_from_attributes
from apexmesh.pubsub.topic_access import TopicAccess, access_from
from apexmesh.pubsub.topic_description import TopicDescription, description_from

#: The well-known endpoint name of the service (section 5.1).
SERVICE_NAME: Final = "pubsub"

#: ``Name`` of the data-content carrying an operation, as in the draft's examples.
CONTENT_NAME: Final = "Content"

#: The access control tokens of section 5.1 (``core:data`` is RFC 3340's).
CREATETOPIC_TOKEN: Final = "pubsub:createtopic"  # noqa: S105 - access token names
DELETETOPIC_TOKEN: Final = "pubsub:deletetopic"  # noqa: S105
LISTTOPICS_TOKEN: Final = "pubsub:listtopics"  # noqa: S105
SUBSCRIBE_TOKEN: Final = "pubsub:subscribe"  # noqa: S105
CANCEL_TOKEN: Final = "pubsub:cancel"  # noqa: S105
DATA_TOKEN: Final = "core:data"  # noqa: S105

#: Longest topic name: a topic is a subaddress of an endpoint, whose identity RFC 3340
#: bounds by 1024 octets together with the rest; 255 leaves room for any domain.
MAX_TOPIC_OCTETS: Final = 255

#: Largest SECONDS value (2**31-1, the UNIQID bound, as for presence).
MAX_SECONDS: Final = 2_147_483_647

#: Topics in one topiclist (bounds one answer; a domain with more is refused 554).
MAX_TOPICS_LISTED: Final = 10_000

#: The well-known topics of draft-wyman-apex-pubsub-00 section 6 ("The 'WKT=' prefix for
#: topic names is reserved for registered well-known topics"): names outside the topic
#: syntax, valid only as exactly these, which the service alone creates.
WELL_KNOWN_TOPICS: Final = frozenset({"WKT=Topics", "WKT=Subscriptions"})

_TOPIC: Final = re.compile(r"[a-z][a-z0-9_-]*(?:\.[a-z0-9_-]+)*")
_SIGNED: Final = re.compile(r"[+-]?[0-9]{1,10}")


def is_topic(text: str) -> bool:
    """True for a topic name of section 2 / the DTD's TOPIC (see the module docstring), or
    a registered well-known topic."""
    if text in WELL_KNOWN_TOPICS:
        return True
    return len(text) <= MAX_TOPIC_OCTETS and _TOPIC.fullmatch(text) is not None


def check_topic(text: str, *, trans_id: int | None = None) -> str:
    """``text`` when it is a topic name; 553 otherwise."""
    if not is_topic(text):
        _dtd.fail(
            f"{text[:64]!r} is not a topic name",
            ApexReplyCode.PARAMETER_INVALID,
            trans_id=trans_id,
        )
    return text


def topic_endpoint(topic: str, domain: str) -> Endpoint:
    """``apex=pubsub/TOPIC@DOMAIN``, the address data for ``topic`` is sent to (section 3)."""
    return Endpoint(f"apex={SERVICE_NAME}", check_topic(topic), domain)


def service_endpoint(domain: str) -> Endpoint:
    """``apex=pubsub@DOMAIN``."""
    return well_known(SERVICE_NAME, domain)


def topic_of(endpoint: Endpoint) -> str | None:
    """The topic an ``apex=pubsub/TOPIC`` endpoint names; None for any other endpoint
    (including a subaddress that is not a topic name)."""
    if endpoint.address != f"apex={SERVICE_NAME}" or endpoint.subaddress is None:
        return None
    return endpoint.subaddress if is_topic(endpoint.subaddress) else None


def is_service(endpoint: Endpoint) -> bool:
    """True for ``apex=pubsub@DOMAIN`` itself (no subaddress)."""
    return endpoint.address == f"apex={SERVICE_NAME}" and endpoint.subaddress is None


# --------------------------------------------------------------------------- elements


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopic:
    """``createtopic`` (section 4.2), with the optional children draft-wyman-apex-pubsub-00
    adds (section 6.2.3: publishers, description, message and selector schemas)."""

    topic: str
    trans_id: int
    description: TopicDescription = field(default_factory=TopicDescription)
    #: Who may subscribe and publish (``access`` children, apexmesh/pubsub/topic_access.py);
    #: None: the default statement.
    access: TopicAccess | None = None

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "createtopic")
        check_topic(self.topic, trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        head = _dtd.attr("topic", self.topic) + _dtd.attr("transID", str(self.trans_id))
        robust = self.description.settings.robust
        if robust is not None:
            head += "".join(_dtd.attr(k, v) for k, v in robust.to_attributes().items())
        body = self.description.to_xml() + (b"" if self.access is None else self.access.to_xml())
        return _dtd.container("createtopic", head, body)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopic:
    """``deletetopic`` (section 4.3)."""

    topic: str
    trans_id: int

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "deletetopic")
        check_topic(self.topic, trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        head = _dtd.attr("topic", self.topic) + _dtd.attr("transID", str(self.trans_id))
        return f"<deletetopic{head} />".encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class ListTopics:
    """``listtopics`` (section 4.4); ``trans_id`` None when absent (DTD: no attributes)."""

    trans_id: int | None = None

    def __post_init__(self) -> None:
        if self.trans_id is not None:
            _dtd.check_uniqid(self.trans_id, "listtopics")

    def to_xml(self) -> bytes:
        if self.trans_id is None:
            return b"<listtopics />"
        return f"<listtopics{_dtd.attr('transID', str(self.trans_id))} />".encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe:
    """``subscribe`` (section 4.5). ``duration`` is kept signed: section 4.5 step 3
    answers a duration "less than or equal to zero" with 553, so a negative number is a
    value the service refuses, not XML it cannot read."""

    subscriber: Endpoint
    topic: str
    trans_id: int
    duration: int

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "subscribe")
        check_topic(self.topic, trans_id=self.trans_id)
        if abs(self.duration) > MAX_SECONDS:
            _dtd.fail(f"subscribe: duration {self.duration} out of range", trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        head = (
            _dtd.attr("subscriber", str(self.subscriber))
            + _dtd.attr("topic", self.topic)
            + _dtd.attr("duration", str(self.duration))
            + _dtd.attr("transID", str(self.trans_id))
        )
        return f"<subscribe{head} />".encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancel:
    """``cancel`` (section 4.6), sent by a subscriber or by the service."""

    topic: str
    trans_id: int
    #: The subject; None when the attribute is absent (the originator is meant).
    subscriber: Endpoint | None = None

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "cancel")
        check_topic(self.topic, trans_id=self.trans_id)

    def subject(self, originator: Endpoint) -> Endpoint:
        return originator if self.subscriber is None else self.subscriber

    def to_xml(self) -> bytes:
        head = ""
        if self.subscriber is not None:
            head += _dtd.attr("subscriber", str(self.subscriber))
        head += _dtd.attr("topic", self.topic) + _dtd.attr("transID", str(self.trans_id))
        return f"<cancel{head} />".encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicList:
    """``topiclist`` (section 4.4 step 2): the topics of the domain, each a ``topic``."""

    topics: tuple[str, ...] = ()
    trans_id: int | None = None

    def __post_init__(self) -> None:
        if self.trans_id is not None:
            _dtd.check_uniqid(self.trans_id, "topiclist")
        for topic in self.topics:
            check_topic(topic)

    def to_xml(self) -> bytes:
        head = "" if self.trans_id is None else _dtd.attr("transID", str(self.trans_id))
        body = b"".join(f"<topic{_dtd.attr('name', t)} />".encode() for t in self.topics)
        return _dtd.container("topiclist", head, body)


Operation = CreateTopic | DeleteTopic | ListTopics | Subscribe | Cancel

#: What an endpoint receives from the service.
ServiceMessage = TopicList | Cancel | Reply


# --------------------------------------------------------------------------- parsing


def _empty(element: Element, trans_id: int | None) -> None:
    if _dtd.element_children(element) or (element.text or "").strip():
        _dtd.fail(f"{_dtd.tag_of(element)}: must be empty", trans_id=trans_id)


def _named(exc: ApexError, trans_id: int | None) -> ApexError:
    if exc.trans_id is None:
        exc.trans_id = trans_id
    return exc


def _topic_operation(element: Element) -> tuple[str, int]:
    tag = _dtd.tag_of(element)
    attrs = _dtd.attributes(element, allowed=("topic", "transID"), required=("topic", "transID"))
    trans_id = _dtd.trans_id(attrs["transID"], tag)
    try:
        _empty(element, trans_id)
        return check_topic(attrs["topic"], trans_id=trans_id), trans_id
    except ApexError as exc:
        raise _named(exc, trans_id) from None


def createtopic_from(element: Element) -> CreateTopic:
    """draft-schwartz's empty createtopic, or draft-wyman's with children (6.2.3), with
    the attributes of a robust topic (docs/robust.md "createtopic: a robust topic")."""
    attrs = _dtd.attributes(
        element, allowed=("topic", "transID", *ROBUST_ATTRIBUTES), required=("topic", "transID")
    )
    trans_id = _dtd.trans_id(attrs["transID"], "createtopic")
    try:
        children = _dtd.element_children(element)
        stated = [child for child in children if pubsub_tag(child) == "access"]
        children = [child for child in children if pubsub_tag(child) != "access"]
        access = access_from(stated)
        description = description_from(children, trans_id, "createtopic")
        topic = check_topic(attrs["topic"], trans_id=trans_id)
        robust = settings_from_attributes(attrs, trans_id=trans_id)
    except ApexError as exc:
        raise _named(exc, trans_id) from None
    if robust is not None:
        settings = dataclasses.replace(description.settings, robust=robust)
        description = dataclasses.replace(description, settings=settings)
    return CreateTopic(topic=topic, trans_id=trans_id, description=description, access=access)


def deletetopic_from(element: Element) -> DeleteTopic:
    topic, trans_id = _topic_operation(element)
    return DeleteTopic(topic=topic, trans_id=trans_id)


def listtopics_from(element: Element) -> ListTopics:
    attrs = _dtd.attributes(element, allowed=("transID",))
    trans_id = None if "transID" not in attrs else _dtd.trans_id(attrs["transID"], "listtopics")
    _empty(element, trans_id)
    return ListTopics(trans_id=trans_id)


def _duration(value: str, trans_id: int) -> int:
    text = value.strip()
    if not _SIGNED.fullmatch(text):
        _dtd.fail(f"subscribe: duration {value[:16]!r} is not a number", trans_id=trans_id)
    number = int(text)
    if abs(number) > MAX_SECONDS:
        _dtd.fail(f"subscribe: duration {number} out of range", trans_id=trans_id)
    return number


def subscribe_from(element: Element) -> Subscribe:
    names = ("subscriber", "topic", "transID", "duration")
    attrs = _dtd.attributes(element, allowed=names, required=names)
    trans_id = _dtd.trans_id(attrs["transID"], "subscribe")
    try:
        _empty(element, trans_id)
        duration = _duration(attrs["duration"], trans_id)
        subscriber = _dtd.endpoint(attrs["subscriber"], "subscribe", trans_id=trans_id)
        topic = check_topic(attrs["topic"], trans_id=trans_id)
    except ApexError as exc:
        raise _named(exc, trans_id) from None
    return Subscribe(subscriber=subscriber, topic=topic, trans_id=trans_id, duration=duration)


def cancel_from(element: Element) -> Cancel:
    attrs = _dtd.attributes(
        element, allowed=("subscriber", "topic", "transID"), required=("topic", "transID")
    )
    trans_id = _dtd.trans_id(attrs["transID"], "cancel")
    try:
        _empty(element, trans_id)
        subscriber = None
        if "subscriber" in attrs:
            subscriber = _dtd.endpoint(attrs["subscriber"], "cancel", trans_id=trans_id)
        topic = check_topic(attrs["topic"], trans_id=trans_id)
    except ApexError as exc:
        raise _named(exc, trans_id) from None
    return Cancel(topic=topic, trans_id=trans_id, subscriber=subscriber)


def topiclist_from(element: Element) -> TopicList:
    attrs = _dtd.attributes(element, allowed=("transID",))
    trans_id = None if "transID" not in attrs else _dtd.trans_id(attrs["transID"], "topiclist")
    names: list[str] = []
    for child in _dtd.element_children(element):
        if _dtd.tag_of(child) != "topic":
            _dtd.fail(f"topiclist: unexpected element {_dtd.tag_of(child)[:32]!r}")
        child_attrs = _dtd.attributes(child, allowed=("name",), required=("name",))
        _empty(child, trans_id)
        names.append(check_topic(child_attrs["name"]))
    return TopicList(topics=tuple(names), trans_id=trans_id)


_OPERATIONS: Final[dict[str, Callable[[Element], Operation]]] = {
    "createtopic": createtopic_from,
    "deletetopic": deletetopic_from,
    "listtopics": listtopics_from,
    "subscribe": subscribe_from,
    "cancel": cancel_from,
}


def operation_from(root: Element) -> Operation:
    """The operation ``root`` is; 501 for any other element."""
    parse = _OPERATIONS.get(_dtd.tag_of(root))
    if parse is None:
        _dtd.fail(f"unknown pubsub operation {_dtd.tag_of(root)[:32]!r}")
    return parse(root)


def parse_operation(body: bytes | str) -> Operation:
    """Parse an operation sent to ``apex=pubsub`` (createtopic, deletetopic, listtopics,
    subscribe, cancel); raise :class:`ApexError` (500, 501, 553) with the transID when
    it could be read."""
    return operation_from(_dtd.parse_root(body))


def parse_service_message(body: bytes | str) -> ServiceMessage:
    """What an endpoint receives from the service: ``topiclist``, ``cancel`` or
    ``reply``; 501 for anything else."""
    root = _dtd.parse_root(body)
    tag = _dtd.tag_of(root)
    if tag == "topiclist":
        return topiclist_from(root)
    if tag == "cancel":
        return cancel_from(root)
    if tag != "reply":
        _dtd.fail(f"unexpected pubsub message {tag[:32]!r}")
    return reply_from(root, require_trans_id=False)


__all__ = [
    "CANCEL_TOKEN",
    "CONTENT_NAME",
    "CREATETOPIC_TOKEN",
    "DATA_TOKEN",
    "DELETETOPIC_TOKEN",
    "LISTTOPICS_TOKEN",
    "MAX_SECONDS",
    "MAX_TOPICS_LISTED",
    "MAX_TOPIC_OCTETS",
    "SERVICE_NAME",
    "SUBSCRIBE_TOKEN",
    "WELL_KNOWN_TOPICS",
    "Cancel",
    "CreateTopic",
    "DeleteTopic",
    "ListTopics",
    "Operation",
    "ServiceMessage",
    "Subscribe",
    "TopicList",
    "cancel_from",
    "check_topic",
    "createtopic_from",
    "deletetopic_from",
    "is_service",
    "is_topic",
    "listtopics_from",
    "operation_from",
    "parse_operation",
    "parse_service_message",
    "service_endpoint",
    "subscribe_from",
    "topic_endpoint",
    "topic_of",
    "topiclist_from",
]
