"""The robust pubsub operations and answers (XEP-0040 2.4, 3.1, 4, 5.1 on APEX,
docs/robust.md "Elements"): ``gap`` by link range or by source and ``gapreply``,
``sourcequery`` / ``sourceinfo``, ``snapshot``, ``permissions``, and ``published`` (a
publication's source seq, to its publisher). Parsed with the one hardened parser; errors
carry the transID when it could be read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.endpoint import Endpoint
from apexmesh.beep.xml import Element
from apexmesh.pubsub._fields import naming
from apexmesh.pubsub.elements import check_topic
from apexmesh.pubsub.robust._wire import INVALID as _INVALID
from apexmesh.pubsub.robust._wire import (
    MAX_CHANGES,
    MAX_GAP,
    MAX_SOURCES,
    PERMISSIONING,
    TYPES_REPORTED,
    link_span,
)
from apexmesh.pubsub.robust._wire import digits as _digits
from apexmesh.pubsub.robust._wire import empty as _empty
from apexmesh.pubsub.robust._wire import head as _head
from apexmesh.pubsub.robust._wire import link_seq as _link_seq
from apexmesh.pubsub.robust._wire import local as _local
from apexmesh.pubsub.robust._wire import opt as _opt
from apexmesh.pubsub.robust._wire import root as _root
from apexmesh.pubsub.robust._wire import source_seq as _source_seq
from apexmesh.pubsub.robust.permissions import (
    Actor,
    ChangeKind,
    PermissionChange,
    PermissionTable,
    TokenLists,
    actor_of,
    check_token,
)
from apexmesh.pubsub.robust.position import Resume, resume_from
from apexmesh.pubsub.robust.publish_types import check_item
from apexmesh.pubsub.robust.seq import MAX_SOURCE_SEQ, Resolution
from apexmesh.pubsub.robust.settings import (
    RobustSettings,
    settings_from_attributes,
)

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


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionsQuery:
    """``permissions`` without changes, to ``apex=pubsub@DOMAIN``: the table in force,
    read back (answered with ``permissiontable``)."""

    topic: str
    trans_id: int

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "permissions")
        check_topic(self.topic, trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        return _root("permissions", [("topic", self.topic), ("transID", str(self.trans_id))])


def _permissions_query_from(element: Element) -> PermissionsQuery:
    attrs = _dtd.attributes(element, allowed=("topic", "transID"), required=("topic", "transID"))
    trans_id = _dtd.trans_id(attrs["transID"], "permissions")
    with naming(trans_id):
        _empty(element, trans_id)
        return PermissionsQuery(topic=check_topic(attrs["topic"]), trans_id=trans_id)


Request = GapRequest | SourceQuery | SnapshotRequest | Resume | PermissionsQuery

_REQUESTS: Final[dict[str, Callable[[Element], Request]]] = {
    "gap": _gap_from,
    "sourcequery": _sourcequery_from,
    "snapshot": _snapshot_from,
    "resume": resume_from,
    "permissions": _permissions_query_from,
}


def parse_request(body: bytes | str) -> Request:
    """A robust operation sent to ``apex=pubsub@DOMAIN`` (gap, sourcequery, snapshot,
    resume, a permissions query)."""
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
        if not 0 <= self.count <= MAX_SOURCE_SEQ:  # a source repair: all of the stream
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


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionTableAnswer:
    """``permissiontable``: the permission table in force (XEP 5.1: "the pubsub systems
    should be able to <iq/> the publisher for the permissioning regime that applies")::

        <permissiontable xmlns='urn:apexmesh:robust-pubsub:1' topic='t' transID='3'>
          <token name='6747' owner='fred@example.com'>
            <grant actor='*@customer.example' /><deny actor='rival@customer.example' />
          </token>
        </permissiontable>
    """

    topic: str
    trans_id: int
    table: PermissionTable

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "permissiontable")
        check_topic(self.topic, trans_id=self.trans_id)

    def to_xml(self) -> bytes:
        body = b""
        for name in self.table.names():
            lists = self.table.tokens.get(name, TokenLists())
            owner = self.table.owners.get(name)
            actors = [("grant", a) for a in sorted(lists.grant, key=lambda a: a.pattern)]
            actors += [("deny", a) for a in sorted(lists.deny, key=lambda a: a.pattern)]
            inner = "".join(f"<{kind}{_dtd.attr('actor', a.pattern)} />" for kind, a in actors)
            head = _dtd.attr("name", name) + ("" if owner is None else _dtd.attr("owner", owner))
            body += f"<token{head}>{inner}</token>".encode()
        pairs: list[tuple[str, str | None]] = [
            ("topic", self.topic),
            ("transID", str(self.trans_id)),
        ]
        return _root("permissiontable", pairs, body)


def _permission_table_from(element: Element) -> PermissionTableAnswer:
    _attrs, topic, trans_id = _answer_head(element, (), ())
    tokens: dict[str, TokenLists] = {}
    owners: dict[str, str] = {}
    with naming(trans_id):
        for child in _dtd.element_children(element):
            if _local(child) != "token":
                _dtd.fail(f"permissiontable: unexpected element {_local(child)[:32]!r}")
            token_attrs = _dtd.attributes(child, allowed=("name", "owner"), required=("name",))
            name = check_token(token_attrs["name"])
            if "owner" in token_attrs:
                owners[name] = str(_dtd.endpoint(token_attrs["owner"], "owner"))
            grant: set[Actor] = set()
            deny: set[Actor] = set()
            for entry in _dtd.element_children(child):
                kind = _local(entry)
                if kind not in ("grant", "deny"):
                    _dtd.fail(f"permissiontable: unexpected element {kind[:32]!r}")
                actor = actor_of(_dtd.attributes(entry, allowed=("actor",))["actor"])
                (grant if kind == "grant" else deny).add(actor)
            if grant or deny:
                tokens[name] = TokenLists(frozenset(grant), frozenset(deny))
    return PermissionTableAnswer(
        topic=topic, trans_id=trans_id, table=PermissionTable(tokens, owners)
    )


Answer = GapReply | SourceInfo | Published | PermissionTableAnswer


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
        count = _digits(attrs["count"], "count", trans_id, MAX_SOURCE_SEQ)
        return GapReply(topic=topic, trans_id=trans_id, count=count)
    if tag == "permissiontable":
        return _permission_table_from(root)
    if tag == "published":
        attrs, topic, trans_id = _answer_head(root, ("sourceseq",), ("sourceseq",))
        _empty(root, trans_id)
        return Published(
            topic=topic, trans_id=trans_id, source_seq=_source_seq(attrs["sourceseq"], trans_id)
        )
    return _dtd.fail(f"unexpected robust answer {tag[:32]!r}")


__all__ = [
    "Answer",
    "GapReply",
    "GapRequest",
    "PermissionTableAnswer",
    "Permissions",
    "PermissionsQuery",
    "Position",
    "Published",
    "Request",
    "SnapshotRequest",
    "SourceInfo",
    "SourceQuery",
    "parse_answer",
    "parse_permissions",
    "parse_request",
]
