"""Validation helpers shared by the APEX element models (RFC 3340 section 9).

The DTDs of RFC 3340 section 9 are enforced by hand, element by element, on trees built
by the one hardened parser (:func:`apexmesh.beep.xml.parse_xml`): unknown elements,
unknown attributes, missing ``#REQUIRED`` attributes, text where the DTD allows only
elements and out-of-range identifiers are all "non-valid XML", reply code 501 (RFC 3340
section 10); text that is not well-formed is 500; a malformed endpoint is 553.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final, NoReturn

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint, EndpointError, normalize_domain
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import (
    ELEMENT_NODES,
    Element,
    XmlError,
    escape_attr,
    escape_text,
    parse_xml,
    to_bytes,
)

#: ``xml:lang`` as the parser names it (the ``xml`` prefix is bound to this namespace).
XML_LANG: Final = "{http://www.w3.org/XML/1998/namespace}lang"

#: Largest UNIQID / UNIZID value (RFC 3340 section 9.1, "1..2147483647").
MAX_TRANS_ID: Final = 2_147_483_647

SYNTAX: Final = ApexReplyCode.PARAMETER_SYNTAX_ERROR

#: XML ``Name`` (for the ``ID`` attribute ``Name`` of ``data-content``), ASCII subset plus
#: any non-ASCII letter; colons are excluded as in NCName.
#: A plausible URI-reference: one or more characters, none whitespace or control
#: (checked by one regular expression: this runs for every data element).
_URI_REFERENCE: Final = re.compile(r"[^\x00-\x20\x7f]+")
_NAME: Final = re.compile(r"[A-Za-z_\u00c0-\U0010ffff][A-Za-z0-9._\-\u00b7\u00c0-\U0010ffff]*")
#: XML ``Nmtoken`` (for ``internal`` option names).
_NMTOKEN: Final = re.compile(r"[A-Za-z0-9._:\-\u00b7\u00c0-\U0010ffff]+")
#: An RFC 3986 scheme followed by ``:``: what makes a URI absolute.
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_LANG_TAG: Final = re.compile(r"[A-Za-z]{1,8}(?:-[A-Za-z0-9]{1,8})*")


def fail(message: str, code: ApexReplyCode = SYNTAX, *, trans_id: int | None = None) -> NoReturn:
    """Raise the typed error; a helper so that validation reads as one line per rule."""
    raise ApexError(code, message, trans_id=trans_id)


def raw_bytes(body: bytes | str) -> bytes:
    """The octets of a document given as text (UTF-8); 500 for unencodable text (lone
    surrogates), which can never have come from a peer's octets."""
    if isinstance(body, bytes):
        return body
    try:
        return body.encode("utf-8")
    except UnicodeEncodeError:
        raise ApexError(ApexReplyCode.GENERAL_SYNTAX_ERROR, "text is not valid UTF-8") from None


def parse_root(body: bytes | str) -> Element:
    """Parse a document with the hardened parser, mapping its error to 500 or 501."""
    try:
        return parse_xml(raw_bytes(body))
    except XmlError as exc:
        code = (
            ApexReplyCode.GENERAL_SYNTAX_ERROR
            if exc.code == ApexReplyCode.GENERAL_SYNTAX_ERROR
            else SYNTAX
        )
        raise ApexError(code, str(exc)) from None


def tag_of(element: Element) -> str:
    """The element's name; namespaced names (``{ns}x``) are returned as the parser has them
    and therefore never match a DTD element name."""
    tag = element.tag
    return tag if isinstance(tag, str) else ""


def attributes(
    element: Element, *, allowed: Iterable[str], required: Iterable[str] = ()
) -> dict[str, str]:
    """The element's attributes; 501 for an attribute the DTD does not declare or a
    ``#REQUIRED`` one that is missing."""
    tag = tag_of(element)
    attrs = {str(name): str(value) for name, value in element.attrib.items()}
    extra = set(attrs) - set(allowed)
    if extra:
        fail(f"{tag}: unexpected attributes {sorted(extra)}")
    missing = set(required) - set(attrs)
    if missing:
        fail(f"{tag}: missing required attributes {sorted(missing)}")
    return attrs


def element_children(element: Element) -> list[Element]:
    """Children of an element whose DTD content model has elements only; 501 for
    non-whitespace character data between them."""
    if (element.text or "").strip():
        fail(f"{tag_of(element)}: character data is not allowed here")
    children = list(element.iterchildren(ELEMENT_NODES))
    for child in children:
        tail = child.tail
        if tail is not None and tail.strip():
            fail(f"{tag_of(element)}: character data is not allowed here")
    return children


def text_content(element: Element) -> str:
    """The character data of a ``#PCDATA`` element, kept exactly (a diagnostic may be
    multiline, RFC 3340 section 4.4.3); 501 if the element has child elements."""
    if any(isinstance(child.tag, str) for child in element):
        fail(f"{tag_of(element)}: only character data is allowed here")
    return element.text or ""


def inner_xml(element: Element) -> bytes:
    """The content of an ``ANY`` element as application/beep+xml text: its character data
    and its children, each serialized with its tail."""
    head = escape_text(element.text or "").encode("utf-8")
    return head + b"".join(to_bytes(child) for child in element)


def canonical_content(content: bytes, tag: str) -> bytes:
    """The parser's serialization of element content; 500/501 if it is not well-formed
    XML content."""
    try:
        wrapper = parse_xml(b"<w>" + content + b"</w>")
    except XmlError as exc:
        raise ApexError(
            SYNTAX if exc.invalid else ApexReplyCode.GENERAL_SYNTAX_ERROR,
            f"{tag}: content is not XML content: {exc}",
        ) from None
    return inner_xml(wrapper)


def trans_id(value: str | None, tag: str, *, zero: bool = False) -> int:
    """A UNIQID (1..2**31-1) or, with ``zero``, a UNIZID (0..2**31-1); 501 otherwise."""
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 10:
        fail(f"{tag}: transID is not a number")
    number = int(value)
    if not (0 if zero else 1) <= number <= MAX_TRANS_ID:
        fail(f"{tag}: transID {number} out of range")
    return number


def reply_code(value: str | None, tag: str) -> int:
    """A three-digit reply code (the XYZ type of RFC 3080 section 8); 501 otherwise."""
    if value is None or len(value) != 3 or not value.isascii() or not value.isdigit():
        fail(f"{tag}: code is not a three-digit reply code")
    if value[0] not in "2345":
        fail(f"{tag}: code {value} is not a reply code")
    return int(value)


def endpoint(value: str, tag: str, *, trans_id: int | None = None) -> Endpoint:
    """An ENDPOINT attribute (RFC 3340 section 2.2); 553 when malformed."""
    try:
        return Endpoint.parse(value)
    except EndpointError as exc:
        raise ApexError(exc.code, f"{tag}: {exc}", trans_id=trans_id) from None


def domain(value: str, tag: str, *, trans_id: int | None = None) -> str:
    """A DOMAIN attribute (FQDN or domain-literal); 553 when malformed."""
    try:
        return normalize_domain(value)
    except EndpointError as exc:
        raise ApexError(exc.code, f"{tag}: {exc}", trans_id=trans_id) from None


def is_name(value: str) -> bool:
    """True for an XML Name without colons (the ``ID`` type)."""
    return _NAME.fullmatch(value) is not None


def is_nmtoken(value: str) -> bool:
    """True for an XML ``Nmtoken``."""
    return _NMTOKEN.fullmatch(value) is not None


def is_absolute_uri(value: str) -> bool:
    """True for a URI with a scheme and no whitespace or control characters."""
    return _SCHEME.match(value) is not None and is_uri_reference(value)


def is_uri_reference(value: str) -> bool:
    """True for a plausible URI-reference: non-empty, no whitespace, no controls."""
    return _URI_REFERENCE.fullmatch(value) is not None


def is_language_tag(value: str) -> bool:
    """True for a language tag in the shape of RFC 3066 (``en``, ``i-default``)."""
    return _LANG_TAG.fullmatch(value) is not None


def attr(name: str, value: str) -> str:
    """`` name='value'`` with the value escaped, as RFC 3340's examples quote them."""
    return f" {name}='{escape_attr(value)}'"


def lang_attr(lang: str | None) -> str:
    """The ``xml:lang`` attribute, or nothing when no language is given."""
    return "" if lang is None else attr("xml:lang", lang)


def check_code(code: int, tag: str) -> None:
    """Refuse a reply code outside 200..599 in an element built in code (501)."""
    if not 200 <= code <= 599:
        fail(f"{tag}: {code} is not a three-digit reply code")


def with_text(head: str, tag: str, text: str) -> bytes:
    """Close a start tag ``head`` as an empty element, or around escaped ``text``."""
    if not text:
        return f"{head} />".encode()
    return f"{head}>{escape_text(text)}</{tag}>".encode()


def check_uniqid(trans_id: int, tag: str) -> None:
    """Refuse a UNIQID outside 1..2**31-1 in an element built in code (501)."""
    if not 1 <= trans_id <= MAX_TRANS_ID:
        fail(f"{tag}: transID {trans_id} out of range")


def container(tag: str, head: str, body: bytes) -> bytes:
    """Serialize an element-only element: empty-element tag when it has no children."""
    if not body:
        return f"<{tag}{head} />".encode()
    return f"<{tag}{head}>".encode() + body + f"</{tag}>".encode()


def only_options(element: Element) -> list[Element]:
    """The children of an ``(option*)`` element; 501 for anything else."""
    children = element_children(element)
    for child in children:
        if tag_of(child) != "option":
            fail(f"{tag_of(element)}: unexpected element {tag_of(child)!r}")
    return children
