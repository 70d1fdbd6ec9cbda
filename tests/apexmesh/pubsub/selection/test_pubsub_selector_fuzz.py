"""Bounded fuzzing of the two selector parsers, inside the unit suite.

``tests/fuzz/fuzz_selectors.py`` holds the target (usable by atheris). Here Hypothesis
feeds it arbitrary text, text over the selectors' own alphabet, and the conformance
tables' selectors with random edits, for a bounded number of examples. Any exception
other than 567 escaping the target is a bug.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_pubsub_jms_selector import CASES as JMS_CASES
from test_pubsub_ldap_selector import CASES as LDAP_CASES

from tests.support.fuzzing import load_target

pytestmark = pytest.mark.unit

target = load_target("fuzz_selectors")
BOUNDED = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALPHABET = "()&|!=~<>*\\0123456789abstx.-_%' ,+/\nANDORNOTBETWEENINLIKEESCAPEISNULLTRUEFALSE"
SEEDS = [text for text, _, _ in JMS_CASES + LDAP_CASES]


@BOUNDED
@given(st.binary(max_size=256))
def test_arbitrary_octets(data: bytes) -> None:
    target.fuzz_one(data)


@BOUNDED
@given(st.text(alphabet=ALPHABET, max_size=120))
def test_the_selectors_alphabet(text: str) -> None:
    target.fuzz_one(text.encode())


@BOUNDED
@given(
    seed=st.sampled_from(SEEDS),
    edits=st.lists(
        st.tuples(st.integers(min_value=0, max_value=200), st.sampled_from(ALPHABET)),
        max_size=6,
    ),
    cut=st.integers(min_value=0, max_value=200),
)
def test_edited_conformance_selectors(seed: str, edits: list[tuple[int, str]], cut: int) -> None:
    text = list(seed)
    for position, char in edits:
        text.insert(min(position, len(text)), char)
    mutated = "".join(text)
    target.fuzz_one(mutated.encode())
    target.fuzz_one(mutated[:cut].encode())
