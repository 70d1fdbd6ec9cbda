"""Bounded fuzzing of the two selector parsers, inside the unit suite.

``tests/fuzz/fuzz_selectors.py`` holds the target (usable by atheris). Here Hypothesis
feeds it arbitrary text, text over the selectors' own alphabet, and the conformance
tables' selectors with random edits, for a bounded number of examples. Any exception
other than 567 escaping the target is a bug.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_pubsub_jms_selector import CASES as JMS_CASES
from test_pubsub_ldap_selector import CASES as LDAP_CASES

from apexmesh.apex.errors import ApexError
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


@pytest.mark.parametrize("seed", target.SEEDS)
def test_the_mutators_seeds_compile_in_one_class(seed: bytes) -> None:
    """A seed the parsers refuse in both classes would leave the mutator fuzzing 567s."""
    compiled = []
    for class_name in ("JMS", "RFC-2254"):
        try:
            compiled.append(target.CLASSES.compile(class_name, seed.decode(), target.TYPES[0]))
        except ApexError:
            continue
    assert compiled


def test_mutated_seeds_never_raise() -> None:
    """Seeded mutation fuzzing bounded in inputs (longer with ``APEXMESH_FUZZ_SECONDS``,
    see tests/fuzz/README.md)."""
    seconds = float(os.environ.get("APEXMESH_FUZZ_SECONDS", "0")) or 4.0
    limit = None if "APEXMESH_FUZZ_SECONDS" in os.environ else 3_000
    done = target.run(seconds, seed=int(os.environ.get("APEXMESH_FUZZ_SEED", "2254")), limit=limit)
    print(f"fuzz_selectors: {done} mutated inputs in {seconds:.0f} s")
    assert done >= 200
