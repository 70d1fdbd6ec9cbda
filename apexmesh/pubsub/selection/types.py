"""What every selector class shares: identifier types, the message as a selector sees it,
the compiled selector's interface, and the predicates the matcher indexes.

Identifiers (draft-wyman-apex-pubsub-00 sections 7.2 and 7.3) are element or attribute
names of the message, matched by local name anywhere in the ``message-content`` (its
headers included, section 5.5) or in the bare body. "In the event that more than one
element or attribute name matches an identifier ... a single matching instance ... will be
considered a successful match": a :class:`MessageView` therefore gives every identifier a
tuple of instances, and each class applies its predicate to every instance.

Types come from the selector schema (section 5.5; the message schema when there is none,
5.5.1): an identifier declared ``xsd:decimal`` compares as a number, ``xsd:string`` as a
string, and so on (:data:`XSD_KINDS`). An identifier the schema does not declare is
refused (567) when a schema declares names at all; without one every name is allowed and
*untyped*: its text is read as a number, boolean or string according to what it is
compared with.

Strings are compared on their characters as the type's value space has them (JMS
3.8.1.1: "two strings are equal if and only if they contain the same sequence of
characters"). XML Schema's ``whiteSpace`` facet says what that is: ``xsd:string`` (and an
untyped text, ``xsd:anySimpleType``) *preserves* every space, tab and newline;
``xsd:normalizedString`` *replaces* each tab, newline and carriage return by a space;
``xsd:token`` and the types derived from it *collapse* (replace, then runs of spaces to
one, none at either end). Numbers, booleans and date-times collapse too (their lexical
spaces allow surrounding spaces). The text is never trimmed beyond what the facet says:
``name = 'foo '`` selects the text ``foo `` and only it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Final, Protocol

from apexmesh.apex.access import AccessError, parse_timestamp
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import ELEMENT_NODES, Element


class Kind(Enum):
    """The type of an identifier or expression, as far as selection is concerned."""

    EXACT = "exact"  # Java long (xsd:integer and its derived types)
    APPROX = "approx"  # Java double (xsd:decimal, float, double)
    #: xsd:string: every character kept (whiteSpace "preserve").
    STRING = "string"
    #: xsd:normalizedString: tab, newline and carriage return read as spaces ("replace").
    NORMALIZED = "normalizedString"
    #: xsd:token and its derived types (NMTOKEN, Name, language, ...), and xsd:anyURI and
    #: xsd:QName: spaces collapsed and trimmed ("collapse").
    TOKEN = "token"  # noqa: S105  (the XML Schema type, not a credential)
    BOOLEAN = "boolean"
    #: xsd:dateTime / xsd:date: milliseconds since the epoch, as JMS 3.8.1.3 says dates are
    #: (a string literal compared with one is read as an RFC 3339 date-time).
    DATETIME = "datetime"
    #: No schema type: read by what it is compared with.
    UNTYPED = "untyped"

    @property
    def numeric(self) -> bool:
        return self in (Kind.EXACT, Kind.APPROX, Kind.DATETIME)

    @property
    def textual(self) -> bool:
        """A string kind (they differ only in how they read whitespace)."""
        return self in _TEXTUAL

    # Members are singletons: identity hashing (a C slot) instead of Enum's hash of the
    # name, since every message view looks kinds up in a dictionary.
    __hash__ = object.__hash__


_TEXTUAL: Final = frozenset({Kind.STRING, Kind.NORMALIZED, Kind.TOKEN})

_INTEGERS: Final = (
    "integer int long short byte nonNegativeInteger positiveInteger nonPositiveInteger "
    "negativeInteger unsignedLong unsignedInt unsignedShort unsignedByte"
)
_TOKENS: Final = "token NMTOKEN Name NCName ID IDREF ENTITY language anyURI QName"

#: XML Schema built-in type (local name) -> kind. Anything else is untyped.
XSD_KINDS: Final[Mapping[str, Kind]] = {
    **dict.fromkeys(_INTEGERS.split(), Kind.EXACT),
    **dict.fromkeys(("decimal", "float", "double"), Kind.APPROX),
    "string": Kind.STRING,
    "normalizedString": Kind.NORMALIZED,
    **dict.fromkeys(_TOKENS.split(), Kind.TOKEN),
    "boolean": Kind.BOOLEAN,
    "dateTime": Kind.DATETIME,
    "date": Kind.DATETIME,
}

#: The message headers of section 5.2.1 / 8.2, selectable on every topic. The topic and
#: the publisher are names (a topic NMTOKEN or URI, an endpoint identity) that the
#: service itself reads without surrounding spaces (apexmesh/pubsub/message.py): their
#: selectors read them collapsed too, as xsd:token, so that ``topic = 'quotes'`` selects
#: what the service delivers as topic ``quotes`` however the publisher laid it out.
HEADER_KINDS: Final[Mapping[str, Kind]] = {
    "topic": Kind.TOKEN,
    "publisher": Kind.TOKEN,
    "publication-date": Kind.DATETIME,
    "expiration-date": Kind.UNTYPED,  # a date-time, '0' or '*'
    "message-id": Kind.EXACT,
    "revision-id": Kind.EXACT,
}

#: The root element of the default message schema (draft-wyman 5.3.2), which encloses a
#: body "in its entirety": the one identifier of a text/* body (apexmesh/pubsub/body.py).
DEFAULT_ROOT: Final = "message-content"

#: Longest selector text (characters). Real selectors are a few hundred characters; a
#: longer one is refused (567) before any parsing, so a 1 MB selector costs nothing.
MAX_SELECTOR_CHARS: Final = 16 * 1024
#: Deepest nesting of a selector's expression (parentheses and operators alike). The
#: parsers build the tree bottom-up without recursion and stop at this depth, so 10,000
#: nested parentheses are refused (567) instead of exhausting the stack.
MAX_SELECTOR_DEPTH: Final = 64
#: Most instances of one identifier looked at in one message.
MAX_INSTANCES: Final = 256


def incorrect(message: str) -> ApexError:
    """The 567 of section 5.8.1: the selector cannot be applied to the selector schema."""
    return ApexError(ApexReplyCode.INCORRECT_SELECTOR, message)


def check_length(text: str) -> None:
    if len(text) > MAX_SELECTOR_CHARS:
        raise incorrect(f"selector of {len(text)} characters exceeds {MAX_SELECTOR_CHARS}")


def check_depth(depth: int) -> int:
    if depth > MAX_SELECTOR_DEPTH:
        raise incorrect(f"selector nests deeper than {MAX_SELECTOR_DEPTH}")
    return depth


# --------------------------------------------------------------------------- types


@dataclass(frozen=True, slots=True)
class TypeMap:
    """Which identifiers a topic's selectors may use, and their kinds.

    ``open`` maps are those of a topic without a schema: every identifier is allowed,
    untyped unless it is a header.
    """

    kinds: Mapping[str, Kind] = field(default_factory=dict)
    open: bool = True

    def kind_of(self, identifier: str) -> Kind:
        """The identifier's kind; 567 when the schema does not allow it."""
        kind = self.kinds.get(identifier) or HEADER_KINDS.get(identifier)
        if kind is not None:
            return kind
        if self.open:
            return Kind.UNTYPED
        raise incorrect(f"identifier {identifier[:64]!r} is not in the selector schema")

    @classmethod
    def from_declarations(cls, declarations: Iterable[tuple[str, str | None]]) -> TypeMap:
        """From (name, xsd type local name or None) pairs of a schema; a name declared
        twice with different kinds is untyped."""
        kinds: dict[str, Kind] = {}
        for name, type_name in declarations:
            kind = XSD_KINDS.get(type_name or "", Kind.UNTYPED)
            kinds[name] = kind if kinds.get(name, kind) == kind else Kind.UNTYPED
        return cls(kinds=kinds, open=not kinds)


# --------------------------------------------------------------------------- values

#: What an instance that cannot be read as the compared type becomes: JMS 3.8.1.1 "If
#: the comparison of non-like type values is attempted, the value of the operation is
#: false" (not unknown).
MISMATCH: Final = object()

Value = int | float | str | bool | object

#: XML's whitespace (the ``S`` production of XML 1.0), which the collapse facet of
#: numbers, booleans and date-times removes at either end; no other character is
#: whitespace to XML Schema (a no-break space is a character).
XML_WHITESPACE: Final = " \t\n\r"

_EXACT_TEXT: Final = re.compile(r"[+-]?[0-9]{1,19}")
_APPROX_TEXT: Final = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")
_SPECIAL_FLOATS: Final = {"INF": math.inf, "-INF": -math.inf, "NaN": math.nan}
_LONG_MIN: Final = -(1 << 63)
_LONG_MAX: Final = (1 << 63) - 1


def number_of(text: str) -> int | float | None:
    """The number an XML text denotes (xsd:integer / xsd:decimal / xsd:double lexical
    forms), exact when it has neither point nor exponent; None when it is no number."""
    text = text.strip(XML_WHITESPACE)
    if _EXACT_TEXT.fullmatch(text):
        number = int(text)
        return number if _LONG_MIN <= number <= _LONG_MAX else float(number)
    if _APPROX_TEXT.fullmatch(text):
        return float(text)
    return _SPECIAL_FLOATS.get(text)


def boolean_of(text: str) -> bool | None:
    """xsd:boolean's lexical space (``true``, ``false``, ``1``, ``0``)."""
    return {"true": True, "1": True, "false": False, "0": False}.get(text.strip(XML_WHITESPACE))


def instant_of(text: str) -> int | float | None:
    """Milliseconds since the epoch of an RFC 3339 date-time (section 4) or xsd:date."""
    text = text.strip(XML_WHITESPACE)
    if len(text) == 10:
        text += "T00:00:00Z"
    try:
        when = parse_timestamp(text)
    except AccessError:
        return None
    millis = (when - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1000
    return int(millis) if millis.is_integer() else millis


#: XML's whitespace besides the space, which "replace" and "collapse" turn into spaces.
_XML_SPACES: Final = str.maketrans("\t\n\r", "   ")
_SPACE_RUNS: Final = re.compile(" {2,}")


def convert(text: str, kind: Kind) -> Value:
    """An instance's text read as ``kind``; :data:`MISMATCH` when it is not one.

    Strings keep what their whiteSpace facet keeps (the module docstring): an xsd:string
    or untyped text exactly as it is, never trimmed."""
    if kind is Kind.STRING or kind is Kind.UNTYPED:
        return text
    if kind is Kind.NORMALIZED:
        return text.translate(_XML_SPACES)
    if kind is Kind.TOKEN:
        return _SPACE_RUNS.sub(" ", text.translate(_XML_SPACES)).strip(" ")
    if kind is Kind.BOOLEAN:
        found: Value | None = boolean_of(text)
    elif kind is Kind.DATETIME:
        found = instant_of(text)
    else:
        found = number_of(text)
        if kind is Kind.APPROX and found is not None:
            found = float(found)
    return MISMATCH if found is None else found


# --------------------------------------------------------------------------- messages


def local_name(tag: str) -> str:
    return tag.rpartition("}")[2]


class MessageView:
    """The identifiers of one message: local name -> texts of its instances.

    Built once per publication (one walk over the tree) and shared by every selector
    evaluated against it; typed readings are made on first use and kept.
    """

    __slots__ = ("_typed", "texts")

    def __init__(self, texts: Mapping[str, tuple[str, ...]]) -> None:
        self.texts = texts
        self._typed: dict[tuple[str, Kind], tuple[Value, ...]] = {}

    @classmethod
    def of(cls, root: Element) -> MessageView:
        """Every element (its text when it has no child elements) and every attribute
        under ``root``, ``root`` included. An element with children is present (IS NOT
        NULL, ``=*``) but has no text to compare (an empty instance list is NULL)."""
        texts: dict[str, list[str]] = {}
        for element in root.iter(ELEMENT_NODES):
            name = local_name(str(element.tag))
            values = texts.setdefault(name, [])
            leaf = next(element.iterchildren(ELEMENT_NODES), None) is None
            if leaf and len(values) < MAX_INSTANCES:
                values.append(element.text or "")
            for attribute, value in element.attrib.items():
                found = texts.setdefault(local_name(str(attribute)), [])
                if len(found) < MAX_INSTANCES:
                    found.append(str(value))
        return cls({name: tuple(values) for name, values in texts.items()})

    @classmethod
    def of_text(cls, text: str) -> MessageView:
        """A text/* body (7.2, 7.3: "text processing"): by the default message schema
        (5.3.2) the text of one ``message-content`` element, its only identifier."""
        return cls({DEFAULT_ROOT: (text,)})

    @classmethod
    def of_values(cls, values: Mapping[str, Iterable[str]]) -> MessageView:
        """A view from plain name -> texts (tests, and bodies that are not XML)."""
        return cls({name: tuple(texts) for name, texts in values.items()})

    def present(self, identifier: str) -> bool:
        return identifier in self.texts

    def values(self, identifier: str, kind: Kind) -> tuple[Value, ...]:
        """The instances of ``identifier`` read as ``kind`` (empty: NULL)."""
        key = (identifier, kind)
        found = self._typed.get(key)
        if found is None:
            found = tuple(convert(text, kind) for text in self.texts.get(identifier, ()))
            self._typed[key] = found
        return found


# --------------------------------------------------------------------------- indexing


@dataclass(frozen=True, slots=True)
class Equals:
    """Necessary condition: some instance of ``identifier`` equals one of ``keys``.

    Keys are normalised by :func:`equality_key` so that the matcher looks them up with
    the message's instances read the same way."""

    identifier: str
    kind: Kind
    keys: frozenset[object]


@dataclass(frozen=True, slots=True)
class AtLeast:
    """Necessary condition: some instance of ``identifier`` (as a number) >= ``bound``."""

    identifier: str
    kind: Kind
    bound: float


@dataclass(frozen=True, slots=True)
class AtMost:
    """Necessary condition: some instance of ``identifier`` (as a number) <= ``bound``."""

    identifier: str
    kind: Kind
    bound: float


AccessPredicate = Equals | AtLeast | AtMost


def equality_key(value: Value) -> object:
    """How equal values meet in the index: numbers as floats (Java promotion: an exact
    and an approximate value are compared as doubles; two exact values that only their
    doubles confuse are told apart by the evaluation that follows), other values as they
    are."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return float(value)


def either(alternatives: Iterable[tuple[AccessPredicate, ...]]) -> tuple[AccessPredicate, ...]:
    """A necessary condition of an OR: when every alternative requires an equality on
    one identifier (``a = 'x' OR a = 'y'``), one of their keys; otherwise nothing."""
    common: dict[tuple[str, Kind], set[object]] | None = None
    for access in alternatives:
        found: dict[tuple[str, Kind], set[object]] = {}
        for predicate in access:
            if isinstance(predicate, Equals):
                key = (predicate.identifier, predicate.kind)
                found.setdefault(key, set()).update(predicate.keys)
        if common is not None:
            found = {key: common[key] | keys for key, keys in found.items() if key in common}
        if not found:
            return ()
        common = found
    if not common:
        return ()
    (identifier, kind), keys = next(iter(common.items()))
    return (Equals(identifier, kind, frozenset(keys)),)


class Selector(Protocol):
    """A compiled message selector of some class (section 5.4.1)."""

    @property
    def selector_class(self) -> str: ...

    @property
    def text(self) -> str: ...

    def matches(self, view: MessageView) -> bool:
        """True when the message is selected (a JMS selector that is UNKNOWN is not)."""
        ...

    def access_predicates(self) -> tuple[AccessPredicate, ...]:
        """Conditions every selected message satisfies (the conjuncts the matcher can
        index); empty when there is none."""
        ...


__all__ = [
    "DEFAULT_ROOT",
    "HEADER_KINDS",
    "MAX_INSTANCES",
    "MAX_SELECTOR_CHARS",
    "MAX_SELECTOR_DEPTH",
    "MISMATCH",
    "XML_WHITESPACE",
    "XSD_KINDS",
    "AccessPredicate",
    "AtLeast",
    "AtMost",
    "Equals",
    "Kind",
    "MessageView",
    "Selector",
    "TypeMap",
    "Value",
    "boolean_of",
    "check_depth",
    "check_length",
    "convert",
    "either",
    "equality_key",
    "incorrect",
    "instant_of",
    "local_name",
    "number_of",
]
