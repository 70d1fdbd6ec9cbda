"""The "JMS" message selector class (draft-wyman-apex-pubsub-00 section 7.3).

The syntax and semantics are those of JMS 1.1 / Jakarta Messaging section 3.8.1
("Message selector"), parsed by lark's LALR(1) parser (linear in the selector's length,
no recursion: the tree is built bottom-up by the callbacks of :class:`_Build`, which
also check kinds, so a selector is refused once, at subscribe time, with 567).

Where the draft adapts JMS (section 7.3):

- Identifiers are element or attribute names of the message (XML names: ``-`` and ``.``
  belong to them, so ``net-change-pct`` is one identifier and subtraction needs a space
  before ``-``); every instance of a name is compared and "a single matching instance"
  matches: a predicate over a name with instances v1..vn is (p(v1) OR ... OR p(vn)) in
  the three-valued logic of 3.8.1.2, and a name without instances is NULL. That holds for
  every predicate, the negated forms too: ``tag NOT IN ('a')``, ``tag NOT LIKE 'a%'`` and
  ``tag NOT BETWEEN 1 AND 2`` are p(v) = NOT IN, NOT LIKE, NOT BETWEEN of one instance,
  OR-ed, exactly as ``tag <> 'a'`` is; with tags {a, b} each of them is TRUE ("b" is not
  'a'). Only the NOT operator negates a whole predicate: ``NOT (tag IN ('a'))`` is FALSE.
- Strings compare on their characters as the identifier's type keeps them
  (:func:`~.types.convert`: an xsd:string or untyped text exactly, spaces included; an
  xsd:token collapsed), so ``name = 'foo '`` selects "foo " and not "foo" (3.8.1.1: "the
  same sequence of characters").
- An identifier's type is its selector-schema type (:class:`~.types.TypeMap`); a typed
  comparison of unlike kinds (``symbol > 5`` for an xsd:string ``symbol``) is refused
  at subscribe time (3.8.1.1 allows "semantic checking at the time the selector is
  presented"). Untyped identifiers (no schema) are read as the other operand's kind;
  an instance that cannot be read so makes that comparison false ("comparison of
  non-like type values ... is false").
- xsd:dateTime identifiers are milliseconds since the epoch (3.8.1.3); a string literal
  compared with one is read as an RFC 3339 date-time.

Java arithmetic: exact values are longs (64-bit, wrapping), exact and approximate values
meet as doubles (numeric promotion); an exact division by zero (an ArithmeticException in
Java) is NULL.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from lark import Token, Transformer

from apexmesh.pubsub.selection.java import (
    LONG_MAX,
    OPERATORS,
    Truth,
    and_,
    any_,
    arithmetic,
    not_,
    numeric_compare,
    plain_compare,
    wrap,
)
from apexmesh.pubsub.selection.jms_grammar import GRAMMAR
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
    check_depth,
    either,
    equality_key,
    incorrect,
    instant_of,
)
from apexmesh.pubsub.selection.wildcard import Part, Wildcard

CLASS_NAME: Final = "JMS"

#: Arithmetic on multi-valued identifiers stops at this many results.
MAX_COMBINATIONS: Final = 4096

Values = tuple[Value, ...]
Reader = Callable[[MessageView], Values]
Test = Callable[[MessageView], Truth]


# --------------------------------------------------------------------------- nodes


@dataclass(frozen=True, slots=True)
class Operand:
    """A value expression: literal, identifier or arithmetic."""

    kind: Kind
    depth: int
    #: Reads the expression as ``kind`` (only untyped identifiers care about the kind
    #: asked for; other operands ignore it).
    read: Callable[[Kind], Reader]
    identifier: str | None = None
    #: The literal's value when the operand is a literal (``has_literal``).
    literal: Value = None
    has_literal: bool = False
    #: An exact literal of 2**63, legal only under unary minus (Long.MIN_VALUE).
    overflow: bool = False


@dataclass(frozen=True, slots=True)
class Condition:
    depth: int
    test: Test
    access: tuple[AccessPredicate, ...] = ()


def _fixed(values: Values) -> Callable[[Kind], Reader]:
    def read(_kind: Kind) -> Reader:
        return lambda _view: values

    return read


def _literal(kind: Kind, value: Value, *, overflow: bool = False) -> Operand:
    return Operand(
        kind=kind,
        depth=1,
        read=_fixed((value,)),
        literal=value,
        has_literal=True,
        overflow=overflow,
    )


def _used(operand: Operand) -> Operand:
    if operand.overflow:
        raise incorrect("exact literal 9223372036854775808 is out of the range of a long")
    return operand


# --------------------------------------------------------------------------- comparisons


_MIRROR: Final = {"=": "=", "<>": "<>", ">": "<", ">=": "<=", "<": ">", "<=": ">="}


def _pairs(
    left: Reader, right: Reader, compare: Callable[[Value, Value], Truth], constant: bool
) -> Test:
    """The comparison of every instance pair, OR-ed; NULL when a side has none."""
    if constant:
        # The right side is a literal: one value, read once per message is wasted work.
        def against_literal(view: MessageView) -> Truth:
            values = left(view)
            if not values:
                return None
            (value,) = right(view)
            if len(values) == 1:  # the usual case, without a generator
                return compare(values[0], value)
            return any_(compare(item, value) for item in values)

        return against_literal

    def test(view: MessageView) -> Truth:
        lefts = left(view)
        rights = right(view) if lefts else ()
        if not lefts or not rights:
            return None
        return any_(compare(a, b) for a in lefts for b in rights)

    return test


# --------------------------------------------------------------------------- kinds


def _domain(left: Operand, right: Operand, op: str) -> Kind:
    """The kind two operands are compared as; 567 for unlike kinds (3.8.1.1)."""
    # The string kinds differ only in how an identifier reads its own text, which its
    # reader does whatever the domain: as operands they are one kind.
    kinds = {Kind.STRING if kind.textual else kind for kind in (left.kind, right.kind)}
    if kinds == {Kind.UNTYPED}:
        return Kind.APPROX if op not in ("=", "<>") else Kind.STRING
    kinds.discard(Kind.UNTYPED)
    if len(kinds) == 1:
        (kind,) = kinds
    elif kinds <= {Kind.EXACT, Kind.APPROX, Kind.DATETIME}:
        kind = Kind.APPROX if Kind.APPROX in kinds else Kind.EXACT
    elif kinds == {Kind.DATETIME, Kind.STRING} and (left.has_literal or right.has_literal):
        kind = Kind.DATETIME
    else:
        names = " and ".join(sorted(k.value for k in kinds))
        raise incorrect(f"cannot compare {names} values")
    if (kind.textual or kind is Kind.BOOLEAN) and op not in ("=", "<>"):
        raise incorrect(f"{kind.value} values compare only with = and <> (not {op})")
    return kind


def _reading(operand: Operand, domain: Kind) -> Reader:
    """How to read ``operand`` in a comparison of ``domain`` kind."""
    if operand.has_literal and operand.kind is Kind.STRING and domain is Kind.DATETIME:
        instant = instant_of(str(operand.literal))
        if instant is None:
            raise incorrect(f"{str(operand.literal)[:64]!r} is not an RFC 3339 date-time")
        return lambda _view: (instant,)
    if domain is Kind.APPROX and operand.kind is Kind.UNTYPED:
        return operand.read(Kind.EXACT)  # untyped text read as a number, exact if it is one
    return operand.read(domain)


def _index_kind(operand: Operand, domain: Kind) -> Kind:
    """The kind the matcher must read an identifier in to test an access predicate."""
    if operand.kind is Kind.UNTYPED:
        return Kind.EXACT if domain.numeric else domain
    return operand.kind


def _access(
    identifier: Operand, op: str, literal: Operand, domain: Kind
) -> tuple[AccessPredicate, ...]:
    name = identifier.identifier
    if name is None or not literal.has_literal:
        return ()
    (value,) = _reading(literal, domain)(MessageView({}))
    kind = _index_kind(identifier, domain)
    if op == "=":
        return (Equals(name, kind, frozenset({equality_key(value)})),)
    if not domain.numeric or not isinstance(value, int | float) or isinstance(value, bool):
        return ()
    if op in (">", ">="):
        return (AtLeast(name, kind, float(value)),)
    if op in ("<", "<="):
        return (AtMost(name, kind, float(value)),)
    return ()


def _condition_of(item: Operand | Condition) -> Condition:
    """A boolean operand used as a condition (3.8.1.1: "identifiers with boolean values,
    and boolean literals")."""
    if isinstance(item, Condition):
        return item
    if item.kind not in (Kind.BOOLEAN, Kind.UNTYPED):
        raise incorrect(f"a {item.kind.value} value is not a condition")
    read = _used(item).read(Kind.BOOLEAN)

    def test(view: MessageView) -> Truth:
        values = read(view)
        if not values:
            return None
        return any(value is True for value in values)

    access: tuple[AccessPredicate, ...] = ()
    if item.identifier is not None:
        access = (Equals(item.identifier, Kind.BOOLEAN, frozenset({True})),)
    return Condition(item.depth, test, access)


def _operand_of(item: Operand | Condition) -> Operand:
    if isinstance(item, Condition):
        raise incorrect("a condition is not a value")
    return _used(item)


# --------------------------------------------------------------------------- arithmetic


def _numeric(operand: Operand) -> Operand:
    if not (operand.kind.numeric or operand.kind is Kind.UNTYPED):
        raise incorrect(f"arithmetic on a {operand.kind.value} value")
    return operand


def _number_reader(operand: Operand) -> Reader:
    return operand.read(Kind.EXACT if operand.kind is Kind.UNTYPED else operand.kind)


# --------------------------------------------------------------------------- tree


def _text(token: Token) -> str:
    return str(token)[1:-1].replace("''", "'")


def _exact(token: Token) -> int:
    text = str(token).rstrip("lL")
    if text[:2] in ("0x", "0X"):
        return int(text, 16)
    if len(text) > 1 and text.startswith("0"):
        if any(c in "89" for c in text):
            raise incorrect(f"{text[:32]!r} is not an octal literal")
        return int(text, 8)
    return int(text)


def _pattern(pattern: str, escape: str | None) -> Wildcard:
    """A LIKE pattern: ``_`` any one character, ``%`` any sequence, the escape character
    before ``_``, ``%`` or itself takes it literally (3.8.1.1)."""
    parts: list[Part] = []
    current: list[str | None] = []
    chars = iter(pattern)
    for char in chars:
        if escape is not None and char == escape:
            following = next(chars, None)
            if following is None or following not in ("_", "%", escape):
                raise incorrect("the escape character must precede _, % or itself")
            current.append(following)
        elif char == "%":
            parts.append(tuple(current))
            current = []
        elif char == "_":
            current.append(None)
        else:
            current.append(char)
    parts.append(tuple(current))
    return Wildcard.of_parts(parts)


class _Build(Transformer[Token, Operand | Condition]):
    """LALR callbacks: each rule's node, built bottom-up, kinds and depth checked."""

    def __init__(self) -> None:
        super().__init__()
        #: The schema of the selector being compiled (set by :meth:`JmsClass.compile`;
        #: the parser calls back synchronously, so one compile never sees another's).
        self.types = TypeMap()

    # literals and identifiers

    def string(self, items: list[Token]) -> Operand:
        return _literal(Kind.STRING, _text(items[0]))

    def exact(self, items: list[Token]) -> Operand:
        value = _exact(items[0])
        if value > LONG_MAX + 1:
            raise incorrect(f"exact literal {str(items[0])[:32]} is out of the range of a long")
        return _literal(Kind.EXACT, value, overflow=value > LONG_MAX)

    def approx(self, items: list[Token]) -> Operand:
        value = float(str(items[0]).rstrip("fFdD"))
        if math.isinf(value):
            raise incorrect(f"approximate literal {str(items[0])[:32]} is out of range")
        return _literal(Kind.APPROX, value)

    def boolean(self, items: list[Token]) -> Operand:
        return _literal(Kind.BOOLEAN, items[0].type == "TRUE")

    def identifier(self, items: list[Token]) -> Operand:
        name = str(items[0])
        kind = self.types.kind_of(name)

        def read(asked: Kind) -> Reader:
            wanted = asked if kind is Kind.UNTYPED else kind
            return lambda view: view.values(name, wanted)

        return Operand(kind=kind, depth=1, read=read, identifier=name)

    # arithmetic

    def paren(self, items: list[Operand | Condition]) -> Operand | Condition:
        (inner,) = items
        depth = check_depth(inner.depth + 1)
        if isinstance(inner, Condition):
            return Condition(depth, inner.test, inner.access)
        return Operand(
            kind=inner.kind,
            depth=depth,
            read=inner.read,
            identifier=inner.identifier,
            literal=inner.literal,
            has_literal=inner.has_literal,
            overflow=inner.overflow,
        )

    def sign(self, items: list[Token | Operand | Condition]) -> Operand:
        symbol, raw = items
        operand = _numeric(raw) if isinstance(raw, Operand) else _operand_of(raw)  # type: ignore[arg-type]
        if operand.has_literal and isinstance(operand.literal, int | float):
            value = operand.literal if symbol == "+" else -operand.literal
            if not operand.overflow or symbol == "-":
                return _literal(
                    operand.kind, value, overflow=isinstance(value, int) and value > LONG_MAX
                )
        operand = _used(operand)
        reader = _number_reader(operand)
        negate = symbol == "-"

        def read(_kind: Kind) -> Reader:
            def values(view: MessageView) -> Values:
                found = reader(view)
                if not negate:
                    return found
                return tuple(
                    v if v is MISMATCH else (-v if isinstance(v, float) else wrap(-v))  # type: ignore[operator]
                    for v in found
                )

            return values

        return Operand(kind=operand.kind, depth=check_depth(operand.depth + 1), read=read)

    def arith(self, items: list[Token | Operand | Condition]) -> Operand:
        raw_left, symbol_token, raw_right = items
        left = _numeric(_operand_of(raw_left))  # type: ignore[arg-type]
        right = _numeric(_operand_of(raw_right))  # type: ignore[arg-type]
        symbol = str(symbol_token)
        kinds = {left.kind, right.kind}
        kind = Kind.APPROX if Kind.APPROX in kinds or kinds == {Kind.UNTYPED} else Kind.EXACT
        read_left, read_right = _number_reader(left), _number_reader(right)

        def read(_kind: Kind) -> Reader:
            def values(view: MessageView) -> Values:
                lefts = read_left(view)
                rights = read_right(view) if lefts else ()
                found: list[Value] = []
                for a in lefts:
                    for b in rights:
                        value = arithmetic(symbol, a, b)
                        if value is not None:
                            found.append(value)
                    if len(found) >= MAX_COMBINATIONS:
                        break
                return tuple(found)

            return values

        depth = check_depth(max(left.depth, right.depth) + 1)
        return Operand(kind=kind, depth=depth, read=read)

    # comparisons

    def compare(self, items: list[Token | Operand | Condition]) -> Condition:
        raw_left, op_token, raw_right = items
        left, right = _operand_of(raw_left), _operand_of(raw_right)  # type: ignore[arg-type]
        op = str(op_token)
        domain = _domain(left, right, op)
        if left.has_literal and not right.has_literal:
            left, right, op = right, left, _MIRROR[op]
        function = OPERATORS[op]
        compare = numeric_compare(function) if domain.numeric else plain_compare(function)
        test = _pairs(_reading(left, domain), _reading(right, domain), compare, right.has_literal)
        depth = check_depth(max(left.depth, right.depth) + 1)
        return Condition(depth, test, _access(left, op, right, domain))

    def _between(self, items: list[Token | Operand | Condition], negated: bool) -> Condition:
        values = [item for item in items if not isinstance(item, Token)]
        subject, low, high = (_operand_of(v) for v in values)
        domain_low, domain_high = _domain(subject, low, ">="), _domain(subject, high, "<=")
        ge = numeric_compare(operator.ge)
        le = numeric_compare(operator.le)
        read = _reading(subject, domain_low)
        read_low, read_high = _reading(low, domain_low), _reading(high, domain_high)

        def one(value: Value | None, low: Value | None, high: Value | None) -> Truth:
            """[NOT] BETWEEN of one instance (and one instance of each bound)."""
            first = None if value is None or low is None else ge(value, low)
            second = None if value is None or high is None else le(value, high)
            found = and_((first, second))
            return not_(found) if negated else found

        def test(view: MessageView) -> Truth:
            subjects = read(view)
            lows, highs = read_low(view), read_high(view)
            if len(subjects) == 1 and len(lows) == 1 and len(highs) == 1:
                return one(subjects[0], lows[0], highs[0])
            # Per instance, then OR-ed (the module docstring): NOT BETWEEN included.
            return any_(
                one(value, a, b)
                for value in subjects or (None,)
                for a in lows or (None,)
                for b in highs or (None,)
            )

        access: tuple[AccessPredicate, ...] = ()
        if not negated:
            access = _access(subject, ">=", low, domain_low) + _access(
                subject, "<=", high, domain_high
            )
        depth = check_depth(max(v.depth for v in (subject, low, high)) + 1)
        return Condition(depth, test, access)

    def between(self, items: list[Token | Operand | Condition]) -> Condition:
        return self._between(items, negated=False)

    def not_between(self, items: list[Token | Operand | Condition]) -> Condition:
        return self._between(items, negated=True)

    def in_list(self, items: list[Token]) -> frozenset[str]:
        return frozenset(_text(token) for token in items)

    def _in(self, items: list[object], negated: bool) -> Condition:
        subject = _string_identifier(items[0], "IN")
        choices = next(item for item in items if isinstance(item, frozenset))
        read = subject.read(Kind.STRING)

        def test(view: MessageView) -> Truth:
            values = read(view)
            if not values:
                return None
            # [NOT] IN per instance, OR-ed; an instance of another kind is neither.
            return any(
                value is not MISMATCH and (value in choices) is not negated for value in values
            )

        access: tuple[AccessPredicate, ...] = ()
        if not negated and subject.identifier is not None:
            kind = _index_kind(subject, Kind.STRING)
            access = (Equals(subject.identifier, kind, frozenset(choices)),)
        return Condition(2, test, access)

    def in_(self, items: list[object]) -> Condition:
        return self._in(items, negated=False)

    def not_in(self, items: list[object]) -> Condition:
        return self._in(items, negated=True)

    def _like(self, items: list[object], negated: bool) -> Condition:
        subject = _string_identifier(items[0], "LIKE")
        strings = [item for item in items if isinstance(item, Token) and item.type == "STRING"]
        escape = _text(strings[1]) if len(strings) > 1 else None
        if escape is not None and len(escape) != 1:
            raise incorrect("ESCAPE takes a single-character string literal")
        pattern = _pattern(_text(strings[0]), escape)
        read = subject.read(Kind.STRING)

        def test(view: MessageView) -> Truth:
            values = read(view)
            if not values:
                return None
            # [NOT] LIKE per instance, OR-ed; an instance of another kind is neither.
            return any(isinstance(v, str) and pattern.matches(v) is not negated for v in values)

        return Condition(2, test)

    def like(self, items: list[object]) -> Condition:
        return self._like(items, negated=False)

    def not_like(self, items: list[object]) -> Condition:
        return self._like(items, negated=True)

    def _null(self, items: list[object], negated: bool) -> Condition:
        subject = items[0]
        if not isinstance(subject, Operand) or subject.identifier is None:
            raise incorrect("IS [NOT] NULL applies to an identifier")
        name = subject.identifier
        return Condition(2, lambda view: view.present(name) is negated)

    def is_null(self, items: list[object]) -> Condition:
        return self._null(items, negated=False)

    def is_not_null(self, items: list[object]) -> Condition:
        return self._null(items, negated=True)

    # logic

    def not_(self, items: list[Token | Operand | Condition]) -> Condition:
        inner = _condition_of(items[-1])  # type: ignore[arg-type]
        test = inner.test
        return Condition(check_depth(inner.depth + 1), lambda view: not_(test(view)))

    def and_(self, items: list[Token | Operand | Condition]) -> Condition:
        parts = _flatten(items, "and")
        tests = tuple(part.test for part in parts)
        access = tuple(predicate for part in parts for predicate in part.access)
        depth = check_depth(max(part.depth for part in parts) + 1)
        if len(tests) == 2:
            first, second = tests

            def both(view: MessageView) -> Truth:
                value = first(view)
                if value is False:
                    return False
                other = second(view)
                if other is False:
                    return False
                return None if value is None or other is None else True

            return _Chain(depth, both, access, "and", parts)
        return _Chain(depth, lambda view: and_(t(view) for t in tests), access, "and", parts)

    def or_(self, items: list[Token | Operand | Condition]) -> Condition:
        parts = _flatten(items, "or")
        tests = tuple(part.test for part in parts)
        depth = check_depth(max(part.depth for part in parts) + 1)
        test: Test = lambda view: any_(t(view) for t in tests)  # noqa: E731
        return _Chain(depth, test, either(part.access for part in parts), "or", parts)


@dataclass(frozen=True, slots=True)
class _Chain(Condition):
    """An AND or OR node, kept flat so that a chain of 10,000 terms is one level."""

    operator: str = ""
    parts: tuple[Condition, ...] = ()


def _flatten(items: list[Token | Operand | Condition], name: str) -> tuple[Condition, ...]:
    """The operands of an AND or OR, a left operand that is the same operator's chain
    spliced in (``a AND b AND c`` is one node of three parts, not two nested nodes)."""
    parts: list[Condition] = []
    for item in items:
        if isinstance(item, Token):
            continue
        if isinstance(item, _Chain) and item.operator == name:
            parts.extend(item.parts)
        else:
            parts.append(_condition_of(item))
    return tuple(parts)


def _string_identifier(item: object, what: str) -> Operand:
    if not isinstance(item, Operand) or item.identifier is None:
        raise incorrect(f"{what} applies to an identifier")
    if not (item.kind.textual or item.kind is Kind.UNTYPED):
        raise incorrect(f"{what} applies to a string identifier, not {item.kind.value}")
    return item


# --------------------------------------------------------------------------- selector


@dataclass(frozen=True, slots=True)
class JmsSelector:
    """A compiled JMS selector: :meth:`matches` is TRUE-only (3.8.1.1: "a selector that
    evaluates to false or unknown does not match")."""

    text: str
    condition: Condition
    selector_class: str = CLASS_NAME

    def matches(self, view: MessageView) -> bool:
        return self.condition.test(view) is True

    def truth(self, view: MessageView) -> Truth:
        """The three-valued result (tests and diagnostics)."""
        return self.condition.test(view)

    def access_predicates(self) -> tuple[AccessPredicate, ...]:
        return self.condition.access


class JmsClass:
    """The selector class registration of section 7.3."""

    name: Final = CLASS_NAME

    def __init__(self) -> None:
        self._parser = BottomUpParser(GRAMMAR, _Build(), lexer="basic", what="JMS")

    def compile(self, text: str, types: TypeMap) -> JmsSelector:
        """Parse and check ``text``; 567 (:class:`ApexError`) when it is incorrect."""
        built: Operand | Condition = self._parser.parse(text, types)
        return JmsSelector(text=text, condition=_condition_of(built))


__all__ = ["CLASS_NAME", "JmsClass", "JmsSelector"]
