"""Conformance of the "RFC-2254" selector class (draft-wyman-apex-pubsub-00 section 7.2).

Each case is (filter, expected, clause), the expected result read off the cited text:
"2254 s4" (RFC 2254 section 4: the grammar, the escapes \\2a \\28 \\29 \\5c \\00 of
hexadecimal digits whose case is not significant, "attr=*" only a presence filter),
"2254 s5" (its examples), "4515 s3" (RFC 4515 section 3: escapes are octets of UTF-8),
"draft 7.2" (identifiers are element or attribute names; every instance compared, a
single matching instance matches), "draft 5.6" (the draft's example), and "reading" for
the choices written down in apexmesh/pubsub/selection/ldap.py and docs/pubsub.md
(values compared by schema type, case-exact strings, two-valued logic with an absent
identifier false).
"""

from __future__ import annotations

import time

import pytest

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.selection.ldap import LdapClass
from apexmesh.pubsub.selection.types import Kind, MessageView, TypeMap
from tests.support.polling import scaled

pytestmark = pytest.mark.unit

T, F = True, False
LDAP = LdapClass()
OPEN = TypeMap()

MESSAGE = MessageView.of_values(
    {
        "cn": ["Babs Jensen", "Barbara Jensen"],
        "sn": ["Jensen"],
        "objectClass": ["Person"],
        "o": ["University of Michigan"],
        "star": ["a*b"],
        "paren": ["Parens R Us (for all your parenthetical needs)"],
        "filename": ["C:\\MyFile"],
        "surname": ["Lu\u010di\u0107"],
        "age": ["42"],
        "price": ["10.5"],
        "empty": [""],
        "symbol": ["XMPL"],
        "net-change-pct": ["10.0"],
        "equity-quote": [],
    }
)

CASES: list[tuple[str, bool, str]] = [
    # equality and the RFC's examples
    ("(cn=Babs Jensen)", T, "2254 s5: (cn=Babs Jensen)"),
    ("(!(cn=Tim Howes))", T, "2254 s5: (!(cn=Tim Howes))"),
    ("(&(objectClass=Person)(|(sn=Jensen)(cn=Babs J*)))", T, "2254 s5"),
    ("(cn=Barbara Jensen)", T, "draft 7.2: every instance is compared"),
    ("(cn=Tim Howes)", F, "2254 s4: equality"),
    ("(sn=Jensen)", T, "2254 s4: equality"),
    ("(sn=jensen)", F, "reading: string equality is case-exact (XML is)"),
    ("(sn= Jensen )", T, "reading: outer spaces of a value are insignificant"),
    ("(cn=Babs)", F, "2254 s4: equality is not a substring match"),
    ("(age=42)", T, "reading: untyped numbers compare as numbers"),
    ("(age=42.0)", T, "reading: untyped numbers compare as numbers"),
    ("(price=10.50)", T, "reading: untyped numbers compare as numbers"),
    # substrings
    ("(o=Univ*of*Mich*)", T, "2254 s5: (o=univ*of*mich*), in the value's case"),
    ("(o=univ*of*mich*)", F, "reading: substrings are case-exact"),
    ("(cn=Babs*)", T, "2254 s4: initial"),
    ("(cn=*Jensen)", T, "2254 s4: final"),
    ("(cn=*bara*)", T, "2254 s4: any"),
    ("(cn=B*s*n)", T, "2254 s4: initial any final"),
    ("(cn=*x*)", F, "2254 s4: any"),
    ("(cn=*abs J*)", T, "2254 s4: any holding a space"),
    ("(cn=B*B)", F, "2254 s4: final must end the value"),
    ("(cn=Babs Jensen*)", T, "2254 s4: an empty final"),
    ("(cn=**Jensen)", T, "2254 s4: any = * *(value *)"),
    ("(o=*)", T, "2254 s4: attr=* is a presence filter only"),
    # escapes
    ("(star=a\\2ab)", T, "2254 s4: \\2a is a literal *"),
    ("(star=*\\2a*)", T, "2254 s4: (cn=*\\2a*), a value holding *"),
    ("(star=*\\2A*)", T, "2254 s4: the case of the hex digits is not significant"),
    ("(cn=*\\2a*)", F, "2254 s4: no value of cn holds *"),
    ("(paren=Parens R Us \\28for all your parenthetical needs\\29)", T, "2254 s5"),
    ("(paren=*\\28for*)", T, "2254 s4: \\28 in a substring"),
    ("(paren=*needs\\29)", T, "2254 s4: \\29 in a final"),
    ("(filename=C:\\5cMyFile)", T, "2254 s5: (filename=C:\\5cMyFile)"),
    ("(filename=C:\\5CMyFile)", T, "2254 s4: hex digit case"),
    ("(surname=Lu\\c4\\8di\\c4\\87)", T, "2254 s5 / 4515 s3: UTF-8 octets"),
    ("(cn=Babs\\20Jensen)", T, "2254 s4: other characters may be escaped"),
    ("(bin=\\00\\00\\00\\04)", F, "2254 s5: NUL escapes parse; no such value"),
    ("(star=a\\2a*)", T, "2254 s4: an escaped * then a wildcard"),
    # presence
    ("(cn=*)", T, "2254 s4: present"),
    ("(missing=*)", F, "2254 s4: present"),
    ("(!(missing=*))", T, "2254 s4: not present"),
    ("(empty=*)", T, "draft 7.2: an element with empty text is present"),
    ("(equity-quote=*)", T, "draft 7.2: an element with children is present"),
    # ordering
    ("(age>=42)", T, "2254 s4: greater (>=)"),
    ("(age>=43)", F, "2254 s4: greater"),
    ("(age<=42)", T, "2254 s4: less (<=)"),
    ("(age<=41)", F, "2254 s4: less"),
    ("(age>=5)", T, "reading: numbers compare numerically, not as text"),
    ("(price>=10.5)", T, "2254 s4: greater"),
    ("(price<=10.49)", F, "2254 s4: less"),
    ("(sn>=J)", T, "reading: strings compare by code point"),
    ("(sn<=A)", F, "reading: strings compare by code point"),
    ("(age > 41)", T, "draft 5.6: '>' (strict) with spaces"),
    ("(age>42)", F, "draft 5.6: '>' is strict"),
    ("(age<43)", T, "draft 5.6: '<' is strict"),
    # approx
    ("(cn~=babs   jensen)", T, "reading: ~= ignores case and runs of spaces"),
    ("(sn~=JENSEN)", T, "reading: ~= ignores case"),
    ("(sn~=Jansen)", F, "reading: ~= is not fuzzy spelling"),
    ("(age~=42.0)", T, "reading: ~= on numbers is numeric equality"),
    # boolean combinations
    ("(&(sn=Jensen)(age>=40))", T, "2254 s4: and"),
    ("(&(sn=Jensen)(age>=50))", F, "2254 s4: and"),
    ("(|(sn=Smith)(age>=40))", T, "2254 s4: or"),
    ("(|(sn=Smith)(age>=50))", F, "2254 s4: or"),
    ("(!(sn=Jensen))", F, "2254 s4: not"),
    ("(!(!(sn=Jensen)))", T, "2254 s4: not not"),
    ("(&(sn=Jensen))", T, "2254 s4: and of one filter (1*filter)"),
    ("(|(sn=Smith))", F, "2254 s4: or of one filter"),
    ("(&(|(sn=Smith)(sn=Jensen))(!(age<=10)))", T, "2254 s4: nesting"),
    ("(& (sn=Jensen) (age>=40) )", T, "reading: spaces between filters"),
    # absent identifiers
    ("(missing=1)", F, "reading: an absent identifier's item is false"),
    ("(!(missing=1))", T, "reading: two-valued logic"),
    ("(missing>=1)", F, "reading: an absent identifier's item is false"),
    ("(missing=a*)", F, "reading: an absent identifier's item is false"),
    # the draft's example (5.6), as printed (no outer parentheses, quotes, > and <)
    (
        "&(symbol='XMPL')\n (|(net-change-pct > 5.0)(net-change-pct < -5.0))",
        T,
        "draft 5.6: the RFC-2254 example",
    ),
    ("(&(symbol='TEST')(net-change-pct>=5))", F, "draft 5.6"),
    ("sn=Jensen", T, "draft 5.6: a top level without parentheses"),
]


@pytest.mark.parametrize(("text", "expected", "clause"), CASES, ids=[c[0][:60] for c in CASES])
def test_rfc2254_conformance(text: str, expected: bool, clause: str) -> None:
    assert LDAP.compile(text, OPEN).matches(MESSAGE) is expected, clause


def test_the_draft_example_follows_the_move() -> None:
    selector = LDAP.compile(
        "&(symbol='XMPL')(|(net-change-pct > 5.0)(net-change-pct < -5.0))", OPEN
    )
    for pct, expected in (("3.0", F), ("-7", T), ("5.0", F), ("5.01", T)):
        view = MessageView.of_values({"symbol": ["XMPL"], "net-change-pct": [pct]})
        assert selector.matches(view) is expected, pct


TYPES = TypeMap(
    kinds={
        "age": Kind.EXACT,
        "price": Kind.APPROX,
        "sn": Kind.STRING,
        "flag": Kind.BOOLEAN,
        "when": Kind.DATETIME,
    },
    open=False,
)
TYPED = MessageView.of_values(
    {
        "age": ["42"],
        "price": ["10.5"],
        "sn": ["007"],
        "flag": ["true"],
        "when": ["2002-03-15T12:15:00-08:00"],
    }
)
TYPED_CASES: list[tuple[str, bool, str]] = [
    ("(age=42.0)", T, "reading: xsd:integer compares as a number"),
    ("(age>=9)", T, "reading: numerically"),
    ("(sn=007)", T, "reading: xsd:string compares as text"),
    ("(sn=7)", F, "reading: xsd:string compares as text, not as a number"),
    ("(flag=TRUE)", T, "reading: xsd:boolean (LDAP's TRUE)"),
    ("(flag=false)", F, "reading: xsd:boolean"),
    ("(when>=2002-03-15T20:00:00Z)", T, "reading: xsd:dateTime chronologically"),
    ("(when<=2002-03-15T20:00:00Z)", F, "reading: xsd:dateTime chronologically"),
    ("(price<=10.5)", T, "reading: xsd:decimal"),
]


@pytest.mark.parametrize(
    ("text", "expected", "clause"), TYPED_CASES, ids=[c[0][:60] for c in TYPED_CASES]
)
def test_rfc2254_typed(text: str, expected: bool, clause: str) -> None:
    assert LDAP.compile(text, TYPES).matches(TYPED) is expected, clause


INCORRECT: list[tuple[str, TypeMap, str]] = [
    ("(cn=Babs", OPEN, "2254 s4: filter = ( filtercomp )"),
    ("cn=Babs)", OPEN, "2254 s4"),
    ("()", OPEN, "2254 s4: an empty filter"),
    ("(&)", OPEN, "2254 s4: filterlist = 1*filter"),
    ("(|)", OPEN, "2254 s4: filterlist = 1*filter"),
    ("(!)", OPEN, "2254 s4: not = ! filter"),
    ("(!(a=1)(b=2))", OPEN, "2254 s4: not takes one filter"),
    ("(=x)", OPEN, "2254 s4: an attribute is required"),
    ("(cn:dn:=x)", OPEN, "draft 7.2: the extensible match is not in the class's grammar"),
    ("(cn=\\zz)", OPEN, "2254 s4: an escape is two hexadecimal digits"),
    ("(cn=a\\2)", OPEN, "2254 s4: an escape is two hexadecimal digits"),
    ("(cn=a(b)", OPEN, "2254 s4: ( must be escaped"),
    ("(cn=a)b)", OPEN, "2254 s4: ) must be escaped"),
    ("(cn~=*x)", OPEN, "2254 s4: wildcards only in substring (=)"),
    ("(cn>=*)", OPEN, "2254 s4: =* only with ="),
    ("(a=1)(b=2)", OPEN, "2254 s4: one filter"),
    ("(age=abc)", TYPES, "reading: the value must be of the identifier's type"),
    ("(age=4*)", TYPES, "reading: substrings apply to strings"),
    ("(flag>=TRUE)", TYPES, "reading: booleans have no order"),
    ("(unknown=1)", TYPES, "draft 5.8.1: not in the selector schema"),
    ("(when>=yesterday)", TYPES, "reading: a date-time value must be RFC 3339"),
]


@pytest.mark.parametrize(("text", "types", "why"), INCORRECT, ids=[c[0][:60] for c in INCORRECT])
def test_incorrect_filters_are_567(text: str, types: TypeMap, why: str) -> None:
    with pytest.raises(ApexError) as caught:
        LDAP.compile(text, types)
    assert caught.value.code == ApexReplyCode.INCORRECT_SELECTOR, why


def test_there_are_at_least_60_cases() -> None:
    assert len(CASES) + len(TYPED_CASES) >= 60


def test_bounds_are_567_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    for text in ("(&" + "(a=1)" * 250_000 + ")", "(!" * 5000 + "(a=1)" + ")" * 5000):
        start = time.perf_counter()
        with pytest.raises(ApexError) as caught:
            LDAP.compile(text, OPEN)
        assert caught.value.code == ApexReplyCode.INCORRECT_SELECTOR
        assert time.perf_counter() - start < scaled(1.0)
    from apexmesh.pubsub.selection import types

    monkeypatch.setattr(types, "MAX_SELECTOR_CHARS", 1 << 20)
    with pytest.raises(ApexError, match="deeper"):
        LDAP.compile("(!" * 10_000 + "(a=1)" + ")" * 10_000, OPEN)


def test_catastrophic_substring_is_linear() -> None:
    selector = LDAP.compile("(x=" + "*a" * 3000 + "*b)", OPEN)
    start = time.perf_counter()
    assert not selector.matches(MessageView.of_values({"x": ["a" * 200_000]}))
    assert time.perf_counter() - start < scaled(0.5)
