"""Shared pieces of the robust elements (docs/robust.md "Namespace and common rules"):
the namespace, the bounds, and number and attribute helpers. Every failure is the 501 or
553 of :mod:`apexmesh.apex._dtd`."""

from __future__ import annotations

from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.beep.xml import Element
from apexmesh.pubsub.robust.seq import MAX_SOURCE_SEQ, RESYNC, Resolution

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

#: 553: a value, not the XML, is wrong.
INVALID: Final = ApexReplyCode.PARAMETER_INVALID


def local(element: Element) -> str:
    """The element's name in :data:`NS` or no namespace; ``{ns}x`` otherwise."""
    tag = _dtd.tag_of(element)
    if tag.startswith("{" + NS + "}"):
        return tag[len(NS) + 2 :]
    return tag


def digits(value: str, what: str, trans_id: int | None, high: int, low: int = 0) -> int:
    """A decimal number in ``low .. high``: 501 when not a number, 553 out of range."""
    if not value.isascii() or not value.isdigit() or len(value) > 20:
        _dtd.fail(f"{what} {value[:24]!r} is not a number", trans_id=trans_id)
    number = int(value)
    if not low <= number <= high:
        _dtd.fail(f"{what} {number} out of range", INVALID, trans_id=trans_id)
    return number


def link_seq(value: str, trans_id: int | None, resolution: Resolution | None) -> int:
    high = (resolution or Resolution.BITS64).max_seq
    return digits(value, "linkseq", trans_id, high)


def source_seq(value: str, trans_id: int | None, what: str = "sourceseq", low: int = 1) -> int:
    return digits(value, what, trans_id, MAX_SOURCE_SEQ, low)


def link_span(resolution: Resolution, first: int, last: int) -> int:
    """How many link seqs ``first .. last`` covers (0 counts as the step before 1)."""
    if first == RESYNC:
        return 1 if last == RESYNC else last + 1
    # 0 only ever starts an epoch: a range ending at it is no range.
    return resolution.span(first, last) if last != RESYNC else MAX_GAP + 1


def empty(element: Element, trans_id: int | None) -> None:
    if _dtd.element_children(element) or (element.text or "").strip():
        _dtd.fail(f"{local(element)}: must be empty", trans_id=trans_id)


def head(pairs: list[tuple[str, str | None]]) -> str:
    return "".join(_dtd.attr(name, value) for name, value in pairs if value is not None)


def root(tag: str, pairs: list[tuple[str, str | None]], body: bytes = b"") -> bytes:
    return _dtd.container(tag, _dtd.attr("xmlns", NS) + head(pairs), body)


def opt(value: int | None) -> str | None:
    return None if value is None else str(value)


__all__ = [
    "HEARTBEAT_NS",
    "MAX_CHANGES",
    "MAX_GAP",
    "MAX_SOURCES",
    "NS",
    "OPTION_NAME",
    "PERMISSIONING",
    "TYPES_REPORTED",
    "digits",
    "empty",
    "head",
    "link_seq",
    "link_span",
    "local",
    "opt",
    "root",
    "source_seq",
]
