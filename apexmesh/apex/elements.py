"""The APEX core element model (RFC 3340 sections 4.4, 6.1.2 and 9.1), sans I/O.

Every element of the APEX core DTD is a frozen, slotted, keyword-only dataclass with a
``to_xml()`` that produces application/beep+xml bytes quoted the way the RFC's examples
are, and a ``parse_<element>(body)`` that accepts exactly what the DTD allows:

* ``attach``, ``bind``, ``terminate`` and ``data`` are the MSGs of the profile; ``ok`` and
  ``error`` (borrowed from the BEEP DTD, RFC 3080 section 2.3.1) are their RPY and ERR;
* ``originator``, ``recipient``, ``option`` and ``data-content`` live inside ``data``
  (the ``data`` family is defined in :mod:`apexmesh.apex.data` and ``option`` in
  :mod:`apexmesh.apex.options`; both are re-exported here);
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

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias

from apexmesh.apex import _dtd
from apexmesh.apex.data import (
    MAX_RECIPIENTS_PER_DATA,
    Data,
    DataContent,
    Originator,
    Recipient,
    data_content_from,
    data_from,
    originator_from,
    raw_inner,
    recipient_from,
)
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import (
    Option,
    check_option_count,
    option_from,
    options_from,
    options_xml,
)
from apexmesh.beep.xml import Element

if TYPE_CHECKING:
    from apexmesh.apex.memo import ParseMemo
    from apexmesh.apex.report import Destination, StatusResponse

#: Longest diagnostic put in an ``error`` built from an :class:`ApexError`. Messages quote
#: the offending input, which can be as long as an XML document; a diagnostic is for a
#: human reader (RFC 3080 section 2.3.1.5), and a few hundred characters say what went
#: wrong without reflecting a peer's megabyte back at it.
MAX_DIAGNOSTIC_CHARS: Final = 256

#: Default ``code`` of ``terminate`` (RFC 3340 section 9.1).
DEFAULT_TERMINATE_CODE: Final = 250


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
        _dtd.check_code(self.code, "error")

    @classmethod
    def from_exception(cls, exc: ApexError) -> Error:
        """The ERR element for a rejected operation, its diagnostic cut to
        :data:`MAX_DIAGNOSTIC_CHARS` (messages may quote the peer's own input)."""
        text = str(exc)
        if len(text) > MAX_DIAGNOSTIC_CHARS:
            text = text[: MAX_DIAGNOSTIC_CHARS - 3] + "..."
        return cls(code=int(exc.code), text=text)

    def to_xml(self) -> bytes:
        head = f"<error{_dtd.attr('code', str(self.code))}{_dtd.lang_attr(self.lang)}"
        return _dtd.with_text(head, "error", self.text)


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
        _dtd.check_code(self.code, "reply")
        if self.trans_id is not None and not 1 <= self.trans_id <= _dtd.MAX_TRANS_ID:
            _dtd.fail(f"reply: transID {self.trans_id} out of range")

    def to_xml(self) -> bytes:
        head = f"<reply{_dtd.attr('code', str(self.code))}"
        if self.trans_id is not None:
            head += _dtd.attr("transID", str(self.trans_id))
        return _dtd.with_text(head + _dtd.lang_attr(self.lang), "reply", self.text)


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
        _dtd.check_uniqid(self.trans_id, "attach")
        check_option_count(self.options, "attach")

    def to_xml(self) -> bytes:
        head = _dtd.attr("endpoint", str(self.endpoint)) + _dtd.attr("transID", str(self.trans_id))
        return _dtd.container("attach", head, options_xml(self.options))


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
        _dtd.check_uniqid(self.trans_id, "bind")
        check_option_count(self.options, "bind")

    def to_xml(self) -> bytes:
        head = _dtd.attr("relay", self.relay) + _dtd.attr("transID", str(self.trans_id))
        return _dtd.container("bind", head, options_xml(self.options))


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
        _dtd.check_code(self.code, "terminate")

    def to_xml(self) -> bytes:
        head = "<terminate"
        if self.code != DEFAULT_TERMINATE_CODE:
            head += _dtd.attr("code", str(self.code))
        head += _dtd.lang_attr(self.lang) + _dtd.attr("transID", str(self.trans_id))
        return _dtd.with_text(head, "terminate", self.text)


def attach_from(element: Element) -> Attach:
    attrs = _dtd.attributes(
        element, allowed=("endpoint", "transID"), required=("endpoint", "transID")
    )
    trans_id = _dtd.trans_id(attrs["transID"], "attach")
    try:
        endpoint = _dtd.endpoint(attrs["endpoint"], "attach")
        options = options_from(_dtd.only_options(element), "attach")
    except ApexError as exc:
        raise _named(exc, trans_id) from None
    return Attach(endpoint=endpoint, trans_id=trans_id, options=options)


def bind_from(element: Element) -> Bind:
    attrs = _dtd.attributes(element, allowed=("relay", "transID"), required=("relay", "transID"))
    trans_id = _dtd.trans_id(attrs["transID"], "bind")
    try:
        relay = _dtd.domain(attrs["relay"], "bind")
        options = options_from(_dtd.only_options(element), "bind")
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


# --------------------------------------------------------------------------- dispatch

#: Any element of the APEX core and report service DTDs.
ApexElement: TypeAlias = (
    "Attach | Bind | Terminate | Data | Originator | Recipient | DataContent | Option"
    " | Ok | Error | Reply | StatusResponse | Destination"
)

#: The elements exchanged as BEEP payloads of the APEX profile (section 9.1 synopsis).
ApexMessage: TypeAlias = Attach | Bind | Terminate | Data | Ok | Error


def parse_apex(body: bytes | str, memo: ParseMemo | None = None) -> ApexElement:
    """Parse one application/beep+xml document holding any APEX element; ``memo``
    (owned by the caller, apexmesh/apex/memo.py) answers documents seen before.

    Raises :class:`ApexError`: 500 (not well-formed), 501 (DTD or media type broken,
    unknown element), 553 (bad endpoint or domain), 554 (local limit exceeded).
    """
    raw = _dtd.raw_bytes(body)
    if memo is not None:
        known = memo.known_data(raw)  # most data: no parse at all
        if known is not None:
            return known
    root = _dtd.parse_root(raw)
    tag = _dtd.tag_of(root)
    if tag == "data":
        data = data_from(root, raw, memo)
        if memo is not None:
            memo.remember_data(raw, data)
        return data
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


#: The classes of :data:`ApexMessage`, the most frequent first.
_MESSAGE_CLASSES: Final = (Data, Ok, Error, Attach, Bind, Terminate)


def parse_message(body: bytes | str, memo: ParseMemo | None = None) -> ApexMessage:
    """Parse a BEEP payload of the APEX profile: attach, bind, terminate or data (MSG),
    ok (RPY) or error (ERR); anything else is 501."""
    element = parse_apex(body, memo)
    if not isinstance(element, _MESSAGE_CLASSES):
        _dtd.fail(f"{type(element).__name__} is not an APEX message")
    return element


def _expect(body: bytes | str, tag: str) -> tuple[Element, bytes]:
    raw = _dtd.raw_bytes(body)
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
    "MAX_DIAGNOSTIC_CHARS",
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
