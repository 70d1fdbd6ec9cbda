"""What an endpoint receives from ``apex=access`` (RFC 3341 sections 4.2-4.4), sans I/O.

:mod:`apexmesh.apex.access` is the service's side: it parses operations and writes the
answers. An endpoint needs the other direction: read the ``allow``, ``deny``, ``set``
(a ``get`` answer or a change notification), ``reply`` and apex-mesh's ``entries`` (the
answer to ``list``) it is sent, and write the operations. Both sides share the element
classes, so what one writes the other reads into the same value.
"""

from __future__ import annotations

from collections.abc import Iterable

from apexmesh.apex.access import (
    MAX_OPERATION_OCTETS,
    AccessEntry,
    AccessError,
    ActionSet,
    ActorPattern,
    Allow,
    Deny,
    Entries,
    Reply,
    SetNotice,
    format_timestamp,
    parse_timestamp,
    split_token,
)
from apexmesh.apex.codes import ApexReplyCode, for_code
from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.beep.xml import Element, XmlError, escape_attr, parse_xml

#: An answer of the access service.
Answer = Allow | Deny | SetNotice | Entries | Reply


def query_xml(trans_id: int, owner: str, actor: str, actions: Iterable[str]) -> bytes:
    """``query`` (4.2): may ``actor`` do every one of ``actions`` to ``owner``?"""
    return (
        f"<query transID='{trans_id}' owner='{escape_attr(owner)}' "
        f"actor='{escape_attr(actor)}' actions='{escape_attr(' '.join(actions))}' />"
    ).encode()


def get_xml(trans_id: int, owner: str, actor: str) -> bytes:
    """``get`` (4.3): the entry of ``owner`` whose actor is identical to ``actor``."""
    return (
        f"<get transID='{trans_id}' owner='{escape_attr(owner)}' actor='{escape_attr(actor)}' />"
    ).encode()


def list_xml(trans_id: int, owner: str) -> bytes:
    """``list`` (apex-mesh's extension): every explicit entry of ``owner``."""
    return f"<list transID='{trans_id}' owner='{escape_attr(owner)}' />".encode()


def set_xml(
    trans_id: int,
    owner: str,
    actor: str,
    actions: Iterable[str] | None,
    last_update: str | None = None,
) -> bytes:
    """``set`` (4.4): create (no ``last_update``), replace, or with ``actions`` None
    delete the entry; ``last_update`` is the entry's as ``get`` read it (compare and
    set: 555 when it changed meanwhile)."""
    head = f"owner='{escape_attr(owner)}' actor='{escape_attr(actor)}'"
    if actions is not None:
        head += f" actions='{escape_attr(' '.join(sorted(actions)))}'"
    if last_update is not None:
        head += f" lastUpdate='{escape_attr(last_update)}'"
    return f"<set transID='{trans_id}'><access {head} /></set>".encode()


def parse_answer(content: bytes | str) -> Answer:
    """Read one answer of the access service; :class:`AccessError` (500/501) when the
    content is none of them."""
    try:
        root = parse_xml(content, max_octets=64 * MAX_OPERATION_OCTETS)
    except XmlError as exc:
        raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, str(exc)) from None
    tag = root.tag
    trans_id = _number(root.get("transID"), "transID")
    if tag == "allow":
        return Allow(trans_id)
    if tag == "deny":
        return Deny(trans_id)
    if tag == "reply":
        code = for_code(_number(root.get("code"), "code"))
        if code is None:
            raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "unknown reply code")
        return Reply(code, trans_id, (root.text or "").strip())
    if tag == "set":
        children = list(root)
        if len(children) != 1:
            raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "set holds one access")
        return SetNotice(trans_id, _entry(children[0]))
    if tag == "entries":
        return Entries(trans_id, tuple(_entry(child) for child in root))
    raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, f"not an access answer: {tag!r}")


def last_update_text(entry: AccessEntry) -> str | None:
    """The entry's ``lastUpdate`` as a ``set`` must repeat it."""
    return None if entry.last_update is None else format_timestamp(entry.last_update)


def _entry(element: Element) -> AccessEntry:
    if element.tag != "access":
        raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, f"unexpected {element.tag!r}")
    try:
        owner = Endpoint.parse(element.get("owner") or "")
    except EndpointError as exc:
        raise AccessError(exc.code, f"owner: {exc}") from None
    actions = element.get("actions")
    stamp = element.get("lastUpdate")
    return AccessEntry(
        owner,
        ActorPattern.parse(element.get("actor") or ""),
        # Only the syntax is checked: the service that wrote the tokens registered them.
        None if actions is None else ActionSet(frozenset(_tokens(actions))),
        None if stamp is None else parse_timestamp(stamp),
    )


def _tokens(text: str) -> list[str]:
    for token in text.split():
        split_token(token)
    return text.split()


def _number(text: str | None, name: str) -> int:
    if text is None or not text.isascii() or not text.isdigit():
        raise AccessError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, f"{name} missing or invalid")
    return int(text)


__all__ = [
    "Answer",
    "get_xml",
    "last_update_text",
    "list_xml",
    "parse_answer",
    "query_xml",
    "set_xml",
]
