"""The "RFC-2254" message selector class (draft-wyman-apex-pubsub-00 section 7.2).

The string representation of LDAP search filters (RFC 2254 section 4, the grammar the
draft copies into 7.2), parsed by lark's LALR(1) parser with a contextual lexer (a value
may hold spaces and most punctuation, an attribute may not, and which one is expected
depends on the position). Identifiers are element or attribute names of the message;
"all instances of the element or attribute will be compared ... A single matching
instance ... will be considered a successful match" (7.2).

Readings, where the draft and RFC 2254 leave room (also in docs/pubsub.md):

- The draft's own example (5.6) writes ``&(symbol='XMPL')(|(net-change-pct > 5.0)...)``:
  a top level without its parentheses, ``>`` and ``<``, spaces around the operator and a
  value in single quotes. All four are accepted: a bare top level is read as if
  parenthesised; ``>`` and ``<`` are strict orderings; the spaces around an unquoted
  value are the filter's layout and not part of the value (``(symbol = XMPL)`` asserts
  ``XMPL``); a value wholly in single quotes is exactly the text between them, spaces
  included (write ``\\27`` for a literal quote).
- Values are compared by the identifier's selector-schema type: numbers numerically,
  date-times chronologically, strings on their characters as the type keeps them
  (:func:`~.types.convert`: an xsd:string or untyped text exactly, spaces included, as
  the JMS class does; XML is case-sensitive; ``~=`` compares case-insensitively with
  runs of spaces collapsed and none at either end, on both sides). So ``(s=' a ')``
  selects the text " a " and ``(s=a)`` does not. Untyped identifiers (no schema)
  compare numerically when both sides are numbers, otherwise as strings.
- Logic is two-valued: an identifier the message lacks makes its item false (RFC 2251
  section 4.5.1: equality "is TRUE if the entry contains a value equal"), so
  ``(!(x=1))`` selects a message without ``x``.
- Escapes ``\\XX`` are octets of UTF-8 (RFC 4515 section 3); the extensible match
  (``:=``), which the draft's grammar leaves out, is refused (567).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from lark import Token, Transformer

from apexmesh.pubsub.selection.parsing import BottomUpParser
from apexmesh.pubsub.selection.types import (
    MISMATCH,
    AccessPredicate,
    AtLeast,
    AtMost,
    Equals,
    Kind,
    MessageView,
    TypeMap,
    Value,
    boolean_of,
    check_depth,
    either,
    equality_key,
    incorrect,
    instant_of,
    number_of,
)
from apexmesh.pubsub.selection.wildcard import Part, Wildcard

CLASS_NAME: Final = "RFC-2254"

GRAMMAR: Final = r"""
?start: _WS? (filter | filtercomp) _WS?
filter: "(" _WS? filtercomp _WS? ")"
?filtercomp: and_ | or_ | not_ | item
and_: "&" _WS? filters
or_: "|" _WS? filters
filters: (filter _WS?)+
not_: "!" _WS? filter
item: ATTR _WS? FILTERTYPE assertion
assertion: (VALUE | STAR)*

ATTR: /[A-Za-z_\u00c0-\uffff][\w.\-\u00b7\u00c0-\uffff]*/
FILTERTYPE: "~=" | ">=" | "<=" | "=" | ">" | "<"
STAR: "*"
// Any character but ( ) * \ NUL, or \ and two hex digits (RFC 2254 section 4).
VALUE: /(?:[^()*\\\x00]|\\[0-9a-fA-F]{2})+/
_WS: /[ \t\r\n]+/
"""

Test = Callable[[MessageView], bool]


@dataclass(frozen=True, slots=True)
class Node:
    depth: int
    test: Test
    access: tuple[AccessPredicate, ...] = ()


def _decode(raw: str) -> str:
    """A value with its ``\\XX`` escapes turned into octets, read as UTF-8."""
    if "\\" not in raw:
        return raw
    octets = bytearray()
    index = 0
    while index < len(raw):
        char = raw[index]
        if char == "\\":
            octets.append(int(raw[index + 1 : index + 3], 16))
            index += 3
        else:
            octets += char.encode("utf-8", "surrogatepass")
            index += 1
    # Octets that are not UTF-8 can never equal the text of an XML document.
    return octets.decode("utf-8", "surrogateescape")


def _value(parts: list[Token]) -> str:
    """The assertion value of an item without ``*``, quotes and outer spaces removed."""
    text = _decode("".join(str(part) for part in parts)).strip()
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        text = text[1:-1]
    return text


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


_ORDER: Final[dict[str, Callable[[Any, Any], bool]]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}


class _Build(Transformer[Token, Node]):
    """LALR callbacks: each filter's test, built bottom-up."""

    def __init__(self) -> None:
        super().__init__()
        #: The schema of the selector being compiled (see ``JmsClass`` for why this is safe).
        self.types = TypeMap()

    def assertion(self, items: list[Token]) -> list[Token]:
        return items

    def item(self, items: list[object]) -> Node:
        attr, filtertype, parts = items
        name, op = str(attr), str(filtertype)
        kind = self.types.kind_of(name)
        if not isinstance(parts, list):  # the assertion rule always returns its tokens
            raise incorrect(f"no value in the item for {name}")
        if not any(part.type == "STAR" for part in parts):
            return self._simple(name, kind, op, _value(parts))
        if op != "=":
            raise incorrect(f"'*' is a wildcard only after '=' (item {name})")
        if len(parts) == 1:
            return Node(1, lambda view: view.present(name))
        return self._substring(name, kind, parts)

    def _simple(self, name: str, kind: Kind, op: str, text: str) -> Node:
        if kind is Kind.UNTYPED:
            number = number_of(text)
            if number is not None:
                numeric_op = "=" if op == "~=" else op
                return self._numeric(name, Kind.EXACT, numeric_op, number, untyped_text=text)
            return self._string(name, Kind.STRING, op, text)
        if kind.textual:
            return self._string(name, kind, op, text)
        if kind is Kind.BOOLEAN:
            value = boolean_of(text.lower())
            if value is None or op not in ("=", "~="):
                raise incorrect(f"{name} is boolean: ({name}{op}{text[:32]}) cannot apply")
            return Node(
                1,
                lambda view: value in view.values(name, Kind.BOOLEAN),
                _equals(name, Kind.BOOLEAN, value),
            )
        found = instant_of(text) if kind is Kind.DATETIME else number_of(text)
        if found is None:
            raise incorrect(f"{text[:32]!r} is not a {kind.value} value for {name}")
        return self._numeric(name, kind, "=" if op == "~=" else op, found)

    def _numeric(
        self, name: str, kind: Kind, op: str, bound: int | float, untyped_text: str | None = None
    ) -> Node:
        def same(value: Value) -> bool:
            if value is MISMATCH:
                return False
            if isinstance(value, float) or isinstance(bound, float):
                return float(value) == float(bound)  # type: ignore[arg-type]
            return value == bound

        if op == "=":
            if untyped_text is None:
                test: Test = lambda view: any(same(v) for v in view.values(name, kind))  # noqa: E731
            else:
                # Untyped: equal as numbers, or as the same text (kept for "1e5" = "1e5").
                test = lambda view: any(  # noqa: E731
                    same(v) or t == untyped_text
                    for v, t in zip(
                        view.values(name, kind), view.values(name, Kind.STRING), strict=True
                    )
                )
            return Node(1, test, _equals(name, kind, bound))
        compare = _ORDER[op]

        def ordered(view: MessageView) -> bool:
            for value in view.values(name, kind):
                if value is MISMATCH:
                    continue
                if isinstance(value, float) or isinstance(bound, float):
                    if compare(float(value), float(bound)):  # type: ignore[arg-type]
                        return True
                elif compare(value, bound):
                    return True
            return False

        predicate: AccessPredicate = (
            AtLeast(name, kind, float(bound))
            if op in (">=", ">")
            else AtMost(name, kind, float(bound))
        )
        return Node(1, ordered, (predicate,))

    def _string(self, name: str, kind: Kind, op: str, text: str) -> Node:
        """An item on a string identifier, read as ``kind`` (its whiteSpace facet)."""
        if op == "=":
            return Node(
                1,
                lambda view: text in view.values(name, kind),
                _equals(name, kind, text),
            )
        if op == "~=":
            folded = _fold(text)
            return Node(
                1, lambda view: any(_fold(str(v)) == folded for v in view.values(name, kind))
            )
        compare = _ORDER[op]
        return Node(1, lambda view: any(compare(v, text) for v in view.values(name, kind)))

    def _substring(self, name: str, kind: Kind, parts: list[Token]) -> Node:
        if not (kind.textual or kind is Kind.UNTYPED):
            raise incorrect(f"substrings apply to strings; {name} is {kind.value}")
        reading = Kind.STRING if kind is Kind.UNTYPED else kind
        pieces: list[Part] = [()]
        for part in parts:
            if part.type == "STAR":
                pieces.append(())
            else:
                pieces[-1] = tuple(_decode(str(part)))
        # Spaces at the ends of the whole pattern are layout (as around a value); the
        # instance is compared exactly.
        pieces[0] = tuple("".join(pieces[0]).lstrip())  # type: ignore[arg-type]
        pieces[-1] = tuple("".join(pieces[-1]).rstrip())  # type: ignore[arg-type]
        pattern = Wildcard.of_parts(pieces)
        return Node(
            1, lambda view: any(pattern.matches(str(v)) for v in view.values(name, reading))
        )

    def filter(self, items: list[Node]) -> Node:
        (inner,) = items
        return Node(check_depth(inner.depth + 1), inner.test, inner.access)

    def filters(self, items: list[Node]) -> list[Node]:
        return items

    def and_(self, items: list[list[Node]]) -> Node:
        parts = tuple(items[0])
        tests = tuple(part.test for part in parts)
        access = tuple(predicate for part in parts for predicate in part.access)
        depth = check_depth(max(part.depth for part in parts) + 1)
        return Node(depth, lambda view: all(t(view) for t in tests), access)

    def or_(self, items: list[list[Node]]) -> Node:
        parts = tuple(items[0])
        tests = tuple(part.test for part in parts)
        depth = check_depth(max(part.depth for part in parts) + 1)
        return Node(
            depth, lambda view: any(t(view) for t in tests), either(p.access for p in parts)
        )

    def not_(self, items: list[Node]) -> Node:
        (inner,) = items
        test = inner.test
        return Node(check_depth(inner.depth + 1), lambda view: not test(view))


def _equals(name: str, kind: Kind, value: Value) -> tuple[AccessPredicate, ...]:
    return (Equals(name, kind, frozenset({equality_key(value)})),)


@dataclass(frozen=True, slots=True)
class LdapSelector:
    """A compiled RFC-2254 selector."""

    text: str
    node: Node
    selector_class: str = CLASS_NAME

    def matches(self, view: MessageView) -> bool:
        return self.node.test(view)

    def access_predicates(self) -> tuple[AccessPredicate, ...]:
        return self.node.access


class LdapClass:
    """The selector class registration of section 7.2."""

    name: Final = CLASS_NAME

    def __init__(self) -> None:
        self._parser = BottomUpParser(GRAMMAR, _Build(), lexer="contextual", what="RFC 2254")

    def compile(self, text: str, types: TypeMap) -> LdapSelector:
        """Parse and check ``text``; 567 (:class:`ApexError`) when it is incorrect."""
        node: Node = self._parser.parse(text, types)
        return LdapSelector(text=text, node=node)


__all__ = ["CLASS_NAME", "LdapClass", "LdapSelector"]
