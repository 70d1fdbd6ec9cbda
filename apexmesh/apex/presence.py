"""The APEX presence service elements (RFC 3343 section 6), sans I/O.

The presence service lives at the well-known endpoint ``apex=presence`` of each
administrative domain. Consumers send ``subscribe``, ``watch``, ``publish`` and
``terminate``; the service answers with ``reply`` and sends ``publish``, ``notify`` and
``terminate`` on its own (the synopsis of section 6).

The DTD is enforced by hand on trees built by the one hardened parser
(:func:`apexmesh.beep.xml.parse_xml` through :mod:`apexmesh.apex._dtd`): poorly-formed XML
is 500, XML that does not follow the DTD (unknown element or attribute, missing
``#REQUIRED`` attribute, bad transID, SECONDS or TIMESTAMP, a ``presence`` without a
``tuple``) is 501, a malformed ENDPOINT is 553. Errors carry the operation's transID when
it could be read, so the ``reply`` can name it (section 4.2: "the transID attribute is
identical to the value found in the ... element sent by the originator").

Timestamps are kept as the text the peer sent (relays and services must not rewrite what
they pass on) and compared by instant (:func:`same_instant`, section 4.4 step 5:
"semantically identical").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from apexmesh.apex import _dtd
from apexmesh.apex.access import AccessError, parse_timestamp
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Terminate, terminate_from
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import Element

#: The well-known endpoint name of the service (RFC 3343 section 5).
SERVICE_NAME: Final = "presence"

#: ``Name`` of the data-content that carries an operation, as in the RFC's examples.
CONTENT_NAME: Final = "Content"

#: The access control tokens of RFC 3343 section 5.
SUBSCRIBE_TOKEN: Final = "presence:subscribe"  # noqa: S105 - an access token name
WATCH_TOKEN: Final = "presence:watch"  # noqa: S105
PUBLISH_TOKEN: Final = "presence:publish"  # noqa: S105

#: Largest SECONDS value accepted (2**31-1, the UNIQID bound: about 68 years).
MAX_SECONDS: Final = 2_147_483_647

#: Tuples per presence entry an application may publish: bounds the work one publish can
#: cause (fan-out to every subscriber carries the whole entry). Larger entries are a
#: policy refusal (554). The mesh's own tuples (a pubsub service's topics) are not
#: bounded by it (docs/presence.md).
MAX_TUPLES: Final = 256

#: Capabilities per tuple, for the same reason.
MAX_CAPABILITIES: Final = 64

Action = Literal["subscribe", "terminate"]


def check_timestamp(text: str, what: str, *, trans_id: int | None = None) -> datetime:
    """A TIMESTAMP (RFC 3339 date-time) as an aware datetime; 501 when malformed."""
    try:
        return parse_timestamp(text)
    except AccessError:
        _dtd.fail(f"{what}: {text[:64]!r} is not a timestamp", trans_id=trans_id)


def same_instant(first: str, second: str) -> bool:
    """True when two timestamps name the same instant (section 4.4 step 5)."""
    try:
        return parse_timestamp(first) == parse_timestamp(second)
    except AccessError:
        return False


def format_time(now: datetime) -> str:
    """The service's notion of the current date and time, RFC 3339 UTC with microseconds
    (distinct successive ``lastUpdate`` values, as the access service does)."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(value: str, tag: str, trans_id: int) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > 10:
        _dtd.fail(f"{tag}: duration {value[:16]!r} is not a number of seconds", trans_id=trans_id)
    number = int(value)
    if number > MAX_SECONDS:
        _dtd.fail(f"{tag}: duration {number} out of range", trans_id=trans_id)
    return number


def _uri(value: str, what: str, *, absolute: bool, empty: bool = False) -> str:
    if empty and value == "":
        return value
    ok = _dtd.is_absolute_uri(value) if absolute else _dtd.is_uri_reference(value)
    if not ok:
        _dtd.fail(f"{what}: {value[:64]!r} is not a URI")
    return value


# --------------------------------------------------------------------------- elements


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe:
    """``subscribe`` (RFC 3343 section 4.2): receive a publisher's presence entry."""

    publisher: Endpoint
    trans_id: int
    #: Seconds of interest; 0 is a one-time poll.
    duration: int

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "subscribe")
        if not 0 <= self.duration <= MAX_SECONDS:
            _dtd.fail(f"subscribe: duration {self.duration} out of range")

    def to_xml(self) -> bytes:
        return (
            f"<subscribe{_dtd.attr('publisher', str(self.publisher))}"
            f"{_dtd.attr('duration', str(self.duration))}"
            f"{_dtd.attr('transID', str(self.trans_id))} />"
        ).encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Watch:
    """``watch`` (RFC 3343 section 4.3): receive notices about a publisher's subscribers."""

    publisher: Endpoint
    trans_id: int
    #: Seconds of interest; 0 is a one-time poll.
    duration: int

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "watch")
        if not 0 <= self.duration <= MAX_SECONDS:
            _dtd.fail(f"watch: duration {self.duration} out of range")

    def to_xml(self) -> bytes:
        return (
            f"<watch{_dtd.attr('publisher', str(self.publisher))}"
            f"{_dtd.attr('duration', str(self.duration))}"
            f"{_dtd.attr('transID', str(self.trans_id))} />"
        ).encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Capability:
    """``capability`` (section 3): what content an entity can receive, per a baseline."""

    baseline: str
    text: str = ""

    def __post_init__(self) -> None:
        _uri(self.baseline, "capability baseline", absolute=False)

    def to_xml(self) -> bytes:
        return _dtd.with_text(
            f"<capability{_dtd.attr('baseline', self.baseline)}", "capability", self.text
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PresenceTuple:
    """``tuple`` (section 3): one entity associated with the publisher."""

    #: The entity as a URI (``apex:fred/appl=im@example.com``, ``mailto:...``).
    destination: str
    #: Latest date and time the entity can receive messages (TIMESTAMP text).
    available_until: str
    #: Arbitrary information about the entity (URI), "" when absent.
    tuple_info: str = ""
    capabilities: tuple[Capability, ...] = ()

    def __post_init__(self) -> None:
        _uri(self.destination, "tuple destination", absolute=True)
        check_timestamp(self.available_until, "tuple availableUntil")
        _uri(self.tuple_info, "tuple tupleInfo", absolute=False, empty=True)
        if len(self.capabilities) > MAX_CAPABILITIES:
            _dtd.fail(
                f"tuple: more than {MAX_CAPABILITIES} capabilities",
                ApexReplyCode.TRANSACTION_FAILED,
            )

    def available_at(self, when: datetime) -> bool:
        """True while ``availableUntil`` is later than ``when``."""
        return check_timestamp(self.available_until, "tuple availableUntil") > when

    def to_xml(self) -> bytes:
        head = _dtd.attr("destination", self.destination) + _dtd.attr(
            "availableUntil", self.available_until
        )
        if self.tuple_info:
            head += _dtd.attr("tupleInfo", self.tuple_info)
        return _dtd.container("tuple", head, b"".join(c.to_xml() for c in self.capabilities))


@dataclass(frozen=True, slots=True, kw_only=True)
class Presence:
    """``presence`` (section 3): the presence entry of one endpoint."""

    publisher: Endpoint
    #: When the service last updated the entry (TIMESTAMP text).
    last_update: str
    #: Arbitrary information about the publisher (URI), "" when absent.
    publisher_info: str = ""
    #: One or more tuples (DTD ``tuple+``).
    tuples: tuple[PresenceTuple, ...]

    def __post_init__(self) -> None:
        check_timestamp(self.last_update, "presence lastUpdate")
        _uri(self.publisher_info, "presence publisherInfo", absolute=False, empty=True)
        if not self.tuples:
            _dtd.fail("presence: at least one tuple is required")

    def to_xml(self) -> bytes:
        head = _dtd.attr("publisher", str(self.publisher)) + _dtd.attr(
            "lastUpdate", self.last_update
        )
        if self.publisher_info:
            head += _dtd.attr("publisherInfo", self.publisher_info)
        return _dtd.container("presence", head, b"".join(t.to_xml() for t in self.tuples))


@dataclass(frozen=True, slots=True, kw_only=True)
class Publish:
    """``publish`` (section 4.4): a presence entry, to the service or from it."""

    publisher: Endpoint
    trans_id: int
    #: The sender's notion of the current date and time (TIMESTAMP text).
    time_stamp: str
    presence: Presence

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "publish")
        check_timestamp(self.time_stamp, "publish timeStamp", trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        head = (
            _dtd.attr("publisher", str(self.publisher))
            + _dtd.attr("transID", str(self.trans_id))
            + _dtd.attr("timeStamp", self.time_stamp)
        )
        return _dtd.container("publish", head, self.presence.to_xml())


@dataclass(frozen=True, slots=True, kw_only=True)
class Notify:
    """``notify`` (section 4.6): a subscription to the watched publisher began or ended."""

    subscriber: Endpoint
    #: The transID of the watch operation this notice belongs to.
    trans_id: int
    #: Requested duration of the subscription (reported for ``subscribe`` only).
    duration: int = 0
    action: Action = "subscribe"

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "notify")
        if not 0 <= self.duration <= MAX_SECONDS:
            _dtd.fail(f"notify: duration {self.duration} out of range")

    def to_xml(self) -> bytes:
        head = _dtd.attr("subscriber", str(self.subscriber)) + _dtd.attr(
            "transID", str(self.trans_id)
        )
        if self.duration:
            head += _dtd.attr("duration", str(self.duration))
        head += _dtd.attr("action", self.action)
        return f"<notify{head} />".encode()


Operation = Subscribe | Watch | Publish | Terminate


# --------------------------------------------------------------------------- parsing


def _empty(element: Element) -> None:
    if _dtd.element_children(element):
        _dtd.fail(f"{_dtd.tag_of(element)}: must be empty")


def _subscription_from(element: Element) -> tuple[Endpoint, int, int]:
    tag = _dtd.tag_of(element)
    attrs = _dtd.attributes(
        element,
        allowed=("publisher", "transID", "duration"),
        required=("publisher", "transID", "duration"),
    )
    trans_id = _dtd.trans_id(attrs["transID"], tag)
    try:
        _empty(element)
        duration = _seconds(attrs["duration"], tag, trans_id)
        publisher = _dtd.endpoint(attrs["publisher"], tag, trans_id=trans_id)
    except ApexError as exc:
        exc.trans_id = trans_id
        raise
    return publisher, trans_id, duration


def subscribe_from(element: Element) -> Subscribe:
    publisher, trans_id, duration = _subscription_from(element)
    return Subscribe(publisher=publisher, trans_id=trans_id, duration=duration)


def watch_from(element: Element) -> Watch:
    publisher, trans_id, duration = _subscription_from(element)
    return Watch(publisher=publisher, trans_id=trans_id, duration=duration)


def capability_from(element: Element) -> Capability:
    attrs = _dtd.attributes(element, allowed=("baseline",), required=("baseline",))
    return Capability(baseline=attrs["baseline"], text=_dtd.text_content(element))


def tuple_from(element: Element) -> PresenceTuple:
    attrs = _dtd.attributes(
        element,
        allowed=("destination", "availableUntil", "tupleInfo"),
        required=("destination", "availableUntil"),
    )
    children = _dtd.element_children(element)
    if len(children) > MAX_CAPABILITIES:
        _dtd.fail(
            f"tuple: more than {MAX_CAPABILITIES} capabilities", ApexReplyCode.TRANSACTION_FAILED
        )
    for child in children:
        if _dtd.tag_of(child) != "capability":
            _dtd.fail(f"tuple: unexpected element {_dtd.tag_of(child)!r}")
    return PresenceTuple(
        destination=attrs["destination"],
        available_until=attrs["availableUntil"],
        tuple_info=attrs.get("tupleInfo", ""),
        capabilities=tuple(capability_from(child) for child in children),
    )


def presence_from(element: Element, *, max_tuples: int | None = None) -> Presence:
    """``presence``; ``max_tuples`` bounds what an application may publish (554)."""
    attrs = _dtd.attributes(
        element,
        allowed=("publisher", "lastUpdate", "publisherInfo"),
        required=("publisher", "lastUpdate"),
    )
    children = _dtd.element_children(element)
    if max_tuples is not None and len(children) > max_tuples:
        _dtd.fail(f"presence: more than {MAX_TUPLES} tuples", ApexReplyCode.TRANSACTION_FAILED)
    for child in children:
        if _dtd.tag_of(child) != "tuple":
            _dtd.fail(f"presence: unexpected element {_dtd.tag_of(child)!r}")
    return Presence(
        publisher=_dtd.endpoint(attrs["publisher"], "presence"),
        last_update=attrs["lastUpdate"],
        publisher_info=attrs.get("publisherInfo", ""),
        tuples=tuple(tuple_from(child) for child in children),
    )


def publish_from(element: Element, *, max_tuples: int | None = MAX_TUPLES) -> Publish:
    """``publish``: from an application (bounded by ``max_tuples``) or, with None, from
    the service (whose entries carry the mesh's tuples too)."""
    attrs = _dtd.attributes(
        element,
        allowed=("publisher", "transID", "timeStamp"),
        required=("publisher", "transID", "timeStamp"),
    )
    trans_id = _dtd.trans_id(attrs["transID"], "publish")
    try:
        children = _dtd.element_children(element)
        if len(children) != 1 or _dtd.tag_of(children[0]) != "presence":
            _dtd.fail("publish: must contain exactly one presence")
        return Publish(
            publisher=_dtd.endpoint(attrs["publisher"], "publish"),
            trans_id=trans_id,
            time_stamp=attrs["timeStamp"],
            presence=presence_from(children[0], max_tuples=max_tuples),
        )
    except ApexError as exc:
        exc.trans_id = trans_id
        raise


def notify_from(element: Element) -> Notify:
    attrs = _dtd.attributes(
        element,
        allowed=("subscriber", "transID", "duration", "action"),
        required=("subscriber", "transID"),
    )
    trans_id = _dtd.trans_id(attrs["transID"], "notify")
    _empty(element)
    action = attrs.get("action", "subscribe")
    if action not in ("subscribe", "terminate"):
        _dtd.fail(f"notify: action {action[:32]!r} is not subscribe or terminate")
    return Notify(
        subscriber=_dtd.endpoint(attrs["subscriber"], "notify"),
        trans_id=trans_id,
        duration=_seconds(attrs.get("duration", "0"), "notify", trans_id),
        action="subscribe" if action == "subscribe" else "terminate",
    )


def parse_operation(body: bytes | str) -> Operation:
    """Parse an operation sent to the service (``subscribe``, ``watch``, ``publish`` or
    ``terminate``); raise :class:`ApexError` (500, 501, 553, 554), with the transID
    when it could be read."""
    root = _dtd.parse_root(body)
    tag = _dtd.tag_of(root)
    if tag == "subscribe":
        return subscribe_from(root)
    if tag == "watch":
        return watch_from(root)
    if tag == "publish":
        return publish_from(root)
    if tag == "terminate":
        return terminate_from(root)
    raise ApexError(_dtd.SYNTAX, f"unknown presence operation {tag[:32]!r}")


def _expect(body: bytes | str, tag: str) -> Element:
    root = _dtd.parse_root(body)
    if _dtd.tag_of(root) != tag:
        _dtd.fail(f"expected {tag}, got {_dtd.tag_of(root)[:32]!r}")
    return root


def parse_subscribe(body: bytes | str) -> Subscribe:
    return subscribe_from(_expect(body, "subscribe"))


def parse_watch(body: bytes | str) -> Watch:
    return watch_from(_expect(body, "watch"))


def parse_publish(body: bytes | str) -> Publish:
    return publish_from(_expect(body, "publish"), max_tuples=None)


def parse_presence(body: bytes | str) -> Presence:
    return presence_from(_expect(body, "presence"))


def parse_notify(body: bytes | str) -> Notify:
    return notify_from(_expect(body, "notify"))


def parse_service_message(body: bytes | str) -> Publish | Notify | Terminate | None:
    """What an endpoint receives from the service: ``publish``, ``notify`` or
    ``terminate``; None for a ``reply`` (or anything else, which the caller reads as it
    likes)."""
    root = _dtd.parse_root(body)
    tag = _dtd.tag_of(root)
    if tag == "publish":
        return publish_from(root, max_tuples=None)
    if tag == "notify":
        return notify_from(root)
    if tag == "terminate":
        return terminate_from(root)
    return None


def parse_tuple(body: bytes | str) -> PresenceTuple:
    return tuple_from(_expect(body, "tuple"))


def tuples_by_destination(tuples: Iterable[PresenceTuple]) -> dict[str, PresenceTuple]:
    return {item.destination: item for item in tuples}


__all__ = [
    "CONTENT_NAME",
    "MAX_CAPABILITIES",
    "MAX_SECONDS",
    "MAX_TUPLES",
    "PUBLISH_TOKEN",
    "SERVICE_NAME",
    "SUBSCRIBE_TOKEN",
    "WATCH_TOKEN",
    "Action",
    "Capability",
    "Notify",
    "Operation",
    "Presence",
    "PresenceTuple",
    "Publish",
    "Subscribe",
    "Watch",
    "check_timestamp",
    "format_time",
    "parse_notify",
    "parse_operation",
    "parse_presence",
    "parse_publish",
    "parse_service_message",
    "parse_subscribe",
    "parse_tuple",
    "parse_watch",
    "presence_from",
    "same_instant",
    "tuples_by_destination",
]
