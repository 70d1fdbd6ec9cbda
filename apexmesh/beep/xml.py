"""The one hardened XML parser of apex-mesh (application/beep+xml, RFC 3080 section 6.4).

Every XML text that arrives from a peer, on BEEP channel zero, in a tuning profile or in an
APEX element, is parsed here and nowhere else. RFC 3080 section 6.4 restricts
application/beep+xml to a subset of XML 1.0: no DOCTYPE, no XML declaration, and no
entity references beyond the five predefined ones and numeric references. Rejecting the
DOCTYPE outright closes the door on entity-expansion ("billion laughs") and external
entity attacks before libxml2 sees them; the parser settings below close it a second time
(the settings follow python-zeep's hardened defaults).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from lxml import etree

#: Largest XML document accepted from a peer. APEX data and channel-zero elements are
#: small; larger payloads travel as MIME body parts, not as XML. The relay's own limit
#: on a message is separate (see ``limits.py``); this one protects the parser.
MAX_XML_OCTETS: Final = 1 << 20

#: Deepest element nesting accepted. The deepest element in the BEEP, APEX, access,
#: presence and pubsub DTDs sits at depth 5; 32 leaves room for application payloads
#: and stops stack-exhaustion documents early.
MAX_XML_DEPTH: Final = 32


class XmlError(ValueError):
    """The text is not acceptable application/beep+xml.

    ``invalid`` distinguishes "well-formed but breaks a rule of the media type or a
    limit" (reply code 501, syntax error in parameters) from "not well-formed" (500).
    """

    def __init__(self, message: str, *, invalid: bool = False) -> None:
        super().__init__(message)
        self.invalid = invalid

    @property
    def code(self) -> int:
        """The RFC 3080 section 8 reply code a peer should receive for this input."""
        return 501 if self.invalid else 500


def _make_parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        recover=False,
        remove_comments=True,
        remove_pis=True,
        collect_ids=False,
    )


_PARSER: Final = _make_parser()

#: libxml2's XML_ERR_RESOURCE_LIMIT: the document nests deeper than 256 elements (or a
#: single node is huge), which ``huge_tree=False`` refuses.
_RESOURCE_LIMIT: Final = int(etree.ErrorTypes.ERR_RESOURCE_LIMIT)

#: The element type returned by :func:`parse_xml`; other modules name it through here so
#: that lxml is imported in this module only.
Element = etree._Element

#: ``element.iterchildren(ELEMENT_NODES)`` yields element children only (no comments,
#: processing instructions or entity references), filtered inside lxml.
ELEMENT_NODES: Final = etree.Element


def parse_xml(text: bytes | str, *, max_octets: int = MAX_XML_OCTETS) -> etree._Element:
    """Parse one application/beep+xml document and return its root element.

    Raises :class:`XmlError` (code 500) when the text is not well-formed, and
    (code 501) when it carries a DOCTYPE, an XML declaration, an unexpanded entity,
    exceeds ``max_octets`` or nests deeper than :data:`MAX_XML_DEPTH`.
    """
    data = text.encode("utf-8") if isinstance(text, str) else text
    if len(data) > max_octets:
        raise XmlError(f"XML document of {len(data)} octets exceeds {max_octets}", invalid=True)
    head = data.lstrip()[:64]
    if head.startswith(b"<?xml"):
        raise XmlError("XML declaration not allowed in application/beep+xml", invalid=True)
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise XmlError("DOCTYPE and ENTITY declarations are not allowed", invalid=True)
    try:
        root = etree.fromstring(data, _PARSER)
    except etree.XMLSyntaxError as exc:
        if _hit_limit(exc):
            # libxml2 stops at 256 levels (or a huge text node) before MAX_XML_DEPTH's
            # own walk could: a limit of the media type here, so 501 like the walk's.
            raise XmlError(f"XML exceeds a parser limit: {exc}", invalid=True) from None
        raise XmlError(f"poorly-formed XML: {exc}") from None
    if root is None:
        raise XmlError("empty XML document")
    if data.count(b"<") <= MAX_XML_DEPTH:
        # Too few tags to nest too deep (each element needs one): only entities to look
        # for, which lxml finds without a Python-level walk.
        if next(root.iter(etree.Entity), None) is not None:
            raise XmlError("entity references are not allowed", invalid=True)
    else:
        _check_tree(root)
    return root


def _hit_limit(exc: etree.XMLSyntaxError) -> bool:
    """True when libxml2 refused the document for a resource limit, not its syntax."""
    return getattr(exc, "code", None) == _RESOURCE_LIMIT  # lxml-stubs lack ``code``


def _check_tree(root: etree._Element) -> None:
    depth_limit = MAX_XML_DEPTH
    stack: list[tuple[etree._Element, int]] = [(root, 1)]
    while stack:
        element, depth = stack.pop()
        if depth > depth_limit:
            raise XmlError(f"XML nests deeper than {depth_limit} elements", invalid=True)
        for child in element:
            if not isinstance(child.tag, str):
                # An entity reference that was not resolved (resolve_entities=False).
                if isinstance(child, etree._Entity):
                    raise XmlError("entity references are not allowed", invalid=True)
                continue
            stack.append((child, depth + 1))


class _LocalOnly(etree.Resolver):
    """Resolves schema imports and includes to the documents an operator configured
    (vetted by :func:`parse_xml`'s rules) and to nothing else: no file, no network."""

    def __init__(self, documents: Mapping[str, bytes]) -> None:
        super().__init__()
        self.documents = documents

    def resolve(  # type: ignore[override]  # lxml-stubs omit the context argument
        self, url: str, _pubid: str | None, context: object
    ) -> object:
        text = self.documents.get(url)
        if text is None:
            return self.resolve_string(b"<refused />", context, base_url=None)
        return self.resolve_string(text, context, base_url=None)


class XmlSchema:
    """A compiled W3C XML Schema; :meth:`first_error` validates an element's subtree."""

    __slots__ = ("_schema",)

    def __init__(self, schema: etree.XMLSchema) -> None:
        self._schema = schema

    def first_error(self, element: etree._Element) -> str | None:
        """None when ``element`` is valid, else the validator's first message."""
        if self._schema.validate(element):
            return None
        log: Any = self._schema.error_log  # iterable of entries; lxml-stubs leave it opaque
        first = next(iter(log), None)
        return "not valid" if first is None else str(first.message)


def compile_schema(document: bytes, *, documents: Mapping[str, bytes] | None = None) -> XmlSchema:
    """Compile an XML Schema given as application/beep+xml text.

    The text and every document in ``documents`` (what ``xs:import`` / ``xs:include``
    ``schemaLocation`` values may name) pass :func:`parse_xml`'s rules first (no DOCTYPE,
    no entities, bounded size and depth); any other location resolves to a document that
    is no schema, so nothing is ever read from a file or the network. Raises
    :class:`XmlError` (501) when the text is not a schema libxml2 can compile.
    """
    local = dict(documents or {})
    for text in (document, *local.values()):
        parse_xml(text)
    parser = _make_parser()
    parser.resolvers.add(_LocalOnly(local))
    try:
        root = etree.fromstring(document, parser)
        schema = etree.XMLSchema(root)
    except (etree.XMLSchemaParseError, etree.XMLSyntaxError) as exc:
        raise XmlError(f"not a usable XML Schema: {exc}", invalid=True) from None
    return XmlSchema(schema)


def to_bytes(element: etree._Element) -> bytes:
    """Serialize an element as application/beep+xml (UTF-8, no XML declaration)."""
    return etree.tostring(element, encoding="utf-8", xml_declaration=False)


def element_key(element: etree._Element) -> bytes:
    """The element alone (without its tail), serialized: two elements with the same key
    have the same name, attributes and content."""
    return etree.tostring(element, with_tail=False)


def escape_text(text: str) -> str:
    """Escape character data for inclusion in hand-built XML."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_attr(value: str) -> str:
    """Escape an attribute value for inclusion between single quotes."""
    return escape_text(value).replace("'", "&apos;").replace('"', "&quot;")


__all__ = [
    "MAX_XML_DEPTH",
    "MAX_XML_OCTETS",
    "ELEMENT_NODES",
    "Element",
    "XmlError",
    "XmlSchema",
    "compile_schema",
    "element_key",
    "escape_attr",
    "escape_text",
    "parse_xml",
    "to_bytes",
]
