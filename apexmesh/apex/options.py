"""APEX options (RFC 3340 section 5): the ``option`` element and the targetHop rules.

An ``option`` sits in a "containing" element: ``data`` (per-data options), ``originator``
(per-originator), ``recipient`` (per-recipient) or ``attach`` (and ``bind``, whose DTD
content model is also ``option*``). It names itself by exactly one of ``internal`` (an
IANA-registered NMTOKEN such as ``statusRequest``) or ``external`` (an absolute URI);
the DTD defaults of section 9.1 are ``targetHop='final'``, ``mustUnderstand='false'`` and
``localize='i-default'``, and ``transID`` is ``#REQUIRED``.

The processing rules of section 5 are pure functions of the option and of the hop:

* ``this``: the option applies to this relay and is removed before the containing
  element is transmitted;
* ``final``: the option applies only if this relay transmits the containing element
  directly to the recipient (it is the final hop); otherwise it travels on;
* ``all``: the option applies to this relay and is retained for the next;
* a final relay removes nothing;
* ``mustUnderstand`` is consulted only when the option applies: an applicable option
  this relay does not understand is "an error in processing". RFC 3340 names no code for
  it; 504 "parameter not implemented" (section 10) is the one that says what happened.

In an ``attach`` the ``targetHop`` and ``transID`` values are ignored (section 5): every
option there applies to the relay that receives it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import Element, element_key

if TYPE_CHECKING:
    from apexmesh.apex.memo import ParseMemo

#: Most ``option`` elements accepted in one containing element. RFC 3340 registers one
#: option (statusRequest) and lets relays add administrative ones (section 4.4.4.1); 32
#: leaves ample room for that while keeping the per-hop option scan and the forwarded copy
#: of a hostile element small.
MAX_OPTIONS_PER_ELEMENT: Final = 32

#: The option registered by RFC 3340 section 8.4.
STATUS_REQUEST: Final = "statusRequest"

#: Default of the ``localize`` attribute (RFC 3340 section 9.1).
DEFAULT_LOCALIZE: Final = ("i-default",)

_ATTRS: Final = frozenset(
    {"internal", "external", "targetHop", "mustUnderstand", "transID", "localize"}
)


class TargetHop(enum.Enum):
    """Which relay(s) process an option (RFC 3340 section 5)."""

    #: Applies to this relay; removed before the containing element is transmitted.
    THIS = "this"
    #: Applies only to the relay that transmits directly to the recipient.
    FINAL = "final"
    #: Applies to this relay and is retained for the next.
    ALL = "all"


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """An ``option`` element (RFC 3340 sections 5 and 9.1)."""

    #: IANA-registered name (NMTOKEN), or None when ``external`` names the option.
    internal: str | None = None
    #: Absolute URI naming an unregistered option, or None when ``internal`` is used.
    external: str | None = None
    #: The transaction identifier of the option (UNIQID, ``#REQUIRED``).
    trans_id: int
    #: Which relays process the option (default ``final``).
    target_hop: TargetHop = TargetHop.FINAL
    #: Whether an applicable but unrecognized option is an error (default false).
    must_understand: bool = False
    #: Desirable language tags for textual diagnostics (default ``i-default``).
    localize: tuple[str, ...] = DEFAULT_LOCALIZE
    #: The option's content (the DTD says ``ANY``) as application/beep+xml text, kept in
    #: the parser's serialization (attributes double-quoted, empty elements ``<x/>``).
    content: bytes = b""

    def __post_init__(self) -> None:
        if (self.internal is None) == (self.external is None):
            _dtd.fail("option: exactly one of internal and external must be present")
        if self.internal is not None and not _dtd.is_nmtoken(self.internal):
            _dtd.fail(f"option: internal {self.internal!r} is not an NMTOKEN")
        if self.external is not None and not _dtd.is_absolute_uri(self.external):
            _dtd.fail(f"option: external {self.external!r} is not an absolute URI")
        if not 1 <= self.trans_id <= _dtd.MAX_TRANS_ID:
            _dtd.fail(f"option: transID {self.trans_id} out of range")
        if not self.localize or not all(_dtd.is_language_tag(tag) for tag in self.localize):
            _dtd.fail("option: localize is not a list of language tags")
        if self.content:
            # One canonical form (the parser's serialization), so that an option built in
            # code and the same option parsed from a peer compare equal.
            object.__setattr__(self, "content", _dtd.canonical_content(self.content, "option"))

    @property
    def name(self) -> str:
        """The identity of the option: its internal name or its external URI."""
        return self.internal if self.internal is not None else str(self.external)

    def to_xml(self) -> bytes:
        """Serialize as application/beep+xml, quoting as RFC 3340's examples do."""
        if self.internal is not None:
            head = _dtd.attr("internal", self.internal)
        else:
            head = _dtd.attr("external", str(self.external))
        head += _dtd.attr("targetHop", self.target_hop.value)
        head += _dtd.attr("mustUnderstand", "true" if self.must_understand else "false")
        head += _dtd.attr("transID", str(self.trans_id))
        if self.localize != DEFAULT_LOCALIZE:
            head += _dtd.attr("localize", " ".join(self.localize))
        if not self.content:
            return f"<option{head} />".encode()
        return f"<option{head}>".encode() + self.content + b"</option>"


def option_from(element: Element, memo: ParseMemo | None = None) -> Option:
    """Build an :class:`Option` from a parsed ``option`` element (501 if not valid).

    The same option arrives again and again (the dataHopping of every pubsub
    publication, the statusRequest of a client): with a ``memo``, a valid one is kept by
    its serialization, and an element serialized alike is the same (immutable) Option."""
    if memo is None:
        return _parse_option_element(element)
    key = element_key(element)
    known = memo.option(key)
    if known is not None:
        return known
    option = _parse_option_element(element)
    memo.remember_option(key, option)
    return option


def _parse_option_element(element: Element) -> Option:
    attrs = _dtd.attributes(element, allowed=_ATTRS, required=("transID",))
    trans_id = _dtd.trans_id(attrs.get("transID"), "option")
    # The DTD defaults both names to "": an empty value counts as absent.
    internal = attrs.get("internal") or None
    external = attrs.get("external") or None
    try:
        target_hop = TargetHop(attrs.get("targetHop", TargetHop.FINAL.value))
    except ValueError:
        _dtd.fail("option: targetHop must be this, final or all", trans_id=trans_id)
    must = attrs.get("mustUnderstand", "false")
    if must not in ("true", "false"):
        _dtd.fail("option: mustUnderstand must be true or false", trans_id=trans_id)
    localize = tuple(attrs["localize"].split()) if "localize" in attrs else DEFAULT_LOCALIZE
    try:
        option = Option(
            internal=internal,
            external=external,
            trans_id=trans_id,
            target_hop=target_hop,
            must_understand=must == "true",
            localize=localize,
        )
    except ApexError as exc:
        exc.trans_id = trans_id
        raise
    # The parser's own serialization already is the canonical form __post_init__ would
    # make of it (by parsing it again): set it directly, this is every received option.
    object.__setattr__(option, "content", _dtd.inner_xml(element))
    return option


def parse_option(body: bytes | str) -> Option:
    """Parse a document whose root is an ``option`` element."""
    root = _dtd.parse_root(body)
    if _dtd.tag_of(root) != "option":
        _dtd.fail(f"expected option, got {_dtd.tag_of(root)!r}")
    return option_from(root)


def options_from(
    elements: Sequence[Element], container: str, memo: ParseMemo | None = None
) -> tuple[Option, ...]:
    """The ``option`` children of a containing element, bounded by
    :data:`MAX_OPTIONS_PER_ELEMENT` (554, a local policy limit)."""
    if len(elements) > MAX_OPTIONS_PER_ELEMENT:
        _dtd.fail(
            f"{container}: more than {MAX_OPTIONS_PER_ELEMENT} options",
            ApexReplyCode.TRANSACTION_FAILED,
        )
    return tuple(option_from(element, memo) for element in elements)


def check_option_count(options: Sequence[Option], container: str) -> None:
    """Refuse to build a containing element with more options than the limit (554)."""
    if len(options) > MAX_OPTIONS_PER_ELEMENT:
        _dtd.fail(
            f"{container}: more than {MAX_OPTIONS_PER_ELEMENT} options",
            ApexReplyCode.TRANSACTION_FAILED,
        )


def options_xml(options: Iterable[Option]) -> bytes:
    return b"".join(option.to_xml() for option in options)


# --------------------------------------------------------------------------- processing


@dataclass(frozen=True, slots=True, kw_only=True)
class OptionRegistry:
    """The options this relay (or application) understands, by identity."""

    #: Registered (``internal``) names understood.
    internal: frozenset[str] = frozenset({STATUS_REQUEST})
    #: ``external`` URIs understood.
    external: frozenset[str] = frozenset()

    def understands(self, option: Option) -> bool:
        if option.internal is not None:
            return option.internal in self.internal
        return option.external in self.external


def applies(option: Option, *, final: bool) -> bool:
    """Whether ``option`` applies to this relay (RFC 3340 section 5, targetHop)."""
    return option.target_hop is not TargetHop.FINAL or final


def retained(option: Option, *, final: bool) -> bool:
    """Whether ``option`` stays in the containing element this relay transmits.

    A final relay removes nothing; otherwise only ``this`` options are removed.
    """
    return final or option.target_hop is not TargetHop.THIS


@dataclass(frozen=True, slots=True, kw_only=True)
class OptionSelection:
    """What one hop does with the options of one containing element."""

    #: Applicable options this hop understands: to be processed, in document order.
    process: tuple[Option, ...]
    #: Applicable options this hop does not understand, with mustUnderstand false:
    #: not processed, but they may be noted (RFC 3340 section 5).
    ignored: tuple[Option, ...]
    #: Options of the containing element as transmitted to the next hop.
    forward: tuple[Option, ...]


def select_options(
    options: Iterable[Option], registry: OptionRegistry, *, final: bool
) -> OptionSelection:
    """Apply the targetHop and mustUnderstand rules to the options of one element.

    Raises :class:`ApexError` 504 (carrying the option's transID) for the first applicable
    option that ``registry`` does not understand and that has mustUnderstand true.
    """
    process: list[Option] = []
    ignored: list[Option] = []
    forward: list[Option] = []
    for option in options:
        if applies(option, final=final):
            if registry.understands(option):
                process.append(option)
            elif option.must_understand:
                raise not_understood(option)
            else:
                ignored.append(option)
        if retained(option, final=final):
            forward.append(option)
    return OptionSelection(process=tuple(process), ignored=tuple(ignored), forward=tuple(forward))


def select_local_options(options: Iterable[Option], registry: OptionRegistry) -> OptionSelection:
    """The rules for ``attach`` (and ``bind``): targetHop is ignored, every option
    applies to the receiving relay, and nothing is forwarded (RFC 3340 section 5)."""
    process: list[Option] = []
    ignored: list[Option] = []
    for option in options:
        if registry.understands(option):
            process.append(option)
        elif option.must_understand:
            raise not_understood(option)
        else:
            ignored.append(option)
    return OptionSelection(process=tuple(process), ignored=tuple(ignored), forward=())


def not_understood(option: Option) -> ApexError:
    """The error for an applicable, unrecognized mustUnderstand option (504)."""
    return ApexError(
        ApexReplyCode.PARAMETER_NOT_IMPLEMENTED,
        f"option {option.name!r} is not understood",
        trans_id=option.trans_id,
    )


__all__ = [
    "DEFAULT_LOCALIZE",
    "MAX_OPTIONS_PER_ELEMENT",
    "STATUS_REQUEST",
    "Option",
    "OptionRegistry",
    "OptionSelection",
    "TargetHop",
    "applies",
    "check_option_count",
    "not_understood",
    "option_from",
    "options_from",
    "options_xml",
    "parse_option",
    "retained",
    "select_local_options",
    "select_options",
]
