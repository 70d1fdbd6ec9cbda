"""The SASL failure throttle (RFC 4422 section 6.2) on a fake clock."""

from __future__ import annotations

import pytest

from apexmesh.beep.sasl.throttle import FailureThrottle, ThrottlePolicy

pytestmark = pytest.mark.unit

POLICY = ThrottlePolicy(
    max_failures=4, base_delay_seconds=0.5, max_delay_seconds=1.5, window_seconds=60.0
)


def test_the_delay_grows_with_each_failure_of_a_session_then_it_is_closed() -> None:
    throttle = FailureThrottle(POLICY)
    verdicts = [throttle.failed("10.0.0.1", n, now=float(n)) for n in range(1, 5)]
    assert [v.delay for v in verdicts] == [0.5, 1.0, 1.5, 1.5]
    assert [v.close for v in verdicts] == [False, False, False, True]


def test_new_sessions_from_the_same_address_inherit_its_failures() -> None:
    throttle = FailureThrottle(POLICY)
    for n in range(3):
        assert not throttle.failed("10.0.0.1", 1, now=float(n)).close  # a fresh session each
    fourth = throttle.failed("10.0.0.1", 1, now=3.0)
    assert fourth.failures == 4
    assert fourth.close
    # another address is not affected
    other = throttle.failed("10.0.0.2", 1, now=3.0)
    assert (other.failures, other.delay, other.close) == (1, 0.5, False)


def test_failures_leave_the_window() -> None:
    throttle = FailureThrottle(POLICY)
    for n in range(3):
        throttle.failed("10.0.0.1", 1, now=float(n))
    assert throttle.recent("10.0.0.1", now=30.0) == 3
    assert throttle.recent("10.0.0.1", now=61.5) == 1
    later = throttle.failed("10.0.0.1", 1, now=100.0)
    assert (later.failures, later.close) == (1, False)


def test_the_address_table_is_bounded() -> None:
    throttle = FailureThrottle(POLICY, max_peers=3)
    for n in range(10):
        throttle.failed(f"10.0.0.{n}", 1, now=0.0)
    assert throttle.recent("10.0.0.0", now=0.0) == 0
    assert throttle.recent("10.0.0.9", now=0.0) == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_failures": 0},
        {"base_delay_seconds": 2.0, "max_delay_seconds": 1.0},
        {"window_seconds": 0},
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must"):
        ThrottlePolicy(**kwargs)  # type: ignore[arg-type]
