"""Issue #34: selectors compare strings on their exact characters, and every predicate
over a repeated identifier follows one rule (each instance tested, the results OR-ed),
its negated forms included.

JMS 3.8.1.1 (/work/shared/specs/jms-selector-syntax.txt): "Two strings are equal if and
only if they contain the same sequence of characters"; xsd:string's whiteSpace facet is
"preserve" (XML Schema part 2, 3.2.1), so the text of an instance is compared as it is.
draft-wyman-apex-pubsub-00 section 7.3: "all instances ... will be compared to the tested
value. A single matching instance ... will be considered a successful match".
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apexmesh.pubsub.matcher import Matcher
from apexmesh.pubsub.selection.java import Truth, any_
from apexmesh.pubsub.selection.jms import JmsClass
from apexmesh.pubsub.selection.ldap import LdapClass
from apexmesh.pubsub.selection.types import Kind, MessageView, TypeMap, convert

pytestmark = pytest.mark.unit

T, F, U = True, False, None
JMS = JmsClass()
LDAP = LdapClass()
OPEN = TypeMap()
SCHEMA = TypeMap(
    kinds={
        "name": Kind.STRING,
        "norm": Kind.NORMALIZED,
        "tok": Kind.TOKEN,
        "tag": Kind.STRING,
        "n": Kind.EXACT,
    },
    open=False,
)


def _jms(selector: str, values: dict[str, list[str]], types: TypeMap = OPEN) -> Truth:
    return JMS.compile(selector, types).truth(MessageView.of_values(values))


# ------------------------------------------------------------------- exact characters

STRING_CASES: list[tuple[str, list[str], Truth]] = [
    ("name = 'foo '", ["foo "], T),  # the probe's case: never matched before
    ("name = 'foo'", ["foo "], F),  # matched before: the instance was trimmed
    ("name = ''", ["   "], F),  # matched before
    ("name = '   '", ["   "], T),
    ("name = ''", [""], T),
    ("name <> 'foo'", ["foo "], T),
    ("name = ' foo'", [" foo"], T),
    ("name = 'a\nb'", ["a\nb"], T),
    ("name IN ('foo ')", ["foo "], T),
    ("name IN ('foo')", ["foo "], F),
    ("name LIKE 'foo'", ["foo "], F),
    ("name LIKE 'foo_'", ["foo "], T),
    ("name LIKE '% '", ["foo "], T),
]


@pytest.mark.parametrize(("selector", "instances", "expected"), STRING_CASES)
@pytest.mark.parametrize("types", [OPEN, SCHEMA], ids=["untyped", "xsd:string"])
def test_strings_compare_on_exact_characters(
    selector: str, instances: list[str], expected: Truth, types: TypeMap
) -> None:
    assert _jms(selector, {"name": instances}, types) is expected


def test_numbers_booleans_and_dates_still_collapse_their_spaces() -> None:
    # xsd:decimal, xsd:boolean, xsd:dateTime have whiteSpace "collapse": " 5 " is 5.
    assert _jms("n = 5", {"n": [" 5 "]}, SCHEMA) is T
    assert _jms("a = 5", {"a": ["\t5\n"]}) is T
    assert _jms("flag", {"flag": [" true "]}) is T
    # A no-break space is a character to XML Schema, not whitespace.
    assert _jms("a = 5", {"a": ["5\u00a0"]}) is F


@pytest.mark.parametrize(
    ("selector", "instance", "expected"),
    [
        # xsd:token collapses: runs of spaces to one, none at the ends
        ("tok = 'a b'", "  a \t\n b  ", T),
        ("tok = ' a b '", " a b ", F),  # no token value has outer spaces
        # xsd:normalizedString replaces tab, newline, carriage return by a space
        ("norm = 'a  b '", "a\t\nb\r", T),
        ("norm = 'a b'", "a\t\nb\r", F),
    ],
)
def test_token_and_normalized_string_read_spaces_as_their_facet_says(
    selector: str, instance: str, expected: Truth
) -> None:
    assert _jms(selector, {"tok": [instance], "norm": [instance]}, SCHEMA) is expected


def test_the_facets_of_the_schema_types() -> None:
    text = "\t a  b \n"
    assert convert(text, Kind.STRING) == text
    assert convert(text, Kind.UNTYPED) == text
    assert convert(text, Kind.NORMALIZED) == "  a  b  "
    assert convert(text, Kind.TOKEN) == "a b"
    assert TypeMap.from_declarations([("x", "token"), ("y", "NMTOKEN")]).kinds == {
        "x": Kind.TOKEN,
        "y": Kind.TOKEN,
    }
    assert TypeMap.from_declarations([("x", "normalizedString")]).kinds == {"x": Kind.NORMALIZED}


# ------------------------------------------------------------- negation, per instance

NEGATION_CASES: list[tuple[str, Truth, str]] = [
    ("tag <> 'a'", T, "b <> 'a'"),
    ("tag NOT IN ('a')", T, "b is not in ('a'): the probe's case, was FALSE"),
    ("tag NOT LIKE 'a%'", T, "b is not like 'a%': was FALSE"),
    ("tag NOT IN ('a', 'b')", F, "no instance is outside ('a', 'b')"),
    ("tag NOT LIKE '_'", F, "every instance is one character"),
    ("tag IN ('a')", T, "a is in ('a')"),
    ("NOT (tag IN ('a'))", F, "the NOT operator negates the whole predicate (3-6)"),
    ("NOT (tag = 'a')", F, "likewise for ="),
    ("NOT (tag LIKE 'a%')", F, "likewise for LIKE"),
]


@pytest.mark.parametrize(("selector", "expected", "why"), NEGATION_CASES)
@pytest.mark.parametrize("types", [OPEN, SCHEMA], ids=["untyped", "xsd:string"])
def test_negated_predicates_over_repeated_values_test_each_value(
    selector: str, expected: Truth, why: str, types: TypeMap
) -> None:
    assert _jms(selector, {"tag": ["a", "b"]}, types) is expected, why


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("n NOT BETWEEN 1 AND 2", T),  # 5 is outside: was FALSE
        ("n BETWEEN 1 AND 2", T),  # 1 is inside
        ("NOT (n BETWEEN 1 AND 2)", F),
        ("n NOT BETWEEN 0 AND 9", F),
    ],
)
def test_not_between_tests_each_value(selector: str, expected: Truth) -> None:
    assert _jms(selector, {"n": ["1", "5"]}, SCHEMA) is expected
    assert _jms(selector, {"n": ["5", "1"]}) is expected


def test_negated_predicates_of_an_absent_identifier_are_unknown() -> None:
    for selector in ("tag NOT IN ('a')", "tag NOT LIKE 'a'", "n NOT BETWEEN 1 AND 2"):
        assert _jms(selector, {}) is U, selector


#: Predicates on one repeated identifier: the rule is p(v1) OR ... OR p(vn).
ATOMS = st.one_of(
    st.builds(
        lambda op, v: f"s {op} '{v}'",
        st.sampled_from(["=", "<>"]),
        st.sampled_from(["a", "a ", ""]),
    ),
    st.builds(
        lambda neg, v: f"s {neg}IN ('{v}', 'b')",
        st.sampled_from(["", "NOT "]),
        st.sampled_from(["a", " a"]),
    ),
    st.builds(
        lambda neg, v: f"s {neg}LIKE '{v}'",
        st.sampled_from(["", "NOT "]),
        st.sampled_from(["a%", "_", "% "]),
    ),
    st.builds(
        lambda neg, lo, hi: f"x {neg}BETWEEN {lo} AND {hi}",
        st.sampled_from(["", "NOT "]),
        st.integers(0, 3),
        st.integers(1, 4),
    ),
    st.builds(
        lambda op, n: f"x {op} {n}", st.sampled_from(["=", "<>", "<", ">="]), st.integers(0, 4)
    ),
)


@given(
    selector=ATOMS,
    strings=st.lists(
        st.sampled_from(["a", "a ", " a", "b", "", "  ", "ab"]), min_size=1, max_size=4
    ),
    numbers=st.lists(st.sampled_from(["0", "1", "2", " 3", "4", "z"]), min_size=1, max_size=4),
)
def test_every_predicate_is_the_or_of_its_instances(
    selector: str, strings: list[str], numbers: list[str]
) -> None:
    compiled = JMS.compile(selector, OPEN)
    whole = compiled.truth(MessageView.of_values({"s": strings, "x": numbers}))
    singles = any_(
        compiled.truth(MessageView.of_values({"s": [s], "x": [x]}))
        for s in strings
        for x in numbers
    )
    assert whole is singles


# ------------------------------------------------------------------ RFC 2254 filters

LDAP_CASES: list[tuple[str, list[str], bool, str]] = [
    ("(s=' a ')", [" a "], T, "a quoted value is exactly the text between the quotes"),
    ("(s=a)", [" a "], F, "the instance is not trimmed: was TRUE"),
    ("(s=' a ')", ["a"], F, "was never TRUE before either: now the same rule both ways"),
    ("(s = a)", ["a"], T, "spaces around an unquoted value are the filter's layout"),
    ("(s=*a)", ["ba "], F, "a final substring is compared with the instance's end"),
    ("(s=*a )", ["ba "], F, "the pattern's outer spaces are layout"),
    ("(s=*a*)", ["ba "], T, "any"),
    ("(s~=A)", [" a "], T, "approximate match folds case and spaces on both sides"),
    ("(!(s=a))", ["a", "b"], F, "! negates the whole filter (RFC 2251 4.5.1)"),
    ("(!(s=c))", ["a", "b"], T, "no instance equals c"),
]


@pytest.mark.parametrize(("selector", "instances", "expected", "why"), LDAP_CASES)
def test_rfc2254_filters_compare_exact_characters(
    selector: str, instances: list[str], expected: bool, why: str
) -> None:
    view = MessageView.of_values({"s": instances})
    assert LDAP.compile(selector, OPEN).matches(view) is expected, why
    typed = TypeMap(kinds={"s": Kind.STRING}, open=False)
    assert LDAP.compile(selector, typed).matches(view) is expected, why


def test_the_index_agrees_on_exact_characters() -> None:
    matcher: Matcher[str] = Matcher()
    for key, (name, text) in {
        "jms-space": ("JMS", "name = 'foo '"),
        "jms-bare": ("JMS", "name = 'foo'"),
        "jms-in": ("JMS", "name IN ('foo ', 'x')"),
        "ldap-quoted": ("RFC-2254", "(name='foo ')"),
        "ldap-bare": ("RFC-2254", "(name=foo)"),
    }.items():
        compiler = JMS if name == "JMS" else LDAP
        matcher.add(key, compiler.compile(text, OPEN))
    assert matcher.match(MessageView.of_values({"name": ["foo "]})) == {
        "jms-space",
        "jms-in",
        "ldap-quoted",
    }
    assert matcher.match(MessageView.of_values({"name": ["foo"]})) == {"jms-bare", "ldap-bare"}
