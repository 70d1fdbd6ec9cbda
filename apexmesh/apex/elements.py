"""The APEX core element model (RFC 3340 sections 4.4, 6.1.2 and 9.1), sans I/O.

Every element of the APEX core DTD is a frozen, slotted, keyword-only dataclass with a
``to_xml()`` that produces application/beep+xml bytes quoted the way the RFC's examples
are, and a ``parse_<element>(body)`` that accepts exactly what the DTD allows:

* ``attach``, ``bind``, ``terminate`` and ``data`` are the MSGs of the profile; ``ok`` and
  ``error`` (borrowed from the BEEP DTD, RFC 3080 section 2.3.1) are their RPY and ERR;
* ``originator``, ``recipient``, ``option`` and ``data-content`` live inside ``data``;
* ``reply`` is the common answer format of APEX services (section 6.1.2).

:func:`parse_apex` dispatches on the root element and also accepts the report service
elements of section 9.2 (:mod:`apexmesh.apex.report`). Parsing goes through the one
hardened parser (:func:`apexmesh.beep.xml.parse_xml`) and fails only with
:class:`~apexmesh.apex.errors.ApexError`: 500 for XML that is not well-formed, 501 for
XML that breaks the DTD or the media type, 553 for a malformed endpoint or domain, 554
when a local limit (:data:`MAX_RECIPIENTS_PER_DATA`,
:data:`~apexmesh.apex.options.MAX_OPTIONS_PER_ELEMENT`) is exceeded.

Endpoints are :class:`~apexmesh.apex.endpoint.Endpoint` values (domain folded to lower
case), so ``parse(to_xml(x)) == x`` holds for every element built from valid parts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import (
    Option,
    check_option_count,
    option_from,
    options_from,
    options_xml,
)
from apexmesh.beep.xml import Element, escape_text

if TYPE_CHECKING:
    from apexmesh.apex.report import Destination, StatusResponse

#: Most ``recipient`` elements accepted in one ``data``. RFC 3340 sets no limit; RFC 2821
#: section 4.5.3.1 asks SMTP servers for at least 100 recipients per message, and ten times
#: that keeps legitimate fan-out in one element while bounding the per-recipient work
#: (access checks, routing, reports) a single hostile element can trigger.
MAX_RECIPIENTS_PER_DATA: Final = 1000

#: Default ``code`` of ``terminate`` (RFC 3340 section 9.1).
DEFAULT_TERMINATE_CODE: Final = 250


def _check_code(code: int, tag: str) -> None:
    if not 200 <= code <= 599:
        _dtd.fail(f"{tag}: {code} is not a three-digit reply code")


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True, kw_only=True)
class Ok:
    """``ok`` (RFC 3080 section 2.3.1.4): the positive RPY to every APEX operation."""

    def to_xml(self) -> bytes:
        return b"<ok />"


@dataclass(frozen=True, slots=True, kw_only=True)
class Error:
    """``error`` (RFC 3080 section 2.3.1.5): the ERR to an APEX operation (section 4.4)."""

    #: Three-digit reply code (RFC 3340 section 10).
    code: int
    #: Diagnostic text, kept exactly.
    text: str = ""
    #: Language of the diagnostic (``xml:lang``), if given.
    lang: str | None = None

    def __post_init__(self) -> None:
        _check_code(self.code, "error")

    @classmethod
    def from_exception(cls, exc: ApexError) -> Error:
        """The ERR element for a rejected operation."""
        return cls(code=int(exc.code), text=str(exc))

    def to_xml(self) -> bytes:
        head = f"<error{_dtd.attr('code', str(self.code))}{_dtd.lang_attr(self.lang)}"
        return _with_text(head, "error", self.text)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """``reply`` (RFC 3340 sections 6.1.2 and 9.1): a service's answer.

    ``trans_id`` is ``#REQUIRED`` in the DTD, yet every ``reply`` inside a
    ``destination`` in the examples of section 5.1 omits it; it is therefore optional
    there (see :func:`apexmesh.apex.report.destination_from`) and None means absent.
    """

    #: Three-digit reply code (RFC 3340 section 10).
    code: int
    #: The transaction identifier answered, None when absent (report destinations only).
    trans_id: int | None
    #: Diagnostic text, kept exactly (it may be multiline).
    text: str = ""
    #: Language of the diagnostic (``xml:lang``), if given.
    lang: str | None = None

    def __post_init__(self) -> None:
        _check_code(self.code, "reply")
        if self.trans_id is not None and not 1 <= self.trans_id <= _dtd.MAX_TRANS_ID:
            _dtd.fail(f"reply: transID {self.trans_id} out of range")

    def to_xml(self) -> bytes:
        head = f"<reply{_dtd.attr('code', str(self.code))}"
        if self.trans_id is not None:
            head += _dtd.attr("transID", str(self.trans_id))
        return _with_text(head + _dtd.lang_attr(self.lang), "reply", self.text)


def _with_text(head: str, tag: str, text: str) -> bytes:
    if not text:
        return f"{head} />".encode()
    return f"{head}>{escape_text(text)}</{tag}>".encode()


def error_from(element: Element) -> Error:
    attrs = _dtd.attributes(element, allowed=("code", _dtd.XML_LANG), required=("code",))
    return Error(
        code=_dtd.reply_code(attrs["code"], "error"),
        text=_dtd.text_content(element),
        lang=attrs.get(_dtd.XML_LANG),
    )


def reply_from(element: Element, *, require_trans_id: bool = True) -> Reply:
    """Build a :class:`Reply`; ``require_trans_id`` follows the DTD (see :class:`Reply`)."""
    required = ("code", "transID") if require_trans_id else ("code",)
    attrs = _dtd.attributes(element, allowed=("code", "transID", _dtd.XML_LANG), required=required)
    trans_id = None if "transID" not in attrs else _dtd.trans_id(attrs["transID"], "reply")
    return Reply(
        code=_dtd.reply_code(attrs["code"], "reply"),
        trans_id=trans_id,
        text=_dtd.text_content(element),
        lang=attrs.get(_dtd.XML_LANG),
    )


def ok_from(element: Element) -> Ok:
    _dtd.attributes(element, allowed=())
    if (element.text or "").strip() or len(element):
        _dtd.fail("ok: the element is EMPTY")
    return Ok()


# --------------------------------------------------------------------------- operations


@dataclass(frozen=True, slots=True, kw_only=True)
class Attach:
    """``attach`` (RFC 3340 section 4.4.1): bind this application as an endpoint."""

    #: The endpoint the application wants to attach as.
    endpoint: Endpoint
    #: The transaction identifier of the attachment (UNIQID).
    trans_id: int
    #: Options for the receiving relay; their targetHop and transID are ignored.
    options: tuple[Option, ...] = ()

    def __post_init__(self) -> None:
        _check_uniqid(self.trans_id, "attach")
        check_option_count(self.options, "attach")

    def to_xml(self) -> bytes:
        head = _dtd.attr("endpoint", str(self.endpoint)) + _dtd.attr("transID", str(self.trans_id))
        return _container("attach", head, options_xml(self.options))


@dataclass(frozen=True, slots=True, kw_only=True)
class Bind:
    """``bind`` (RFC 3340 section 4.4.2): serve an administrative domain as a relay."""

    #: The administrative domain (FQDN or domain-literal, lower-cased).
    relay: str
    #: The transaction identifier of the binding (UNIQID).
    trans_id: int
    #: Options for the receiving relay.
    options: tuple[Option, ...] = ()

    def __post_init__(self) -> None:
        _check_uniqid(self.trans_id, "bind")
        check_option_count(self.options, "bind")

    def to_xml(self) -> bytes:
        head = _dtd.attr("relay", self.relay) + _dtd.attr("transID", str(self.trans_id))
        return _container("bind", head, options_xml(self.options))


@dataclass(frozen=True, slots=True, kw_only=True)
class Terminate:
    """``terminate`` (RFC 3340 section 4.4.3): release one association, or all (0)."""

    #: The attach or bind to release; 0 releases every association (UNIZID, default 0).
    trans_id: int = 0
    #: Reply code meaningful to programs (default 250).
    code: int = DEFAULT_TERMINATE_CODE
    #: Diagnostic text, kept exactly.
    text: str = ""
    #: Language of the diagnostic (``xml:lang``), if given.
    lang: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.trans_id <= _dtd.MAX_TRANS_ID:
            _dtd.fail(f"terminate: transID {self.trans_id} out of range")
        _check_code(self.code, "terminate")

    def to_xml(self) -> bytes:
        head = "<terminate"
        if self.code != DEFAULT_TERMINATE_CODE:
            head += _dtd.attr("code", str(self.code))
        head += _dtd.lang_attr(self.lang) + _dtd.attr("transID", str(self.trans_id))
        return _with_text(head, "terminate", self.text)


def _check_uniqid(trans_id: int, tag: str) -> None:
    if not 1 <= trans_id <= _dtd.MAX_TRANS_ID:
        _dtd.fail(f"{tag}: transID {trans_id} out of range")


def _container(tag: str, head: str, body: bytes) -> bytes:
    if not body:
        return f"<{tag}{head} />".encode()
    return f"<{tag}{head}>".encode() + body + f"</{tag}>".encode()


def attach_from(element: Element) -> Attach:
    attrs = _dtd.attributes(
        element, allowed=("endpoint", "transID"), required=("endpoint", "transID")
    )
    trans_id = _dtd.trans_id(attrs["transID"], "attach")
    try:
        endpoint = _dtd.endpoint(attrs["endpoint"], "attach")
        options = options_from(_only_options(element), "attach")
    except ApexError as exc:
        raise _named(exc, trans_id) from None
    return Attach(endpoint=endpoint, trans_id=trans_id, options=options)


def bind_from(element: Element) -> Bind:
    attrs = _dtd.attributes(element, allowed=("relay", "transID"), required=("relay", "transID"))
    trans_id = _dtd.trans_id(attrs["transID"], "bind")
    try:
        relay = _dtd.domain(attrs["relay"], "bind")
        options = options_from(_only_options(element), "bind")
    except ApexError as exc:
        raise _named(exc, trans_id) from None
    return Bind(relay=relay, trans_id=trans_id, options=options)


def terminate_from(element: Element) -> Terminate:
    attrs = _dtd.attributes(element, allowed=("code", "transID", _dtd.XML_LANG))
    trans_id = _dtd.trans_id(attrs.get("transID", "0"), "terminate", zero=True)
    try:
        code = _dtd.reply_code(attrs.get("code", str(DEFAULT_TERMINATE_CODE)), "terminate")
        text = _dtd.text_content(element)
    except ApexError as exc:
        raise _named(exc, trans_id) from None
    return Terminate(trans_id=trans_id, code=code, text=text, lang=attrs.get(_dtd.XML_LANG))


def _named(exc: ApexError, trans_id: int) -> ApexError:
    """Stamp the operation's transID on an error raised while reading its parts, so the
    answer can name the transaction (RFC 3340 section 6.1.2)."""
    if exc.trans_id is None:
        exc.trans_id = trans_id
    return exc


def _only_options(element: Element) -> list[Element]:
    children = _dtd.element_children(element)
    for child in children:
        if _dtd.tag_of(child) != "option":
            _dtd.fail(f"{_dtd.tag_of(element)}: unexpected element {_dtd.tag_of(child)!r}")
    return children


# --------------------------------------------------------------------------- data


@dataclass(frozen=True, slots=True, kw_only=True)
class Originator:
    """``originator`` (RFC 3340 section 4.4.4): the sending endpoint."""

    #: The sending endpoint.
    identity: Endpoint
    #: Per-originator options.
    options: tuple[Option, ...] = ()

    def __post_init__(self) -> None:
        check_option_count(self.options, "originator")

    def to_xml(self) -> bytes:
        head = _dtd.attr("identity", str(self.identity))
        return _container("originator", head, options_xml(self.options))


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipient:
    """``recipient`` (RFC 3340 section 4.4.4): one destination endpoint."""

    #: The destination endpoint.
    identity: Endpoint
    #: Per-recipient options.
    options: tuple[Option, ...] = ()

    def __post_init__(self) -> None:
        check_option_count(self.options, "recipient")

    def to_xml(self) -> bytes:
        head = _dtd.attr("identity", str(self.identity))
        return _container("recipient", head, options_xml(self.options))


@dataclass(frozen=True, slots=True, kw_only=True)
class DataContent:
    """``data-content`` (RFC 3340 sections 4.1 and 9.1): XML content carried inline and
    referenced from ``data``'s ``content`` attribute as ``#Name``.

    ``content`` is the element's content as application/beep+xml text. When parsed from
    a peer it is the peer's own octets whenever they can be cut out of the document
    unambiguously (relays must not modify content, section 4.4.4.1), and the parser's
    serialization otherwise (for instance when the content uses a namespace prefix
    declared on an ancestor).
    """

    #: The ``Name`` attribute (an XML ``ID``), referenced as ``#Name``.
    name: str
    #: The content (DTD ``ANY``): character data and elements, well-formed XML content.
    content: bytes = b""

    def __post_init__(self) -> None:
        if not _dtd.is_name(self.name):
            _dtd.fail(f"data-content: Name {self.name!r} is not an XML name")
        if self.content:
            _dtd.canonical_content(self.content, "data-content")  # well-formed, or 500/501

    def to_xml(self) -> bytes:
        head = _dtd.attr("Name", self.name)
        return f"<data-content{head}>".encode() + self.content + b"</data-content>"


@dataclass(frozen=True, slots=True, kw_only=True)
class Data:
    """``data`` (RFC 3340 section 4.4.4): content from an originator to recipients."""

    #: URI-reference to the content: ``cid:`` (a MIME part) or ``#Name`` (data-content).
    content: str
    #: The sending endpoint and its per-originator options.
    originator: Originator
    #: One or more recipients, at most :data:`MAX_RECIPIENTS_PER_DATA`.
    recipients: tuple[Recipient, ...]
    #: Per-data options.
    options: tuple[Option, ...] = ()
    #: Inline XML content, if any.
    data_content: DataContent | None = None

    def __post_init__(self) -> None:
        if not _dtd.is_uri_reference(self.content):
            _dtd.fail(f"data: content {self.content!r} is not a URI-reference")
        if not self.recipients:
            _dtd.fail("data: at least one recipient is required")
        _check_recipient_count(len(self.recipients))
        check_option_count(self.options, "data")

    def to_xml(self) -> bytes:
        parts = [
            f"<data{_dtd.attr('content', self.content)}>".encode(),
            self.originator.to_xml(),
            *(recipient.to_xml() for recipient in self.recipients),
            options_xml(self.options),
        ]
        if self.data_content is not None:
            parts.append(self.data_content.to_xml())
        parts.append(b"</data>")
        return b"".join(parts)


def _check_recipient_count(count: int) -> None:
    if count > MAX_RECIPIENTS_PER_DATA:
        _dtd.fail(
            f"data: more than {MAX_RECIPIENTS_PER_DATA} recipients",
            ApexReplyCode.TRANSACTION_FAILED,
        )


def originator_from(element: Element) -> Originator:
    attrs = _dtd.attributes(element, allowed=("identity",), required=("identity",))
    return Originator(
        identity=_dtd.endpoint(attrs["identity"], "originator"),
        options=options_from(_only_options(element), "originator"),
    )


def recipient_from(element: Element) -> Recipient:
    attrs = _dtd.attributes(element, allowed=("identity",), required=("identity",))
    return Recipient(
        identity=_dtd.endpoint(attrs["identity"], "recipient"),
        options=options_from(_only_options(element), "recipient"),
    )


def data_content_from(element: Element, raw: bytes | None = None) -> DataContent:
    """Build a :class:`DataContent`; ``raw`` is the document it came from, used to keep
    the content's own octets (see :func:`raw_inner`)."""
    attrs = _dtd.attributes(element, allowed=("Name",), required=("Name",))
    serialized = _dtd.inner_xml(element)
    content = serialized
    if raw is not None:
        exact = raw_inner(raw, "data-content")
        if exact is not None and _same_content(exact, serialized):
            content = exact
    return DataContent(name=attrs["Name"], content=content)


def data_from(element: Element, raw: bytes | None = None) -> Data:
    """Build a :class:`Data`, enforcing the DTD order
    ``(originator, recipient+, option*, data-content?)``."""
    attrs = _dtd.attributes(element, allowed=("content",), required=("content",))
    children = _dtd.element_children(element)
    tags = [_dtd.tag_of(child) for child in children]
    if not tags or tags[0] != "originator":
        _dtd.fail("data: the first element must be originator")
    index = 1
    while index < len(tags) and tags[index] == "recipient":
        index += 1
    recipient_elements = children[1:index]
    if not recipient_elements:
        _dtd.fail("data: at least one recipient is required")
    _check_recipient_count(len(recipient_elements))
    first_option = index
    while index < len(tags) and tags[index] == "option":
        index += 1
    option_elements = children[first_option:index]
    data_content: DataContent | None = None
    if index < len(tags) and tags[index] == "data-content":
        data_content = data_content_from(children[index], raw)
        index += 1
    if index < len(tags):
        _dtd.fail(f"data: unexpected element {tags[index]!r} (order or name)")
    return Data(
        content=attrs["content"],
        originator=originator_from(children[0]),
        recipients=tuple(recipient_from(child) for child in recipient_elements),
        options=options_from(option_elements, "data"),
        data_content=data_content,
    )


_END_TAG: Final = re.compile(rb"</([^\s>]+)\s*>")


def raw_inner(raw: bytes, tag: str) -> bytes | None:
    """Cut the content of the outermost ``tag`` element out of ``raw``, or None.

    The candidate is the text between the end of the first ``<tag`` start tag and the
    last ``</tag`` end tag. It is only a candidate (the first ``<tag`` could sit inside an
    option's content, a comment or a CDATA section), so callers compare it with the
    parser's view before trusting it (:func:`data_content_from`).
    """
    opening = re.search(rb"<" + re.escape(tag.encode()) + rb"[\s/>]", raw)
    if opening is None:
        return None
    position = opening.end() - 1
    quote = 0
    while position < len(raw):
        octet = raw[position]
        if quote:
            if octet == quote:
                quote = 0
        elif octet in b"'\"":
            quote = octet
        elif octet == ord(">"):
            break
        position += 1
    else:
        return None
    if raw[position - 1] == ord("/"):
        return b""
    closing = raw.rfind(b"</" + tag.encode())
    if closing <= position:
        return None
    return raw[position + 1 : closing]


def _same_content(candidate: bytes, serialized: bytes) -> bool:
    try:
        return _dtd.canonical_content(candidate, "data-content") == serialized
    except ApexError:
        return False


# --------------------------------------------------------------------------- dispatch

#: Any element of the APEX core and report service DTDs.
ApexElement: TypeAlias = (
    "Attach | Bind | Terminate | Data | Originator | Recipient | DataContent | Option"
    " | Ok | Error | Reply | StatusResponse | Destination"
)

#: The elements exchanged as BEEP payloads of the APEX profile (section 9.1 synopsis).
ApexMessage: TypeAlias = Attach | Bind | Terminate | Data | Ok | Error


def parse_apex(body: bytes | str) -> ApexElement:
    """Parse one application/beep+xml document holding any APEX element.

    Raises :class:`ApexError`: 500 (not well-formed), 501 (DTD or media type broken,
    unknown element), 553 (bad endpoint or domain), 554 (local limit exceeded).
    """
    raw = body.encode("utf-8") if isinstance(body, str) else body
    root = _dtd.parse_root(raw)
    tag = _dtd.tag_of(root)
    if tag == "data":
        return data_from(root, raw)
    if tag == "data-content":
        return data_content_from(root, raw)
    builder = _BUILDERS.get(tag)
    if builder is not None:
        return builder(root)
    if tag in ("statusResponse", "destination"):
        from apexmesh.apex import report

        if tag == "statusResponse":
            return report.status_response_from(root)
        return report.destination_from(root)
    raise ApexError(_dtd.SYNTAX, f"unknown APEX element {tag!r}")


def parse_message(body: bytes | str) -> ApexMessage:
    """Parse a BEEP payload of the APEX profile: attach, bind, terminate or data (MSG),
    ok (RPY) or error (ERR); anything else is 501."""
    element = parse_apex(body)
    if not isinstance(element, Attach | Bind | Terminate | Data | Ok | Error):
        _dtd.fail(f"{type(element).__name__} is not an APEX message")
    return element


def _expect(body: bytes | str, tag: str) -> tuple[Element, bytes]:
    raw = body.encode("utf-8") if isinstance(body, str) else body
    root = _dtd.parse_root(raw)
    if _dtd.tag_of(root) != tag:
        _dtd.fail(f"expected {tag}, got {_dtd.tag_of(root)!r}")
    return root, raw


def parse_attach(body: bytes | str) -> Attach:
    return attach_from(_expect(body, "attach")[0])


def parse_bind(body: bytes | str) -> Bind:
    return bind_from(_expect(body, "bind")[0])


def parse_terminate(body: bytes | str) -> Terminate:
    return terminate_from(_expect(body, "terminate")[0])


def parse_data(body: bytes | str) -> Data:
    return data_from(*_expect(body, "data"))


def parse_originator(body: bytes | str) -> Originator:
    return originator_from(_expect(body, "originator")[0])


def parse_recipient(body: bytes | str) -> Recipient:
    return recipient_from(_expect(body, "recipient")[0])


def parse_data_content(body: bytes | str) -> DataContent:
    return data_content_from(*_expect(body, "data-content"))


def parse_ok(body: bytes | str) -> Ok:
    return ok_from(_expect(body, "ok")[0])


def parse_error(body: bytes | str) -> Error:
    return error_from(_expect(body, "error")[0])


def parse_reply(body: bytes | str) -> Reply:
    """Parse a top-level ``reply``; its transID is required, as the DTD says."""
    return reply_from(_expect(body, "reply")[0])


_BUILDERS: Final[dict[str, Callable[[Element], ApexElement]]] = {
    "attach": attach_from,
    "bind": bind_from,
    "terminate": terminate_from,
    "originator": originator_from,
    "recipient": recipient_from,
    "option": option_from,
    "ok": ok_from,
    "error": error_from,
    "reply": reply_from,
}


__all__ = [
    "DEFAULT_TERMINATE_CODE",
    "MAX_RECIPIENTS_PER_DATA",
    "ApexElement",
    "ApexMessage",
    "Attach",
    "Bind",
    "Data",
    "DataContent",
    "Error",
    "Ok",
    "Originator",
    "Recipient",
    "Reply",
    "Terminate",
    "attach_from",
    "bind_from",
    "data_content_from",
    "data_from",
    "error_from",
    "ok_from",
    "originator_from",
    "parse_apex",
    "parse_attach",
    "parse_bind",
    "parse_data",
    "parse_data_content",
    "parse_error",
    "parse_message",
    "parse_ok",
    "parse_originator",
    "parse_recipient",
    "parse_reply",
    "parse_terminate",
    "raw_inner",
    "recipient_from",
    "reply_from",
    "terminate_from",
]
