"""Bounded fuzzing of the APEX element parsers, inside the unit suite.

``tests/fuzz/fuzz_apex.py`` holds the target (usable by atheris, or by its seeded
mutator for long runs). Here it runs for a bounded number of mutated inputs and
Hypothesis examples; a property test holds ``ParseMemo.known_data`` (the
relay's parse-free path for data that differ only in their content reference) against
the full parser.
"""

from __future__ import annotations

import contextlib
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apexmesh.apex.data import data_from
from apexmesh.apex.elements import parse_apex
from apexmesh.apex.errors import ApexError
from apexmesh.apex.memo import ParseMemo
from apexmesh.beep.xml import XmlError, parse_xml
from tests.support.fuzzing import load_target

pytestmark = pytest.mark.unit

target = load_target("fuzz_apex")


def test_the_seeds_parse_and_never_raise() -> None:
    for seed in target.SEEDS:
        target.fuzz_one(seed)


def test_mutated_seeds_never_raise() -> None:
    """A few seconds of seeded mutation fuzzing, bounded in iterations too (longer with
    ``APEXMESH_FUZZ_SECONDS``, see tests/fuzz/README.md)."""
    seconds = float(os.environ.get("APEXMESH_FUZZ_SECONDS", "0")) or 4.0
    limit = None if "APEXMESH_FUZZ_SECONDS" in os.environ else 20_000
    done = target.run(seconds, seed=int(os.environ.get("APEXMESH_FUZZ_SEED", "3340")), limit=limit)
    print(f"fuzz_apex: {done} mutated inputs in {seconds:.0f} s")
    assert done >= 200


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_raise(data: bytes) -> None:
    target.fuzz_one(data)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [b"<data", b" content='", b"cid:1@x", b"#C", b"'", b">", b"</data>",
             b"<originator identity='a@x' />", b"<recipient identity='b@x'>",
             b"</recipient>", b"<option internal='statusRequest' transID='1' />",
             b"<data-content Name='C'>", b"</data-content>", b"<x>", b"</x>", b"&amp;",
             b"<attach endpoint='a@x' transID='1' />", b"<terminate transID='0' />",
             b"<presence", b"<tuple", b"<publish", b" publisher='a@x'", b" />"]
        ),
        max_size=30,
    )
)  # fmt: skip
def test_element_soup_never_raises(tokens: list[bytes]) -> None:
    target.fuzz_one(b"".join(tokens))


CONTENT_VALUES = st.one_of(
    st.sampled_from(["cid:1@x.org", "#Content", "#Other", "", "a&amp;b", "a'b", "x y", "é"]),
    st.text(max_size=20),
)
RESTS = st.sampled_from(
    [
        (
            "<originator identity='fred@example.com' /><recipient identity='barney@example.com' />"
            "</data>"
        ),
        (
            "<originator identity='fred@example.com' /><recipient identity='barney@example.com'>"
            "<option internal='statusRequest' transID='7' /></recipient></data>"
        ),
        (
            "<originator identity='a@x' /><recipient identity='b@x' />"
            "<data-content Name='Content'><p a='1'>t&amp;u</p></data-content></data>"
        ),
        "<originator identity='a@x' /><recipient identity='b@x' /></data>trailing",
    ]
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=CONTENT_VALUES, second=CONTENT_VALUES, rest=RESTS)
def test_known_data_is_what_the_full_parser_makes(first: str, second: str, rest: str) -> None:
    """A sender's data differ in the content reference only: the relay recognizes the
    second from the first's parse. Whatever the values, it must agree with the full
    parser, and never accept what the parser refuses."""
    memo = ParseMemo()
    earlier = f"<data content='{first}'>{rest}".encode()
    later = f"<data content='{second}'>{rest}".encode()
    with contextlib.suppress(ApexError):
        parse_apex(earlier, memo)  # remembered when it parses
    known = memo.known_data(later)
    try:
        full = data_from(parse_xml(later), later)
    except (ApexError, XmlError):
        assert known is None
        return
    assert known is None or known == full
