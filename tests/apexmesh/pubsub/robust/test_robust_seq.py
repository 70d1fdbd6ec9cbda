"""Link sequence arithmetic (XEP-0040 2.2): +1, 1 after wrap, 0 = resync, comparisons
across the wrap, for 16, 32 and 64 bits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apexmesh.pubsub.robust.seq import RESYNC, Resolution, resolution_of

pytestmark = pytest.mark.unit


def test_the_xep_16_bit_run() -> None:
    """ "1, 2, 3, 65533, 65534, 65535, 1, 2" (section 2.2)."""
    r = Resolution.BITS16
    assert [r.next(s) for s in (1, 2, 65533, 65534, 65535)] == [2, 3, 65534, 65535, 1]
    assert r.max_seq == 65535


@pytest.mark.parametrize("bits", [16, 32, 64])
def test_wrap_goes_to_one_never_zero_and_resync_is_followed_by_one(bits: int) -> None:
    r = resolution_of(bits)
    assert r.next(r.max_seq) == 1
    assert r.next(RESYNC) == 1
    assert r.valid(0)
    assert r.valid(r.max_seq)
    assert not r.valid(r.max_seq + 1)


def test_other_resolutions_are_refused() -> None:
    with pytest.raises(ValueError, match="8"):
        resolution_of(8)


@pytest.mark.parametrize("r", list(Resolution))
def test_after_and_delta_across_the_wrap(r: Resolution) -> None:
    top = r.max_seq
    assert r.after(top, 1)
    assert not r.after(1, top)
    assert r.delta(top, 2) == 2
    assert r.delta(2, top) == -2
    assert r.span(top - 1, 2) == 4
    assert not r.after(5, 5)


@given(
    bits=st.sampled_from([16, 32, 64]),
    start=st.integers(min_value=1),
    steps=st.integers(0, 100_000),
)
def test_advancing_matches_stepping_and_delta_undoes_it(bits: int, start: int, steps: int) -> None:
    r = resolution_of(bits)
    a = (start - 1) % r.max_seq + 1
    b = r.advance(a, steps)
    assert 1 <= b <= r.max_seq
    assert r.delta(a, b) == steps % r.cycle if steps % r.cycle <= r.cycle // 2 else True
    assert r.after(a, b) == (0 < steps % r.cycle <= r.cycle // 2)
    if steps <= 2_000:
        walked = a
        for _ in range(steps):
            walked = r.next(walked)
        assert walked == b


@given(bits=st.sampled_from([16, 32, 64]), a=st.integers(min_value=1), d=st.integers())
def test_delta_is_antisymmetric_and_bounded(bits: int, a: int, d: int) -> None:
    r = resolution_of(bits)
    x = (a - 1) % r.max_seq + 1
    y = r.advance(x, d % r.cycle)
    forward = r.delta(x, y)
    assert -(r.cycle // 2) <= forward <= r.cycle // 2
    if forward not in (r.cycle // 2, -(r.cycle // 2)):
        assert r.delta(y, x) == -forward


def test_advance_from_resync_counts_zero_as_the_step_before_one() -> None:
    r = Resolution.BITS16
    assert r.advance(RESYNC, 1) == 1
    assert r.advance(RESYNC, 65535) == 65535
    assert r.advance(RESYNC, 65536) == 1
