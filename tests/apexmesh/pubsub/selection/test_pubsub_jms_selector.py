"""Conformance of the "JMS" selector class (draft-wyman-apex-pubsub-00 section 7.3).

Each case is (selector, expected, clause): the expected three-valued result is read off
the cited text of Jakarta Messaging 3.8.1 ("message selector", the JMS 1.1 section of the
same number; /work/shared/specs/jms-selector-syntax.txt): T, F or U (UNKNOWN). Clauses
are cited as "lit" (literals), "ident" (identifiers), "cmp" (comparison operators),
"arith" (arithmetic operators), "between", "in", "like", "null" (IS [NOT] NULL),
"3-4"/"3-5"/"3-6" (the AND/OR/NOT tables of 3.8.1.2), "expr" (expressions), "draft 7.3"
(every instance compared; a single matching instance matches) and "reading" for the
choices docs/pubsub.md writes down where the draft adapts JMS (XML names as
identifiers, division by zero). A selector matches only when it is TRUE ("a selector
that evaluates to false or unknown does not match").
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.selection import types
from apexmesh.pubsub.selection.jms import JmsClass, JmsSelector
from apexmesh.pubsub.selection.types import Kind, MessageView, TypeMap
from tests.support.polling import scaled

pytestmark = pytest.mark.unit

T, F, U = True, False, None
JMS = JmsClass()
OPEN = TypeMap()

#: The message of the untyped cases (no schema: identifiers are read by what they meet).
MESSAGE = MessageView.of_values(
    {
        "a": ["5"],
        "b": ["2"],
        "f": ["2.5"],
        "s": ["abc"],
        "q": ["ab'c"],
        "flag": ["true"],
        "no": ["false"],
        "country": ["UK"],
        "peru": ["Peru"],
        "phone": ["123"],
        "phone2": ["12993"],
        "phone3": ["1234"],
        "word": ["lose"],
        "word2": ["loose"],
        "underscored": ["_foo"],
        "plain": ["bar"],
        "pct": ["100%"],
        "pct2": ["1000"],
        "multi": ["1", "7"],
        "big": ["9007199254740993"],
        "age15": ["15"],
        "age19": ["19"],
        "age14": ["14"],
        "age20": ["20"],
        "age17": ["17"],
        "empty": [""],
        "JMSType": ["car"],
        "color": ["blue"],
        "weight": ["3000"],
        "symbol": ["XMPL"],
        "net-change-pct": ["10.0"],
        "long": ["a" * 5000],
    }
)

CASES: list[tuple[str, bool | None, str]] = [
    # literals
    ("s = 'abc'", T, "lit: a string literal is enclosed in single quotes"),
    ("q = 'ab''c'", T, "lit: an included single quote is a doubled single quote"),
    ("a = 5", T, "lit: exact numeric literal"),
    ("a = 5.0", T, "lit+cmp: exact and approximate compare by numeric promotion"),
    ("a = 5.", T, "lit: approximate literal with a decimal, such as 7."),
    ("a = 50E-1", T, "lit: approximate literal in scientific notation"),
    ("a = .5E1", T, "lit: Java floating-point literal syntax"),
    ("a = +5", T, "lit: +62 is an exact literal"),
    ("a = -5", F, "lit: -957 is an exact literal"),
    ("a = 0x5", T, "lit: exact literals use the Java integer literal syntax (hex)"),
    ("a = 05", T, "lit: Java integer literal syntax (octal)"),
    ("a = 010", F, "lit: 010 is octal 8"),
    ("a = 5L", T, "lit: Java long literal suffix"),
    ("f = 2.5", T, "lit: approximate literal"),
    ("f = 25E-1", T, "lit: approximate literal in scientific notation"),
    ("f = 2.5d", T, "lit: Java floating-point literal with suffix"),
    ("flag = TRUE", T, "lit: the boolean literals TRUE and FALSE"),
    ("flag = FALSE", F, "lit: boolean literal"),
    ("flag = true", T, "expr: literals and operator names are case insensitive"),
    ("no = FALSE", T, "lit: boolean literal"),
    ("TRUE", T, "expr: conditional expressions include boolean literals"),
    ("FALSE", F, "expr: boolean literal as a selector"),
    ("NOT FALSE", T, "3-6: NOT F is T"),
    # identifiers
    ("A = 5", U, "ident: identifiers are case sensitive (A is not a); NULL compares unknown"),
    ("missing = 5", U, "ident: a property that does not exist is NULL; 3.8.1.2: unknown"),
    ("missing <> 5", U, "3.8.1.2: comparison with an unknown value yields unknown"),
    ("missing > 1", U, "3.8.1.2: comparison with an unknown value yields unknown"),
    ("net-change-pct > 5.0", T, "draft 7.3: element names are identifiers (section 6.3)"),
    ("flag", T, "expr: identifiers with boolean values are conditional expressions"),
    ("no", F, "expr: identifier with a boolean value"),
    ("NOT flag", F, "3-6 on a boolean identifier"),
    ("missing", U, "expr: a NULL boolean identifier is unknown"),
    # comparison operators
    ("a > 4", T, "cmp: >"),
    ("a > 5", F, "cmp: >"),
    ("a >= 5", T, "cmp: >="),
    ("a >= 6", F, "cmp: >="),
    ("a < 6", T, "cmp: <"),
    ("a < 5", F, "cmp: <"),
    ("a <= 5", T, "cmp: <="),
    ("a <= 4", F, "cmp: <="),
    ("a <> 5", F, "cmp: <> (not equal)"),
    ("a <> 4", T, "cmp: <> (not equal)"),
    ("f < a", T, "cmp: approximate and exact compare by numeric promotion"),
    ("a = f", F, "cmp: numeric promotion"),
    ("4 < a", T, "cmp: a literal on the left"),
    ("s = 'ABC'", F, "cmp: strings are equal iff they contain the same characters"),
    ("s <> 'abd'", T, "cmp: string comparison with <>"),
    ("s = 5", F, "cmp: comparison of non-like type values is false"),
    ("s > 1", F, "cmp: comparison of non-like type values is false"),
    ("flag <> FALSE", T, "cmp: boolean comparison with <>"),
    ("TRUE = TRUE", T, "cmp: boolean comparison with ="),
    ("TRUE <> FALSE", T, "cmp: boolean comparison with <>"),
    ("'abc' = 'abc'", T, "cmp: string literals compare with ="),
    ("s = s", T, "cmp: two identifiers"),
    ("big = 9007199254740993", T, "cmp: exact values compare exactly (Java long)"),
    ("big = 9007199254740992", F, "cmp: exact values compare exactly"),
    ("big = 9007199254740992.0", T, "cmp: Java numeric promotion of long to double"),
    # arithmetic
    ("a + b = 7", T, "arith: + (addition)"),
    ("a - b = 3", T, "arith: - (subtraction)"),
    ("a * b = 10", T, "arith: * (multiplication)"),
    ("a / b = 2", T, "arith: Java numeric promotion: long / long is integer division"),
    ("a / b = 2.5", F, "arith: integer division truncates"),
    ("a / 2.0 = 2.5", T, "arith: long / double is a double division"),
    ("f * 2 = 5", T, "arith: double * long"),
    ("-a = -5", T, "arith: unary -"),
    ("+a = 5", T, "arith: unary +"),
    ("- -a = 5", T, "arith: unary operators nest"),
    ("a + b * 2 = 9", T, "arith: * and / before + and -"),
    ("(a + b) * 2 = 14", T, "expr: standard bracketing orders evaluation"),
    ("a - b - 1 = 2", T, "expr: left to right within a precedence level"),
    ("a / b / 2 = 1", T, "expr: left to right within a precedence level"),
    ("-b * 3 = -6", T, "arith: unary minus binds tighter than *"),
    ("missing + 1 = 2", U, "3.8.1.2: arithmetic with an unknown value yields unknown"),
    ("a + missing > 0", U, "3.8.1.2: arithmetic with an unknown value yields unknown"),
    ("a / 0 = 1", U, "reading: an exact division by zero (Java throws) is unknown"),
    ("f / 0 > 1000", T, "arith: Java double division by zero is +Infinity"),
    ("9223372036854775807 + 1 < 0", T, "arith: Java long arithmetic wraps"),
    ("-9223372036854775808 = -9223372036854775807 - 1", T, "lit: the range of Java long"),
    ("s + 1 = 1", F, "cmp: arithmetic on a string is a non-like comparison, false"),
    # BETWEEN
    ("a BETWEEN 1 AND 10", T, "between"),
    ("a BETWEEN 5 AND 5", T, "between: age >= 15 AND age <= 19, bounds included"),
    ("a BETWEEN 6 AND 10", F, "between"),
    ("a BETWEEN 10 AND 1", F, "between: >= 10 AND <= 1"),
    ("a NOT BETWEEN 6 AND 10", T, "between: NOT BETWEEN is a < 6 OR a > 10"),
    ("a NOT BETWEEN 5 AND 10", F, "between: NOT BETWEEN"),
    ("age15 BETWEEN 15 AND 19", T, "between: the spec's example, lower bound"),
    ("age19 BETWEEN 15 AND 19", T, "between: the spec's example, upper bound"),
    ("age14 BETWEEN 15 AND 19", F, "between: the spec's example"),
    ("age20 BETWEEN 15 AND 19", F, "between: the spec's example"),
    ("age14 NOT BETWEEN 15 AND 19", T, "between: age < 15 OR age > 19"),
    ("age17 NOT BETWEEN 15 AND 19", F, "between: age < 15 OR age > 19"),
    ("missing BETWEEN 1 AND 2", U, "3.8.1.2: comparison with unknown"),
    ("missing NOT BETWEEN 1 AND 2", U, "3.8.1.2: NOT U is U"),
    ("a BETWEEN missing AND 10", U, "between + 3-4: U AND T is U"),
    ("a BETWEEN missing AND 4", F, "between + 3-4: U AND F is F"),
    ("a NOT BETWEEN missing AND 4", T, "between + 3-5: U OR T (a > 4) is T"),
    ("f BETWEEN 2 AND 3", T, "between with numeric promotion"),
    ("a BETWEEN 4.5 AND 5.5", T, "between with approximate bounds"),
    ("a BETWEEN b AND b + 3", T, "between: bounds are arithmetic expressions"),
    # IN
    ("country IN ('UK', 'US', 'France')", T, "in: true for 'UK'"),
    ("peru IN ('UK', 'US', 'France')", F, "in: false for 'Peru'"),
    ("country NOT IN ('UK', 'US', 'France')", F, "in: NOT IN false for 'UK'"),
    ("peru NOT IN ('UK', 'US', 'France')", T, "in: NOT IN true for 'Peru'"),
    ("missing IN ('UK')", U, "in: NULL identifier makes IN unknown"),
    ("missing NOT IN ('UK')", U, "in: NULL identifier makes NOT IN unknown"),
    ("country IN ('uk')", F, "in: equivalent to Country = 'uk', case-sensitive"),
    ("country IN ('UK')", T, "in: one literal"),
    ("country in ('UK')", T, "expr: operator names are case insensitive"),
    ("a IN ('5')", T, "in: an untyped identifier read as a string"),
    ("NOT country IN ('US')", T, "in + 3-6"),
    # LIKE
    ("phone LIKE '12%3'", T, "like: true for '123'"),
    ("phone2 LIKE '12%3'", T, "like: true for '12993'"),
    ("phone3 LIKE '12%3'", F, "like: false for '1234'"),
    ("word LIKE 'l_se'", T, "like: true for 'lose'"),
    ("word2 LIKE 'l_se'", F, "like: false for 'loose'"),
    ("underscored LIKE '\\_%' ESCAPE '\\'", T, "like: true for '_foo'"),
    ("plain LIKE '\\_%' ESCAPE '\\'", F, "like: false for 'bar'"),
    ("phone NOT LIKE '12%3'", F, "like: NOT LIKE false for '123'"),
    ("phone2 NOT LIKE '12%3'", F, "like: NOT LIKE false for '12993'"),
    ("phone3 NOT LIKE '12%3'", T, "like: NOT LIKE true for '1234'"),
    ("missing LIKE 'a%'", U, "like: NULL identifier makes LIKE unknown"),
    ("missing NOT LIKE 'a%'", U, "like: NULL identifier makes NOT LIKE unknown"),
    ("s LIKE 'abc'", T, "like: all other characters stand for themselves"),
    ("s LIKE 'ab'", F, "like: the whole value must match"),
    ("s LIKE '%'", T, "like: % is any sequence"),
    ("empty LIKE '%'", T, "like: % includes the empty sequence"),
    ("s LIKE '___'", T, "like: _ is any single character"),
    ("s LIKE '____'", F, "like: _ is exactly one character"),
    ("s LIKE '%b%'", T, "like: %"),
    ("s LIKE 'a%c'", T, "like: %"),
    ("s LIKE 'a%%c'", T, "like: two % are any sequence"),
    ("s LIKE 'A%'", F, "like: characters stand for themselves (case)"),
    ("pct LIKE '100!%' ESCAPE '!'", T, "like: the escape character escapes %"),
    ("pct2 LIKE '100!%' ESCAPE '!'", F, "like: an escaped % is literal"),
    ("pct LIKE '%!%' ESCAPE '!'", T, "like: an escaped % at the end"),
    ("q LIKE 'ab''%'", T, "like + lit: a doubled quote in the pattern"),
    ("s like 'a%' escape '!'", T, "expr: LIKE and ESCAPE are case insensitive"),
    ("long LIKE '%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%b'", F, "like (no backtracking)"),
    ("long LIKE '%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a'", T, "like"),
    # IS [NOT] NULL
    ("missing IS NULL", T, "null: IS NULL of a missing property"),
    ("a IS NULL", F, "null: IS NULL of a present property"),
    ("missing IS NOT NULL", F, "null: IS NOT NULL of a missing property"),
    ("a IS NOT NULL", T, "null: IS NOT NULL of a present property"),
    ("empty IS NULL", F, "reading: an element present with empty text is not NULL"),
    ("missing is null", T, "expr: IS NULL is case insensitive"),
    ("NOT missing IS NULL", F, "null + 3-6"),
    # AND (table 3-4)
    ("a = 5 AND a = 5", T, "3-4: T AND T"),
    ("a = 5 AND a = 4", F, "3-4: T AND F"),
    ("a = 5 AND missing = 1", U, "3-4: T AND U"),
    ("a = 4 AND a = 5", F, "3-4: F AND T"),
    ("a = 4 AND a = 4", F, "3-4: F AND F"),
    ("a = 4 AND missing = 1", F, "3-4: F AND U"),
    ("missing = 1 AND a = 5", U, "3-4: U AND T"),
    ("missing = 1 AND a = 4", F, "3-4: U AND F"),
    ("missing = 1 AND missing = 2", U, "3-4: U AND U"),
    # OR (table 3-5)
    ("a = 5 OR a = 5", T, "3-5: T OR T"),
    ("a = 5 OR a = 4", T, "3-5: T OR F"),
    ("a = 5 OR missing = 1", T, "3-5: T OR U"),
    ("a = 4 OR a = 5", T, "3-5: F OR T"),
    ("a = 4 OR a = 4", F, "3-5: F OR F"),
    ("a = 4 OR missing = 1", U, "3-5: F OR U"),
    ("missing = 1 OR a = 5", T, "3-5: U OR T"),
    ("missing = 1 OR a = 4", U, "3-5: U OR F"),
    ("missing = 1 OR missing = 2", U, "3-5: U OR U"),
    # NOT (table 3-6)
    ("NOT a = 5", F, "3-6: NOT T"),
    ("NOT a = 4", T, "3-6: NOT F"),
    ("NOT missing = 1", U, "3-6: NOT U"),
    # precedence
    ("NOT a = 4 AND a = 5", T, "expr: NOT before AND"),
    ("a = 4 AND a = 5 OR a = 5", T, "expr: AND before OR"),
    ("a = 5 OR a = 4 AND a = 4", T, "expr: AND before OR"),
    ("NOT (a = 5 OR a = 4)", F, "expr: brackets"),
    ("a = 4 OR a = 4 AND missing = 1", F, "expr: F OR (F AND U)"),
    ("(a = 5 OR missing = 1) AND NOT (missing = 1)", U, "3-4/3-5/3-6 combined"),
    ("a = 5 AND b = 2 AND s = 'abc' AND f = 2.5", T, "expr: a chain of AND"),
    ("a = 1 OR a = 2 OR a = 3 OR a = 5", T, "expr: a chain of OR"),
    # multi-valued identifiers (draft 7.3)
    ("multi = 7", T, "draft 7.3: a single matching instance matches"),
    ("multi = 1", T, "draft 7.3: every instance is compared"),
    ("multi = 3", F, "draft 7.3: no instance matches"),
    ("multi > 5", T, "draft 7.3"),
    ("multi < 0", F, "draft 7.3"),
    ("NOT multi = 7", F, "draft 7.3 + 3-6: NOT (some instance = 7)"),
    ("multi BETWEEN 2 AND 6", F, "draft 7.3 + between: no instance in the range"),
    ("multi BETWEEN 6 AND 8", T, "draft 7.3 + between"),
    ("multi IN ('1')", T, "draft 7.3 + in"),
    ("multi + 1 = 8", T, "draft 7.3 + arith"),
    # the examples
    ("JMSType = 'car' AND color = 'blue' AND weight > 2500", T, "expr: the spec's example"),
    (
        "symbol IN ('XMPL', 'TEST', 'SMPL') AND (net-change-pct > 5.0 OR net-change-pct < -5.0)",
        T,
        "draft 5.8: the subscribe example's selector",
    ),
    (
        "symbol='XMPL' AND\n (net-change-pct > 5.0 OR net-change-pct < -5.0)",
        T,
        "draft 5.6: the JMS example (whitespace is Java whitespace)",
    ),
    ("symbol = 'TEST'", F, "draft 5.6"),
]


@pytest.mark.parametrize(("text", "expected", "clause"), CASES, ids=[c[0][:60] for c in CASES])
def test_jms_conformance(text: str, expected: bool | None, clause: str) -> None:
    selector = JMS.compile(text, OPEN)
    assert selector.truth(MESSAGE) is expected, clause
    assert selector.matches(MESSAGE) is (expected is True), "only TRUE selects"


# ----------------------------------------------------------------------- typed

TYPES = TypeMap(
    kinds={
        "qty": Kind.EXACT,
        "price": Kind.APPROX,
        "sym": Kind.STRING,
        "ok": Kind.BOOLEAN,
        "when": Kind.DATETIME,
        "bad": Kind.EXACT,
    },
    open=False,
)
TYPED = MessageView.of_values(
    {
        "qty": ["5"],
        "price": ["2.50"],
        "sym": ["XMPL"],
        "ok": ["true"],
        "when": ["2002-03-15T12:15:00-08:00"],
        "bad": ["abc"],
        "publisher": ["quote-service@example.com"],
    }
)
WHEN_MS = int(datetime(2002, 3, 15, 20, 15, tzinfo=UTC).timestamp() * 1000)

TYPED_CASES: list[tuple[str, bool | None, str]] = [
    ("qty = 5", T, "xsd:integer is an exact numeric"),
    ("qty = 5.0", T, "cmp: numeric promotion"),
    ("price = 2.5", T, "xsd:decimal is an approximate numeric"),
    ("price < qty", T, "cmp: numeric promotion"),
    ("sym = 'XMPL'", T, "xsd:string"),
    ("sym IN ('XMPL', 'TEST')", T, "in on a string identifier"),
    ("sym LIKE 'X%'", T, "like on a string identifier"),
    ("ok", T, "xsd:boolean identifier as a condition"),
    ("NOT ok", F, "3-6"),
    ("ok = TRUE", T, "cmp: boolean ="),
    ("when > '2002-03-15T20:00:00Z'", T, "reading: dateTime against an RFC 3339 literal"),
    ("when = '2002-03-15T20:15:00Z'", T, "reading: the same instant in another offset"),
    (f"when = {WHEN_MS}", T, "3.8.1.3: date values are long milliseconds"),
    (f"when < {WHEN_MS}", F, "3.8.1.3"),
    ("bad = 5", F, "cmp: an instance that is not of its type compares false"),
    ("bad IS NULL", F, "null: the element is present"),
    ("publisher = 'quote-service@example.com'", T, "reading: headers are always selectable"),
]


@pytest.mark.parametrize(
    ("text", "expected", "clause"), TYPED_CASES, ids=[c[0][:60] for c in TYPED_CASES]
)
def test_jms_typed_conformance(text: str, expected: bool | None, clause: str) -> None:
    assert JMS.compile(text, TYPES).truth(TYPED) is expected, clause


# ----------------------------------------------------------------------- 567

INCORRECT: list[tuple[str, TypeMap, str]] = [
    ("a =", OPEN, "syntax: missing operand"),
    ("a = 'abc", OPEN, "syntax: unterminated string literal"),
    ("(a = 5", OPEN, "syntax: unbalanced bracket"),
    ("a = 5)", OPEN, "syntax: unbalanced bracket"),
    ("a == 5", OPEN, "syntax: == is no operator"),
    ("a != 5", OPEN, "syntax: != is no operator (<> is)"),
    ("a = 5 AND", OPEN, "syntax: dangling AND"),
    ("AND a = 5", OPEN, "syntax: leading AND"),
    ("NOT", OPEN, "syntax"),
    ("a BETWEEN 1", OPEN, "syntax: BETWEEN needs AND"),
    ("a IN ()", OPEN, "syntax: IN needs a string literal"),
    ("a IN 'x'", OPEN, "syntax: IN needs brackets"),
    ("country IN (1, 2)", OPEN, "in: string literals only"),
    ("'UK' IN ('UK')", OPEN, "in: identifier IN (...)"),
    ("a LIKE 5", OPEN, "like: the pattern is a string literal"),
    ("a LIKE s", OPEN, "like: the pattern is a string literal"),
    ("'a' LIKE 'a'", OPEN, "like: identifier LIKE pattern"),
    ("s LIKE 'a!bc' ESCAPE '!'", OPEN, "like: escape only before _ or %"),
    ("s LIKE 'abc!' ESCAPE '!'", OPEN, "like: escape at the end"),
    ("s LIKE 'abc' ESCAPE '!!'", OPEN, "like: the escape is a single-character literal"),
    ("a IS 5", OPEN, "syntax: IS NULL or IS NOT NULL"),
    ("5 IS NULL", OPEN, "null: identifier IS NULL"),
    ("NULL = 1", OPEN, "ident: identifiers cannot be NULL"),
    ("TRUE = 1", OPEN, "cmp: only like types compare"),
    ("'abc' > 'abd'", OPEN, "cmp: string comparison is restricted to = and <>"),
    ("TRUE > FALSE", OPEN, "cmp: boolean comparison is restricted to = and <>"),
    ("a = 99999999999999999999", OPEN, "lit: numbers in the range of Java long"),
    ("a = 9223372036854775808", OPEN, "lit: Long.MAX_VALUE + 1"),
    ("a = 1e400", OPEN, "lit: numbers in the range of Java double"),
    ("a = 08", OPEN, "lit: 08 is no Java integer literal"),
    ("a = 5 b = 6", OPEN, "syntax: two expressions"),
    ("TRUE AND 5", OPEN, "expr: 5 is not a conditional expression"),
    ("a + 1", OPEN, "expr: a selector is a conditional expression"),
    ("'abc'", OPEN, "expr: a string is not a condition"),
    ("5", OPEN, "expr: a number is not a condition"),
    ("a + 's' = 1", OPEN, "arith: arithmetic on a string literal"),
    ("a = 5 /* comment */", OPEN, "3.8.1.3: SQL comments are not supported"),
    ("a = 5;", OPEN, "syntax: stray character"),
    ("sym > 'A'", TYPES, "cmp: string comparison is restricted to = and <>"),
    ("qty = 'x'", TYPES, "cmp: only like types compare (schema types known)"),
    ("sym + 1 > 0", TYPES, "arith: arithmetic on a string"),
    ("ok > FALSE", TYPES, "cmp: boolean comparison is restricted to = and <>"),
    ("qty LIKE '5'", TYPES, "like: identifier with a String value"),
    ("qty IN ('5')", TYPES, "in: identifier with a String value"),
    ("qty", TYPES, "expr: an exact identifier is not a condition"),
    ("unknown = 1", TYPES, "draft 5.8.1: an identifier the selector schema does not allow"),
    ("when > 'yesterday'", TYPES, "reading: a dateTime literal must be RFC 3339"),
]


@pytest.mark.parametrize(("text", "types", "why"), INCORRECT, ids=[c[0][:60] for c in INCORRECT])
def test_incorrect_selectors_are_567(text: str, types: TypeMap, why: str) -> None:
    with pytest.raises(ApexError) as caught:
        JMS.compile(text, types)
    assert caught.value.code == ApexReplyCode.INCORRECT_SELECTOR, why


def test_there_are_at_least_150_cases() -> None:
    assert len(CASES) + len(TYPED_CASES) >= 150


# ----------------------------------------------------------------------- bounds


def _timed_567(text: str) -> float:
    start = time.perf_counter()
    with pytest.raises(ApexError) as caught:
        JMS.compile(text, OPEN)
    assert caught.value.code == ApexReplyCode.INCORRECT_SELECTOR
    return time.perf_counter() - start


def test_a_selector_of_one_megabyte_is_567_at_once() -> None:
    assert _timed_567("a = 1 AND " * 100_000 + "a = 1") < 1.0


def test_ten_thousand_nested_parentheses_are_567_without_recursion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = "(" * 10_000 + "a = 1" + ")" * 10_000
    _timed_567(text)
    # With the length limit out of the way, the depth limit refuses it: the parser builds
    # bottom-up without recursion and stops at MAX_SELECTOR_DEPTH.
    monkeypatch.setattr(types, "MAX_SELECTOR_CHARS", 1 << 20)
    assert _timed_567(text) < 2.0


def test_deep_arithmetic_is_567_and_long_chains_are_flat() -> None:
    _timed_567("a " + "+ a " * 1000 + "> 0")
    chain = JMS.compile(" AND ".join(["a = 5"] * 1500), OPEN)
    assert chain.matches(MESSAGE)
    assert chain.condition.depth <= 3


def test_catastrophic_like_pattern_is_linear() -> None:
    pattern = "%a" * 3000 + "%b"
    selector = JMS.compile(f"x LIKE '{pattern}'", OPEN)
    view = MessageView.of_values({"x": ["a" * 200_000]})
    start = time.perf_counter()
    assert not selector.matches(view)
    assert time.perf_counter() - start < scaled(0.5)


def test_compiled_selector_keeps_its_text_and_class() -> None:
    selector = JMS.compile("a = 5", OPEN)
    assert isinstance(selector, JmsSelector)
    assert (selector.text, selector.selector_class) == ("a = 5", "JMS")
