"""What the pubsub service puts on the wire and reads back, sans I/O.

The BEEP payloads it submits to the relays (an element inline as ``#Content``, RFC 3340
section 4.1; forwarded data with its content untouched, section 4.7.1 step 2), the RFC
3341 ``get`` and ``set`` of the section 7 grant, and the reading of the access service's
answers and of a delivered payload. Kept out of the service so it can be tested (and
read) without one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from apexmesh.apex import _dtd
from apexmesh.apex.access import ActorPattern
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import MimePart, build_payload, parse_payload, resolve_content
from apexmesh.apex.data import Data, DataContent, Originator, Recipient
from apexmesh.apex.elements import parse_message, reply_from
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.memo import ParseMemo
from apexmesh.beep.mime import beep_xml
from apexmesh.pubsub.elements import CONTENT_NAME


def element_payload(origin: Endpoint, recipient: Endpoint, content: bytes) -> bytes:
    """The BEEP payload of one element sent inline from ``origin`` to ``recipient``."""
    data = Data(
        content="#" + CONTENT_NAME,
        originator=Originator(identity=origin),
        recipients=(Recipient(identity=recipient),),
        data_content=DataContent(name=CONTENT_NAME, content=content),
    )
    return beep_xml(data.to_xml())


def forward_payload(data: Data, parts: Sequence[MimePart]) -> bytes:
    """The payload of forwarded data: inline content as is, MIME parts copied."""
    if not data.content.startswith("cid:") or not parts:
        return beep_xml(data.to_xml())
    # The boundary is derived from the parts (the core draws no randomness): a digest of
    # what it must not occur in, and a counter for the vanishingly rare case it does.
    digest = hashlib.blake2b(digest_size=12)
    for part in parts:
        digest.update(part.body)
    for attempt in range(1_000):
        try:
            return build_payload(data, parts, boundary=f"apexmesh-{digest.hexdigest()}-{attempt}")
        except ApexError:
            if any(part.content_id is None for part in parts):
                raise
    raise ApexError(ApexReplyCode.ACTION_ABORTED, "no MIME boundary fits these parts")


def access_set(
    owner: Endpoint, actor: Endpoint, actions: Sequence[str], last_update: str, trans_id: int
) -> bytes:
    """RFC 3341 ``set`` of the entry (owner, exactly actor); no actions deletes it; an
    existing entry is changed only with the ``lastUpdate`` a ``get`` returned."""
    head = _dtd.attr("owner", str(owner)) + _dtd.attr("actor", str(ActorPattern.exactly(actor)))
    if actions:
        head += _dtd.attr("actions", " ".join(actions))
    if last_update:
        head += _dtd.attr("lastUpdate", last_update)
    return f"<set{_dtd.attr('transID', str(trans_id))}><access{head} /></set>".encode()


def access_get(owner: Endpoint, actor: Endpoint, trans_id: int) -> bytes:
    """RFC 3341 ``get`` of the entry (owner, exactly actor): its ``lastUpdate``."""
    head = _dtd.attr("transID", str(trans_id)) + _dtd.attr("owner", str(owner))
    head += _dtd.attr("actor", str(ActorPattern.exactly(actor)))
    return f"<get{head} />".encode()


def reply_code(answer: bytes) -> int:
    """The code of the access service's ``reply`` (0 when it is something else)."""
    try:
        root = _dtd.parse_root(answer)
        return reply_from(root, require_trans_id=False).code if _dtd.tag_of(root) == "reply" else 0
    except ApexError:
        return 0


def last_update(answer: bytes) -> str:
    """The lastUpdate of the entry a ``get`` returned (a ``set``), "" for none (551)."""
    try:
        root = _dtd.parse_root(answer)
    except ApexError:
        return ""
    if _dtd.tag_of(root) != "set":
        return ""
    for child in root:
        if _dtd.tag_of(child) == "access":
            return str(child.get("lastUpdate", ""))
    return ""


def delivered_content(
    payload: bytes, memo: ParseMemo | None = None
) -> tuple[Data, bytes, tuple[MimePart, ...]]:
    """The data of a delivered payload, its content octets and its MIME parts (``memo``:
    the reader's, so publications that differ only in their content parse once)."""
    parsed = parse_payload(payload)
    element = parse_message(parsed.control, memo)
    if not isinstance(element, Data):
        raise ApexError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "payload is not data")
    resolved = resolve_content(element, parsed.parts)
    body = resolved.content if isinstance(resolved, DataContent) else resolved.body
    return element, body, tuple(parsed.parts.values())


__all__ = [
    "access_get",
    "access_set",
    "delivered_content",
    "element_payload",
    "forward_payload",
    "last_update",
    "reply_code",
]
