"""The robust pubsub elements (XEP-0040 mapped onto APEX, docs/robust.md "Elements").

- ``robust``: the content of the per-recipient option ``internal='robust'`` on every
  delivery of a robust topic (XEP 2.1's ``publish`` attributes: linkseq, sourceseq,
  from, type, permtoken; heartbeats with ``ns='link.heartbeat'``; redeliveries of a
  source repair or snapshot with ``gap`` and ``gapseq``);
- ``publish``: the content of the per-data option a publisher sends with its data (type,
  item, permtoken, source for a contribution); ``published`` gives it its source seq;
- ``gap`` (2.4) by link range or by source, ``gapreply``; ``sourcequery`` / ``sourceinfo``
  (section 4); ``snapshot`` (3.1); ``permissions`` (5.1).

Elements are in :data:`NS` or in no namespace, read alike and written in :data:`NS`,
parsed with the one hardened parser (:mod:`apexmesh.apex._dtd`): 500 not well-formed, 501
not following the syntax, 553 a value out of range, 504 an unknown publish type; errors
carry the transID when it could be read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.options import Option, TargetHop
from apexmesh.beep.xml import Element
from apexmesh.pubsub._fields import naming
from apexmesh.pubsub.elements import check_topic
from apexmesh.pubsub.robust.permissions import (
    Actor,
    ChangeKind,
    PermissionChange,
    actor_of,
    check_token,
)
from apexmesh.pubsub.robust.publish_types import PublishType, check_item, publish_type
from apexmesh.pubsub.robust.seq import MAX_SOURCE_SEQ, RESYNC, Resolution
from apexmesh.pubsub.robust.settings import (
    ContributionRate,
    RobustSettings,
    settings_from_attributes,
)

#: The namespace of the robust elements.
NS: Final = "urn:apexmesh:robust-pubsub:1"
#: The ``internal`` name of the per-recipient and per-data options.
OPTION_NAME: Final = "robust"
#: ``ns`` of a heartbeat (XEP example 5).
HEARTBEAT_NS: Final = "link.heartbeat"
#: Longest gap by link range, and most publications answered to one gap by source: the
#: stub asks in pieces. 100,000 covers a 10,000-publication outage ten times over.
MAX_GAP: Final = 100_000
#: Most sources in one gap by source, and permission changes in one ``permissions``.
MAX_SOURCES: Final = 1_000
MAX_CHANGES: Final = 1_000
#: What ``sourceinfo`` reports (3.1 and 5.1).
TYPES_REPORTED: Final = "update correction image drop snapshot"
PERMISSIONING: Final = "token-grant-deny"

_INVALID: Final = ApexReplyCode.PARAMETER_INVALID


def _local(element: Element) -> str:
    """The element's name in :data:`NS` or no namespace; ``{ns}x`` otherwise."""
    tag = _dtd.tag_of(element)
    if tag.startswith("{" + NS + "}"):
        return tag[len(NS) + 2 :]
    return tag


def _digits(value: str, what: str, trans_id: int | None, high: int, low: int = 0) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > 20:
        _dtd.fail(f"{what} {value[:24]!r} is not a number", trans_id=trans_id)
    number = int(value)
    if not low <= number <= high:
        _dtd.fail(f"{what} {number} out of range", _INVALID, trans_id=trans_id)
    return number


def _link_seq(value: str, trans_id: int | None, resolution: Resolution | None) -> int:
    high = (resolution or Resolution.BITS64).max_seq
    return _digits(value, "linkseq", trans_id, high)


def _source_seq(value: str, trans_id: int | None, what: str = "sourceseq", low: int = 1) -> int:
    return _digits(value, what, trans_id, MAX_SOURCE_SEQ, low)


def link_span(resolution: Resolution, first: int, last: int) -> int:
    """How many link seqs ``first .. last`` covers (0 counts as the step before 1)."""
    if first == RESYNC:
        return 1 if last == RESYNC else last + 1
    # 0 only ever starts an epoch: a range ending at it is no range.
    return resolution.span(first, last) if last != RESYNC else MAX_GAP + 1


def _empty(element: Element, trans_id: int | None) -> None:
    if _dtd.element_children(element) or (element.text or "").strip():
        _dtd.fail(f"{_local(element)}: must be empty", trans_id=trans_id)


def _head(pairs: list[tuple[str, str | None]]) -> str:
    return "".join(_dtd.attr(name, value) for name, value in pairs if value is not None)


def _root(tag: str, pairs: list[tuple[str, str | None]], body: bytes = b"") -> bytes:
    return _dtd.container(tag, _dtd.attr("xmlns", NS) + _head(pairs), body)


def _opt(value: int | None) -> str | None:
    return None if value is None else str(value)


# --------------------------------------------------------------------------- robust


@dataclass(frozen=True, slots=True, kw_only=True)
class RobustInfo:
    """The ``robust`` option content of one delivery."""

    #: None only for a redelivery of a source repair or a snapshot (``gap`` set).
    link_seq: int | None
    #: The link's epoch: +1 each time the service restarts the link at 0 (None: not
    #: said). It makes a resync unambiguous even when the delivery with 0 is lost.
    link_epoch: int | None = None
    #: None for a heartbeat.
    source_seq: int | None = None
    #: The source (publisher endpoint); ``apex=pubsub@DOMAIN`` for a heartbeat.
    source: Endpoint
    type: PublishType | None = None
    item: str | None = None
    permtoken: str | None = None
    contributor: Endpoint | None = None
    heartbeat: bool = False
    #: transID of the gap or snapshot this redelivery answers, and its place 1..count.
    gap: int | None = None
    gap_seq: int | None = None

    def __post_init__(self) -> None:
        if self.heartbeat:
            extra = (self.source_seq, self.type, self.item, self.permtoken, self.contributor)
            if any(value is not None for value in extra):
                _dtd.fail("robust: a heartbeat carries only linkseq and from")
        elif self.source_seq is None:
            _dtd.fail("robust: a publication needs its sourceseq")
        if (self.gap is None) != (self.gap_seq is None):
            _dtd.fail("robust: gap and gapseq go together")
        if self.link_seq is None and self.gap is None:
            _dtd.fail("robust: linkseq is required outside a repair")
        if self.type is PublishType.SNAPSHOT:
            _dtd.fail("robust: snapshot is not a delivered type", _INVALID)

    @property
    def resync(self) -> bool:
        """Link seq 0: the service restarted this link (XEP example 4)."""
        return self.link_seq == RESYNC

    def to_xml(self) -> bytes:
        return _root(
            "robust",
            [
                ("linkseq", _opt(self.link_seq)),
                ("linkepoch", _opt(self.link_epoch)),
                ("sourceseq", _opt(self.source_seq)),
                ("from", str(self.source)),
                ("type", None if self.type is None else self.type.value),
                ("item", self.item),
                ("permtoken", self.permtoken),
                ("contributor", None if self.contributor is None else str(self.contributor)),
                ("ns", HEARTBEAT_NS if self.heartbeat else None),
                ("gap", _opt(self.gap)),
                ("gapseq", _opt(self.gap_seq)),
            ],
        )


_ROBUST_ATTRS: Final = (
    "linkseq",
    "linkepoch",
    "sourceseq",
    "from",
    "type",
    "item",
    "permtoken",
    "contributor",
    "ns",
    "gap",
    "gapseq",
)


def robust_from(element: Element, resolution: Resolution | None = None) -> RobustInfo:
    """Read a ``robust`` element; ``resolution`` bounds linkseq (64 bits when unknown)."""
    if _local(element) != "robust":
        _dtd.fail(f"expected robust, got {_local(element)[:32]!r}")
    attrs = _dtd.attributes(element, allowed=_ROBUST_ATTRS, required=("from",))
    _empty(element, None)
    ns = attrs.get("ns")
    if ns is not None and ns != HEARTBEAT_NS:
        _dtd.fail(f"robust: ns {ns[:32]!r} is not {HEARTBEAT_NS}")
    return RobustInfo(
        link_seq=None if "linkseq" not in attrs else _link_seq(attrs["linkseq"], None, resolution),
        link_epoch=None
        if "linkepoch" not in attrs
        else _source_seq(attrs["linkepoch"], None, "linkepoch", 0),
        source_seq=None if "sourceseq" not in attrs else _source_seq(attrs["sourceseq"], None),
        source=_dtd.endpoint(attrs["from"], "robust"),
        type=None if "type" not in attrs else publish_type(attrs["type"]),
        item=None if "item" not in attrs else check_item(attrs["item"]),
        permtoken=None if "permtoken" not in attrs else check_token(attrs["permtoken"]),
        contributor=(
            None if "contributor" not in attrs else _dtd.endpoint(attrs["contributor"], "robust")
        ),
        heartbeat=ns is not None,
        gap=None if "gap" not in attrs else _dtd.trans_id(attrs["gap"], "robust"),
        gap_seq=(
            None if "gapseq" not in attrs else _digits(attrs["gapseq"], "gapseq", None, MAX_GAP, 1)
        ),
    )


def robust_option(info: RobustInfo, trans_id: int) -> Option:
    """The per-recipient option carrying ``info`` (targetHop final, not mustUnderstand:
    the final relay passes it on without interpreting it, docs/robust.md)."""
    return Option(
        internal=OPTION_NAME,
        trans_id=trans_id,
        target_hop=TargetHop.FINAL,
        must_understand=False,
        content=info.to_xml(),
    )


def _option_root(option: Option) -> Element:
    if option.internal != OPTION_NAME:
        _dtd.fail(f"option {option.name[:32]!r} is not {OPTION_NAME}")
    root = _dtd.parse_root(b"<o>" + option.content + b"</o>")
    children = _dtd.element_children(root)
    if len(children) != 1:
        _dtd.fail(f"{OPTION_NAME} option: exactly one element expected")
    return children[0]


def robust_from_option(option: Option, resolution: Resolution | None = None) -> RobustInfo:
    """The delivery information of a ``robust`` option (501 for other content)."""
    return robust_from(_option_root(option), resolution)


# --------------------------------------------------------------------------- publish


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishHeader:
    """What a publisher says about its publication (per-data option content)."""

    type: PublishType | None = None
    item: str | None = None
    permtoken: str | None = None
    #: The source published to when it is not the originator: a contribution (XEP 5.2).
    source: Endpoint | None = None

    def __post_init__(self) -> None:
        if self.type is PublishType.SNAPSHOT:
            _dtd.fail("publish: snapshot is a request, not a publication", _INVALID)

    def to_xml(self, item_header: str = "item") -> bytes:
        return _root(
            "publish",
            [
                ("type", None if self.type is None else self.type.value),
                (item_header, self.item),
                ("permtoken", self.permtoken),
                ("source", None if self.source is None else str(self.source)),
            ],
        )


def publish_from(element: Element, item_header: str = "item") -> PublishHeader:
    if _local(element) != "publish":
        _dtd.fail(f"expected publish, got {_local(element)[:32]!r}")
    attrs = _dtd.attributes(element, allowed=("type", item_header, "permtoken", "source"))
    _empty(element, None)
    return PublishHeader(
        type=None if "type" not in attrs else publish_type(attrs["type"]),
        item=None if item_header not in attrs else check_item(attrs[item_header]),
        permtoken=None if "permtoken" not in attrs else check_token(attrs["permtoken"]),
        source=None if "source" not in attrs else _dtd.endpoint(attrs["source"], "publish"),
    )


def publish_option(header: PublishHeader, trans_id: int, item_header: str = "item") -> Option:
    """The per-data option a publisher sends with its data."""
    return Option(
        internal=OPTION_NAME,
        trans_id=trans_id,
        target_hop=TargetHop.FINAL,
        must_understand=False,
        content=header.to_xml(item_header),
    )


def publish_from_option(option: Option, item_header: str = "item") -> PublishHeader:
    return publish_from(_option_root(option), item_header)


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True, kw_only=True)
class GapRequest:
    """``gap`` (XEP 2.4): by link range (``link_from`` .. ``link_to``, None = up to the
    link's current position) or by source (``sources``: last valid source seq each)."""

    topic: str
    trans_id: int
    link_from: int | None = None
    link_to: int | None = None
    #: The link epoch the range belongs to (550 when the link is in another one).
    link_epoch: int | None = None
    sources: tuple[tuple[Endpoint, int], ...] = ()

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "gap")
        check_topic(self.topic, trans_id=self.trans_id)
        if self.link_from is not None and self.sources:
            _dtd.fail("gap: by link range or by source, not both", trans_id=self.trans_id)
        if self.link_from is None and (self.link_to is not None or self.link_epoch is not None):
            _dtd.fail("gap: linkto or linkepoch without linkfrom", trans_id=self.trans_id)
        if len(self.sources) > MAX_SOURCES:
            _dtd.fail("gap: too many sources", _INVALID, trans_id=self.trans_id)

    @property
    def by_link(self) -> bool:
        return self.link_from is not None

    @property
    def everything(self) -> bool:
        """A gap naming nothing: every publication retained (a stub that delivered
        nothing yet has no source position to name)."""
        return self.link_from is None and not self.sources

    def check_span(self, resolution: Resolution) -> None:
        """553 when the range passes the resolution or :data:`MAX_GAP` numbers."""
        for value in (self.link_from, self.link_to):
            if value is not None and not resolution.valid(value):
                _dtd.fail(f"gap: linkseq {value} beyond {int(resolution)} bits", _INVALID)
        first, last = self.link_from, self.link_to
        if first is not None and last is not None and link_span(resolution, first, last) > MAX_GAP:
            _dtd.fail(f"gap: more than {MAX_GAP} link seqs", _INVALID, trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        body = b"".join(
            f"<source{_dtd.attr('ns', str(src))}{_dtd.attr('after', str(after))} />".encode()
            for src, after in self.sources
        )
        return _root(
            "gap",
            [
                ("topic", self.topic),
                ("transID", str(self.trans_id)),
                ("linkfrom", _opt(self.link_from)),
                ("linkto", _opt(self.link_to)),
                ("linkepoch", _opt(self.link_epoch)),
            ],
            body,
        )


def _gap_from(element: Element) -> GapRequest:
    names = ("topic", "transID", "linkfrom", "linkto", "linkepoch", "ns", "after")
    attrs = _dtd.attributes(element, allowed=names, required=("topic", "transID"))
    trans_id = _dtd.trans_id(attrs["transID"], "gap")
    with naming(trans_id):
        sources: list[tuple[Endpoint, int]] = []
        if "ns" in attrs or "after" in attrs:
            if "ns" not in attrs or "after" not in attrs:
                _dtd.fail("gap: ns and after go together")
            sources.append(
                (_dtd.endpoint(attrs["ns"], "gap"), _source_seq(attrs["after"], None, "after", 0))
            )
        for child in _dtd.element_children(element):
            if _local(child) != "source":
                _dtd.fail(f"gap: unexpected element {_local(child)[:32]!r}")
            child_attrs = _dtd.attributes(child, allowed=("ns", "after"), required=("ns", "after"))
            _empty(child, trans_id)
            after = _source_seq(child_attrs["after"], None, "after", 0)
            sources.append((_dtd.endpoint(child_attrs["ns"], "gap"), after))
            if len(sources) > MAX_SOURCES:
                _dtd.fail("gap: too many sources", _INVALID)
        link_from = None if "linkfrom" not in attrs else _link_seq(attrs["linkfrom"], None, None)
        link_to = None if "linkto" not in attrs else _link_seq(attrs["linkto"], None, None)
        epoch = None
        if "linkepoch" in attrs:
            epoch = _source_seq(attrs["linkepoch"], None, "linkepoch", 0)
        return GapRequest(
            topic=check_topic(attrs["topic"]),
            trans_id=trans_id,
            link_from=link_from,
            link_to=link_to,
            link_epoch=epoch,
            sources=tuple(sources),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceQuery:
    """``sourcequery`` (XEP 4): the topic's capabilities, and with ``link_seq`` what that
    position of the asker's link carried."""

    topic: str
    trans_id: int
    link_seq: int | None = None

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "sourcequery")
        check_topic(self.topic, trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        pairs = [("topic", self.topic), ("transID", str(self.trans_id))]
        return _root("sourcequery", [*pairs, ("linkseq", _opt(self.link_seq))])


def _sourcequery_from(element: Element) -> SourceQuery:
    attrs = _dtd.attributes(
        element, allowed=("topic", "transID", "linkseq"), required=("topic", "transID")
    )
    trans_id = _dtd.trans_id(attrs["transID"], "sourcequery")
    with naming(trans_id):
        _empty(element, trans_id)
        link = None if "linkseq" not in attrs else _link_seq(attrs["linkseq"], trans_id, None)
        return SourceQuery(topic=check_topic(attrs["topic"]), trans_id=trans_id, link_seq=link)


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotRequest:
    """``snapshot`` (XEP 3.1): current images (of ``item``, or all) and no updates."""

    topic: str
    trans_id: int
    item: str | None = None

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "snapshot")
        check_topic(self.topic, trans_id=self.trans_id)
        if self.item is not None:
            check_item(self.item, trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        pairs = [("topic", self.topic), ("transID", str(self.trans_id))]
        return _root("snapshot", [*pairs, ("item", self.item)])


def _snapshot_from(element: Element) -> SnapshotRequest:
    attrs = _dtd.attributes(
        element, allowed=("topic", "transID", "item"), required=("topic", "transID")
    )
    trans_id = _dtd.trans_id(attrs["transID"], "snapshot")
    with naming(trans_id):
        _empty(element, trans_id)
        return SnapshotRequest(
            topic=check_topic(attrs["topic"]), trans_id=trans_id, item=attrs.get("item")
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Permissions:
    """``permissions`` (XEP 5.1): the owner's in-band grant/deny/revoke changes."""

    topic: str
    trans_id: int
    changes: tuple[PermissionChange, ...]

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "permissions")
        check_topic(self.topic, trans_id=self.trans_id)
        if not self.changes or len(self.changes) > MAX_CHANGES:
            _dtd.fail("permissions: 1 to 1000 changes", trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        body = b"".join(
            (
                f"<{c.kind.value}"
                + _dtd.attr("token", c.token)
                + _dtd.attr("actor", c.actor.pattern)
            ).encode()
            + b" />"
            for c in self.changes
        )
        return _root("permissions", [("topic", self.topic), ("transID", str(self.trans_id))], body)


def _permissions_from(element: Element) -> Permissions:
    attrs = _dtd.attributes(element, allowed=("topic", "transID"), required=("topic", "transID"))
    trans_id = _dtd.trans_id(attrs["transID"], "permissions")
    with naming(trans_id):
        changes: list[PermissionChange] = []
        for child in _dtd.element_children(element):
            try:
                kind = ChangeKind(_local(child))
            except ValueError:
                _dtd.fail(f"permissions: unexpected element {_local(child)[:32]!r}")
            names = ("token", "actor")
            child_attrs = _dtd.attributes(child, allowed=names, required=names)
            _empty(child, trans_id)
            changes.append(
                PermissionChange(
                    kind, check_token(child_attrs["token"]), actor_of(child_attrs["actor"])
                )
            )
            if len(changes) > MAX_CHANGES:
                _dtd.fail("permissions: too many changes")
        return Permissions(
            topic=check_topic(attrs["topic"]), trans_id=trans_id, changes=tuple(changes)
        )


Request = GapRequest | SourceQuery | SnapshotRequest

_REQUESTS: Final[dict[str, Callable[[Element], Request]]] = {
    "gap": _gap_from,
    "sourcequery": _sourcequery_from,
    "snapshot": _snapshot_from,
}


def parse_request(body: bytes | str) -> Request:
    """A robust operation sent to ``apex=pubsub@DOMAIN`` (gap, sourcequery, snapshot)."""
    root = _dtd.parse_root(body)
    parse = _REQUESTS.get(_local(root))
    if parse is None:
        _dtd.fail(f"unknown robust operation {_local(root)[:32]!r}")
    return parse(root)


def parse_permissions(body: bytes | str) -> Permissions:
    """A ``permissions`` sent to ``apex=pubsub/TOPIC@DOMAIN``."""
    root = _dtd.parse_root(body)
    if _local(root) != "permissions":
        _dtd.fail(f"expected permissions, got {_local(root)[:32]!r}")
    return _permissions_from(root)


# --------------------------------------------------------------------------- answers


@dataclass(frozen=True, slots=True, kw_only=True)
class GapReply:
    """``gapreply``: a gap or snapshot answered with ``count`` redeliveries."""

    topic: str
    trans_id: int
    count: int

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "gapreply")
        check_topic(self.topic, trans_id=self.trans_id)
        if not 0 <= self.count <= MAX_GAP:
            _dtd.fail("gapreply: count out of range", _INVALID, trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        pairs = [("topic", self.topic), ("transID", str(self.trans_id))]
        return _root("gapreply", [*pairs, ("count", str(self.count))])


@dataclass(frozen=True, slots=True, kw_only=True)
class Position:
    """What one link position carried (``sourceinfo``'s ``position``)."""

    link_seq: int
    source: Endpoint
    source_seq: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceInfo:
    """``sourceinfo``: the answer to a source query."""

    topic: str
    trans_id: int
    settings: RobustSettings
    position: Position | None = None

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "sourceinfo")
        check_topic(self.topic, trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        s = self.settings
        body = b""
        if self.position is not None:
            p = self.position
            body = (
                "<position"
                + _head(
                    [
                        ("linkseq", str(p.link_seq)),
                        ("sourceseq", _opt(p.source_seq)),
                        ("from", str(p.source)),
                    ]
                )
                + " />"
            ).encode()
        return _root(
            "sourceinfo",
            [
                ("topic", self.topic),
                ("transID", str(self.trans_id)),
                ("seqbits", str(int(s.resolution))),
                ("retaincount", str(s.retain_count)),
                ("retainms", str(s.retain_ms)),
                ("heartbeatms", str(s.heartbeat_ms)),
                ("types", TYPES_REPORTED),
                ("permissioning", PERMISSIONING),
                ("contributions", None if s.contributions is None else str(s.contributions)),
            ],
            body,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Published:
    """``published``: a publication's source seq, to its publisher."""

    topic: str
    trans_id: int
    source_seq: int

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "published")
        check_topic(self.topic, trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        pairs = [("topic", self.topic), ("transID", str(self.trans_id))]
        return _root("published", [*pairs, ("sourceseq", str(self.source_seq))])


Answer = GapReply | SourceInfo | Published


def _answer_head(
    element: Element, extra: tuple[str, ...], required: tuple[str, ...]
) -> tuple[dict[str, str], str, int]:
    attrs = _dtd.attributes(
        element, allowed=("topic", "transID", *extra), required=("topic", "transID", *required)
    )
    trans_id = _dtd.trans_id(attrs["transID"], _local(element))
    return attrs, check_topic(attrs["topic"], trans_id=trans_id), trans_id


def _sourceinfo_from(element: Element) -> SourceInfo:
    names = ("seqbits", "retaincount", "retainms", "heartbeatms")
    attrs, topic, trans_id = _answer_head(
        element, (*names, "types", "permissioning", "contributions"), names
    )
    settings_attrs = {name: attrs[name] for name in names} | {"robust": "true"}
    if "contributions" in attrs:
        settings_attrs["contributions"] = attrs["contributions"]
    settings = settings_from_attributes(settings_attrs, trans_id=trans_id)
    if settings is None:  # pragma: no cover - robust='true' was set just above
        _dtd.fail("sourceinfo: not robust", trans_id=trans_id)
    position = None
    children = _dtd.element_children(element)
    if len(children) > 1 or (children and _local(children[0]) != "position"):
        _dtd.fail("sourceinfo: at most one position", trans_id=trans_id)
    if children:
        p = _dtd.attributes(
            children[0], allowed=("linkseq", "sourceseq", "from"), required=("linkseq", "from")
        )
        position = Position(
            link_seq=_link_seq(p["linkseq"], trans_id, settings.resolution),
            source=_dtd.endpoint(p["from"], "position", trans_id=trans_id),
            source_seq=None if "sourceseq" not in p else _source_seq(p["sourceseq"], trans_id),
        )
    return SourceInfo(topic=topic, trans_id=trans_id, settings=settings, position=position)


def parse_answer(body: bytes | str) -> Answer:
    """What a subscriber or publisher receives from the service besides deliveries and
    ``reply``: ``gapreply``, ``sourceinfo``, ``published``."""
    root = _dtd.parse_root(body)
    tag = _local(root)
    if tag == "sourceinfo":
        return _sourceinfo_from(root)
    if tag == "gapreply":
        attrs, topic, trans_id = _answer_head(root, ("count",), ("count",))
        _empty(root, trans_id)
        count = _digits(attrs["count"], "count", trans_id, MAX_GAP)
        return GapReply(topic=topic, trans_id=trans_id, count=count)
    if tag == "published":
        attrs, topic, trans_id = _answer_head(root, ("sourceseq",), ("sourceseq",))
        _empty(root, trans_id)
        return Published(
            topic=topic, trans_id=trans_id, source_seq=_source_seq(attrs["sourceseq"], trans_id)
        )
    return _dtd.fail(f"unexpected robust answer {tag[:32]!r}")


__all__ = [
    "HEARTBEAT_NS",
    "MAX_GAP",
    "NS",
    "OPTION_NAME",
    "Actor",
    "Answer",
    "ContributionRate",
    "GapReply",
    "GapRequest",
    "Permissions",
    "Position",
    "PublishHeader",
    "Published",
    "Request",
    "RobustInfo",
    "SnapshotRequest",
    "SourceInfo",
    "SourceQuery",
    "link_span",
    "parse_answer",
    "parse_permissions",
    "parse_request",
    "publish_from",
    "publish_from_option",
    "publish_option",
    "robust_from",
    "robust_from_option",
    "robust_option",
]
