"""Wildcard patterns matched greedily without backtracking (selection/wildcard.py)."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apexmesh.pubsub.selection.wildcard import Part, Wildcard
from tests.support.polling import scaled

pytestmark = pytest.mark.unit


def _pattern(text: str) -> Wildcard:
    """'%' any sequence, '_' any one character (the JMS pattern language)."""
    parts: list[Part] = [tuple(None if c == "_" else c for c in piece) for piece in text.split("%")]
    return Wildcard.of_parts(parts)


def _regex(text: str) -> re.Pattern[str]:
    body = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in text)
    return re.compile(body, re.DOTALL)


@given(
    pattern=st.text(alphabet="ab%_", max_size=8),
    text=st.text(alphabet="abc", max_size=10),
)
def test_agrees_with_a_regular_expression(pattern: str, text: str) -> None:
    assert _pattern(pattern).matches(text) is (_regex(pattern).fullmatch(text) is not None)


def test_catastrophic_patterns_stay_linear() -> None:
    start = time.perf_counter()
    assert not _pattern("%a" * 5000 + "%b").matches("a" * 300_000)
    assert not _pattern("%a_" * 500 + "%b").matches("a" * 20_000)
    assert time.perf_counter() - start < scaled(1.0)


def test_prefix() -> None:
    assert _pattern("ab_c%").prefix() == "ab"
    assert _pattern("%x").prefix() == ""
