"""Helpers shared by the content-based pubsub element models (draft-wyman-apex-pubsub-00
section 8.2): the pubsub namespaces, fields given as attributes or child elements, and
bounded numbers. Every failure is the 501 (or 553) of :mod:`apexmesh.apex._dtd`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import Element

#: The namespace the pubsub elements are written in (the 8.2 schema's ``ps`` prefix).
PUBSUB_NS: Final = "http://www.firstrain.com/pubsub"
#: Namespaces read as the pubsub one: none, 8.2's, and the examples' (sections 5.2-6.3).
PUBSUB_NAMESPACES: Final = frozenset({"", PUBSUB_NS, "http://www.example.com/pubsub"})

_NUMBER: Final = re.compile(r"[+-]?[0-9]{1,10}")


@contextmanager
def naming(trans_id: int | None) -> Iterator[None]:
    """Errors raised inside name ``trans_id`` when they name none (the reply carries the
    operation's transID whenever it could be read)."""
    try:
        yield
    except ApexError as exc:
        if exc.trans_id is None:
            exc.trans_id = trans_id
        raise


def pubsub_tag(element: Element) -> str:
    """The element's local name when it is in no namespace or a pubsub namespace; the
    full ``{ns}name`` otherwise (which no pubsub name equals)."""
    tag = _dtd.tag_of(element)
    if tag.startswith("{"):
        namespace, _, local = tag[1:].partition("}")
        return local if namespace in PUBSUB_NAMESPACES else tag
    return tag


def fields_of(
    element: Element,
    *,
    attributes: tuple[str, ...],
    children: tuple[str, ...],
    trans_id: int | None,
) -> tuple[dict[str, str], dict[str, Element]]:
    """An element's allowed attributes and its child elements by (pubsub) name, each
    child at most once; 501 for anything else."""
    tag = pubsub_tag(element)
    attrs = _dtd.attributes(element, allowed=attributes)
    found: dict[str, Element] = {}
    for child in _dtd.element_children(element):
        name = pubsub_tag(child)
        if name not in children:
            _dtd.fail(f"{tag}: unexpected element {name[:48]!r}", trans_id=trans_id)
        if name in found:
            _dtd.fail(f"{tag}: more than one {name}", trans_id=trans_id)
        found[name] = child
    return attrs, found


def text_of(element: Element, trans_id: int | None) -> str:
    try:
        return _dtd.text_content(element)
    except ApexError as exc:
        exc.trans_id = trans_id
        raise


def field(
    name: str,
    attrs: dict[str, str],
    children: dict[str, Element],
    trans_id: int | None,
    tag: str,
) -> str | None:
    """A field given as an attribute or as a child element's text (not both; 501)."""
    if name in attrs and name in children:
        _dtd.fail(f"{tag}: {name} given twice", trans_id=trans_id)
    if name in attrs:
        return attrs[name]
    if name in children:
        return text_of(children[name], trans_id).strip()
    return None


def number(value: str, what: str, trans_id: int | None, *, low: int, high: int) -> int:
    text = value.strip()
    if not _NUMBER.fullmatch(text) or not low <= int(text) <= high:
        _dtd.fail(f"{what}: {value[:16]!r} is not a number in {low}..{high}", trans_id=trans_id)
    return int(text)


__all__ = [
    "PUBSUB_NAMESPACES",
    "PUBSUB_NS",
    "field",
    "fields_of",
    "naming",
    "number",
    "pubsub_tag",
    "text_of",
]
