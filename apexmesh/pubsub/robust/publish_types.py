"""Publish types and the last-value image per item (XEP-0040 section 3).

A publication about a data item says how it relates to what a receiver holds (3.1):

- ``update``: the fields it carries replace those fields; other fields held stay valid;
- ``correction``: as update, but the previous values of those fields were wrong;
- ``image``: all of the item: every field held is dropped and replaced;
- ``drop``: the item is dead: delete and purge it;
- ``snapshot``: a subscriber's request for the current data and no further updates (not
  something a publisher publishes);
- ``add``: discontinued by the XEP itself, "the role taken up by the image": read as
  ``image``.

The service keeps the last-value image of every item (the fold of its publications
under these rules) so that a snapshot answers the current image, and a new subscriber can
ask for images first. A publication's fields are its payload's top-level XML child
elements by local name (:func:`fields_of_payload`); a payload that is not XML is one
opaque field (:data:`OPAQUE_FIELD`), so an update of it replaces it. Pure: the caller owns
the images and stores them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import Element, to_bytes

#: The field name of a payload that is not XML.
OPAQUE_FIELD: Final = ""
#: Longest item key (an item is named in every publication about it).
MAX_ITEM_OCTETS: Final = 256


class PublishType(enum.Enum):
    """XEP 3.1's publish type field values (``add`` is parsed as IMAGE)."""

    UPDATE = "update"
    CORRECTION = "correction"
    IMAGE = "image"
    DROP = "drop"
    SNAPSHOT = "snapshot"


#: Every value a peer may send, ``add`` included (3.1: "interpreted in the same way").
_BY_TEXT: Final = {member.value: member for member in PublishType} | {"add": PublishType.IMAGE}

#: The types a publisher may publish (snapshot is a request).
PUBLISHABLE: Final = frozenset(
    {PublishType.UPDATE, PublishType.CORRECTION, PublishType.IMAGE, PublishType.DROP}
)


def publish_type(text: str, *, trans_id: int | None = None) -> PublishType:
    """The type named by ``text``; 504 ("parameter not implemented") for one this server
    does not know (3.1: "other types can be defined as the need arises")."""
    found = _BY_TEXT.get(text)
    if found is None:
        _dtd.fail(
            f"publish type {text[:32]!r} is not implemented",
            ApexReplyCode.PARAMETER_NOT_IMPLEMENTED,
            trans_id=trans_id,
        )
    return found


def check_item(text: str, *, trans_id: int | None = None) -> str:
    """An item key: 1..256 octets without control characters; 553 otherwise."""
    if not text or len(text.encode()) > MAX_ITEM_OCTETS or any(ord(c) < 0x20 for c in text):
        _dtd.fail(
            f"item {text[:32]!r} is not an item key",
            ApexReplyCode.PARAMETER_INVALID,
            trans_id=trans_id,
        )
    return text


@dataclass(frozen=True, slots=True, kw_only=True)
class Image:
    """The current value of one item: its fields (name -> serialized element, or the
    opaque payload), and the source and source seq of the last publication folded in."""

    item: str
    fields: Mapping[str, bytes]
    source: str
    source_seq: int
    #: The permission token of the last publication folded in (XEP 5.1): a snapshot
    #: answers the image only to a subscriber the token allows.
    permtoken: str | None = None

    def payload(self) -> bytes:
        """The image as a payload: the opaque field, or the fields in name order inside
        an ``image`` element."""
        if set(self.fields) == {OPAQUE_FIELD}:
            return self.fields[OPAQUE_FIELD]
        body = b"".join(self.fields[name] for name in sorted(self.fields))
        return b"<image>" + body + b"</image>"


def fields_of_payload(payload: bytes) -> dict[str, bytes]:
    """A payload's fields: the child elements of its XML root by local name (the last of
    a repeated name wins), or the whole payload as :data:`OPAQUE_FIELD` when it is not an
    XML document (or has no child elements)."""
    try:
        root = _dtd.parse_root(payload)
    except ApexError:
        return {OPAQUE_FIELD: payload}
    out: dict[str, bytes] = {}
    for child in root:
        tag = child.tag
        if not isinstance(tag, str):
            continue
        local = tag.rpartition("}")[2]
        out[local] = to_bytes_without_tail(child)
    return out or {OPAQUE_FIELD: payload}


def to_bytes_without_tail(element: Element) -> bytes:
    saved = element.tail
    element.tail = None
    try:
        return to_bytes(element)
    finally:
        element.tail = saved


def fold(
    current: Image | None,
    kind: PublishType | None,
    *,
    item: str,
    fields: Mapping[str, bytes],
    source: str,
    source_seq: int,
) -> Image | None:
    """The item's image after one publication (None: the item is gone or never was).

    ``kind`` None (a publication without a type about an item) folds as ``update``.
    Raises 553 for ``snapshot``: it is a request, never folded."""
    if kind is PublishType.SNAPSHOT:
        _dtd.fail("snapshot is a request, not a publication", ApexReplyCode.PARAMETER_INVALID)
    if kind is PublishType.DROP:
        return None
    if kind is PublishType.IMAGE or current is None:
        merged = dict(fields)
    elif OPAQUE_FIELD in fields or OPAQUE_FIELD in current.fields:
        # An opaque payload has no fields to merge: the newer one stands.
        merged = dict(fields)
    else:
        merged = {**current.fields, **fields}
    return Image(item=item, fields=merged, source=source, source_seq=source_seq)


def snapshot(images: Mapping[str, Image], item: str | None = None) -> tuple[Image, ...]:
    """What a snapshot request answers: the image of ``item`` (none if it has none), or
    every item's image in item order; no subscription follows."""
    if item is not None:
        found = images.get(item)
        return () if found is None else (found,)
    return tuple(images[name] for name in sorted(images))


__all__ = [
    "MAX_ITEM_OCTETS",
    "OPAQUE_FIELD",
    "PUBLISHABLE",
    "Image",
    "PublishType",
    "check_item",
    "fields_of_payload",
    "fold",
    "publish_type",
    "snapshot",
]
