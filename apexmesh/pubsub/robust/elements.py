"""The robust pubsub delivery options (XEP-0040 mapped onto APEX, docs/robust.md
"Elements").

- ``robust``: the content of the per-recipient option ``internal='robust'`` on every
  delivery of a robust topic (XEP 2.1's ``publish`` attributes: linkseq, sourceseq,
  from, type, permtoken; the link epoch; heartbeats with ``ns='link.heartbeat'``;
  redeliveries of a source repair or snapshot with ``gap`` and ``gapseq``);
- ``publish``: the content of the per-data option a publisher sends with its data (type,
  item, permtoken, source for a contribution).

The operations and answers (gap, sourcequery, snapshot, permissions, gapreply,
sourceinfo, published) are :mod:`apexmesh.pubsub.robust.operations`. Elements are in
:data:`NS` or in no namespace, read alike and written in :data:`NS`, parsed with the one
hardened parser: 500 not well-formed, 501 not following the syntax, 553 a value out of
range, 504 an unknown publish type.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.numbered import HOLE, numbers_of, with_numbers
from apexmesh.apex.options import Option, TargetHop
from apexmesh.beep.xml import Element
from apexmesh.common.cache import BoundedCache
from apexmesh.pubsub.robust._wire import (
    HEARTBEAT_NS,
    MAX_CHANGES,
    MAX_GAP,
    MAX_SOURCES,
    NS,
    OPTION_NAME,
    PERMISSIONING,
    TYPES_REPORTED,
    link_span,
)
from apexmesh.pubsub.robust._wire import INVALID as _INVALID
from apexmesh.pubsub.robust._wire import digits as _digits
from apexmesh.pubsub.robust._wire import empty as _empty
from apexmesh.pubsub.robust._wire import link_seq as _link_seq
from apexmesh.pubsub.robust._wire import local as _local
from apexmesh.pubsub.robust._wire import opt as _opt
from apexmesh.pubsub.robust._wire import root as _root
from apexmesh.pubsub.robust._wire import source_seq as _source_seq
from apexmesh.pubsub.robust.permissions import (
    check_token,
)
from apexmesh.pubsub.robust.publish_types import PublishType, check_item, publish_type
from apexmesh.pubsub.robust.seq import RESYNC, Resolution

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


#: The numbering attributes of ``robust``: the RobustInfo field each sets (those that
#: change from delivery to delivery, apexmesh/apex/numbered.py ``NUMBERED_ATTRIBUTES``).
_NUMBER_FIELDS: Final = {
    "linkseq": "link_seq",
    "linkepoch": "link_epoch",
    "sourceseq": "source_seq",
    "gap": "gap",
    "gapseq": "gap_seq",
}


def _number(name: str, value: str, resolution: Resolution | None) -> int:
    """The value of numbering attribute ``name`` (501 not a number, 553 out of range)."""
    if name == "linkseq":
        return _link_seq(value, None, resolution)
    if name == "linkepoch":
        return _source_seq(value, None, "linkepoch", 0)
    if name == "sourceseq":
        return _source_seq(value, None)
    if name == "gap":
        return _dtd.trans_id(value, "robust")
    return _digits(value, "gapseq", None, MAX_GAP, 1)


def robust_from(element: Element, resolution: Resolution | None = None) -> RobustInfo:
    """Read a ``robust`` element; ``resolution`` bounds linkseq (64 bits when unknown)."""
    if _local(element) != "robust":
        _dtd.fail(f"expected robust, got {_local(element)[:32]!r}")
    attrs = _dtd.attributes(element, allowed=_ROBUST_ATTRS, required=("from",))
    _empty(element, None)
    ns = attrs.get("ns")
    if ns is not None and ns != HEARTBEAT_NS:
        _dtd.fail(f"robust: ns {ns[:32]!r} is not {HEARTBEAT_NS}")

    def number(name: str) -> int | None:
        return None if name not in attrs else _number(name, attrs[name], resolution)

    return RobustInfo(
        link_seq=number("linkseq"),
        link_epoch=number("linkepoch"),
        source_seq=number("sourceseq"),
        source=_dtd.endpoint(attrs["from"], "robust"),
        type=None if "type" not in attrs else publish_type(attrs["type"]),
        item=None if "item" not in attrs else check_item(attrs["item"]),
        permtoken=None if "permtoken" not in attrs else check_token(attrs["permtoken"]),
        contributor=(
            None if "contributor" not in attrs else _dtd.endpoint(attrs["contributor"], "robust")
        ),
        heartbeat=ns is not None,
        gap=number("gap"),
        gap_seq=number("gapseq"),
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


class LinkOptions:
    """The ``robust`` options of one publication's (or heartbeat's) recipients, which
    differ only in their link seq and epoch.

    :class:`Option` puts its content in canonical form by parsing it, which for a
    fan-out to 100 links was a fifth of a sequencing pod's CPU (bench/robust_pubsub.py
    profiled with py-spy). Here the option is built, checked and made canonical once;
    each recipient's is that canonical text with its own two numbers in place (digits,
    which canonical form leaves as they are), copied without parsing again.
    """

    __slots__ = ("_after_epoch", "_before_seq", "_between", "_fields")

    def __init__(self, info: RobustInfo, trans_id: int) -> None:
        if info.link_seq is None or info.link_epoch is None:
            raise ValueError("LinkOptions numbers links: link_seq and link_epoch are needed")
        template = robust_option(info, trans_id)
        content = template.content
        #: The template's other fields, as a frozen dataclass copy would take them.
        self._fields = tuple(
            (f.name, getattr(template, f.name))
            for f in dataclasses.fields(Option)
            if f.name != "content"
        )
        seq = b'linkseq="%d"' % info.link_seq
        epoch = b'linkepoch="%d"' % info.link_epoch
        at_seq, at_epoch = content.find(seq), content.find(epoch)
        if at_seq < 0 or at_epoch < at_seq + len(seq):
            raise ValueError("robust option content is not in the expected canonical form")
        self._before_seq = content[:at_seq] + b'linkseq="'
        self._between = b'"' + content[at_seq + len(seq) : at_epoch] + b'linkepoch="'
        self._after_epoch = b'"' + content[at_epoch + len(epoch) :]

    def for_link(self, link_seq: int, link_epoch: int) -> Option:
        """The option of one recipient's link (numbers the store assigned: in range)."""
        option = object.__new__(Option)
        for name, value in self._fields:
            object.__setattr__(option, name, value)
        content = b"%s%d%s%d%s" % (
            self._before_seq,
            link_seq,
            self._between,
            link_epoch,
            self._after_epoch,
        )
        object.__setattr__(option, "content", content)
        return option


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


#: Robust option shapes a :class:`RobustReader` keeps: one per link epoch and source
#: (and publish type, item, token) its receiver hears from.
KNOWN_ROBUST_SHAPES: Final = 256


#: RobustInfo's fields, and the setters of its slots: a copy with other numbers made
#: with them costs a fifth of ``dataclasses.replace`` (which runs the class's checks,
#: unneeded here: the numbers' presence, all they check, is part of the shape).
_INFO_FIELDS: Final = tuple(field.name for field in dataclasses.fields(RobustInfo))
_INFO_SETTERS: Final = tuple(RobustInfo.__dict__[name].__set__ for name in _INFO_FIELDS)


class _RobustShape:
    """The information of one shape of robust option content (see
    :class:`RobustReader`): every field but the numbers, and which field each number
    sets, in document order."""

    __slots__ = ("info", "names", "places", "values")

    def __init__(self, info: RobustInfo, shape: bytes) -> None:
        self.info = info
        # Each piece before a number ends with `` name="`` (numbered.py's form).
        pieces = shape.split(HOLE)[:-1]
        #: The numbering attribute of each number, in document order.
        self.names = tuple(piece[piece.rfind(b" ") + 1 : -2].decode() for piece in pieces)
        #: Where in :data:`_INFO_FIELDS` each number goes (-1: in no field).
        self.places = tuple(
            _INFO_FIELDS.index(_NUMBER_FIELDS[name]) if name in _NUMBER_FIELDS else -1
            for name in self.names
        )
        #: ``info``'s field values.
        self.values = [getattr(info, name) for name in _INFO_FIELDS]

    def read(self, numbers: list[bytes], resolution: Resolution | None) -> RobustInfo:
        """The information of the content of this shape with ``numbers``, each checked
        as :func:`robust_from` checks it (501, 553)."""
        values = self.values.copy()
        for name, place, number in zip(self.names, self.places, numbers, strict=True):
            values[place] = _number(name, number.decode("ascii"), resolution)
        info = object.__new__(RobustInfo)
        for setter, value in zip(_INFO_SETTERS, values, strict=True):
            setter(info, value)
        return info

    @classmethod
    def checked(
        cls, info: RobustInfo, shape: bytes, numbers: list[bytes], resolution: Resolution | None
    ) -> _RobustShape | None:
        """The shape of ``info``, read by the full parser from content ``shape`` with
        ``numbers``; None unless each number is a distinct numbering attribute of the
        element and the shape reads its own and other numbers as the parser does."""
        known = cls(info, shape)
        if len(set(known.places)) != len(known.places) or -1 in known.places:
            return None
        try:
            if known.read(numbers, resolution) != info:
                return None
            others = [b"%d" % (index + 1) for index in range(len(numbers))]
            content = with_numbers(shape, others)
            other = Option(internal=OPTION_NAME, trans_id=1, content=content)
            if known.read(others, resolution) != robust_from_option(other, resolution):
                return None
        except ApexError:
            return None
        return known


class RobustReader:
    """:func:`robust_from_option` for one receiver (a RobustClient), which reads one
    option per delivery: the hardened parser and the element checks cost several times
    the data's own parse once that is remembered (apexmesh/apex/memo.py).

    Contents that differ from one read before only in their numbers (linkseq,
    linkepoch, sourceseq, gap, gapseq, as apexmesh/apex/numbered.py cuts them) are read
    from that one: its other fields as they were, each number checked as the parser
    checks it (range by the caller's resolution). A shape is kept only when it passes a
    self-check; any other content goes through the parser. The shapes are the reader's,
    in a bounded cache.
    """

    __slots__ = ("_seen", "_shapes")

    def __init__(self, shapes: int = KNOWN_ROBUST_SHAPES) -> None:
        self._shapes: BoundedCache[bytes, _RobustShape] = BoundedCache("robust shapes", shapes)
        #: Shapes not kept: True seen once, False refused by the self-check. A shape is
        #: checked (two more reads) the second time it is seen, so that shapes seen once
        #: each (a topic's thousands of items) cost no more than the parser.
        self._seen: BoundedCache[bytes, bool] = BoundedCache("robust shapes seen", shapes)

    def read(self, option: Option, resolution: Resolution | None = None) -> RobustInfo:
        """What :func:`robust_from_option` returns (or raises) for ``option``."""
        shaped = None if option.internal != OPTION_NAME else numbers_of(option.content)
        if shaped is None:
            return robust_from_option(option, resolution)
        shape, numbers = shaped
        known = self._shapes.get(shape)
        if known is not None:
            return known.read(numbers, resolution)
        info = robust_from_option(option, resolution)
        seen = self._seen.get(shape)
        if seen is None:
            self._seen.put(shape, True)
        elif seen:
            checked = _RobustShape.checked(info, shape, numbers, resolution)
            if checked is None:
                self._seen.put(shape, False)
            else:
                self._seen.pop(shape)
                self._shapes.put(shape, checked)
        return info


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


__all__ = [
    "KNOWN_ROBUST_SHAPES",
    "LinkOptions",
    "HEARTBEAT_NS",
    "MAX_CHANGES",
    "MAX_GAP",
    "MAX_SOURCES",
    "NS",
    "OPTION_NAME",
    "PERMISSIONING",
    "TYPES_REPORTED",
    "PublishHeader",
    "RobustInfo",
    "RobustReader",
    "link_span",
    "publish_from",
    "publish_from_option",
    "publish_option",
    "robust_from",
    "robust_from_option",
    "robust_option",
]
