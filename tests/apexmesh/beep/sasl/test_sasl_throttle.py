"""The SASL failure throttle (RFC 4422 section 6.2) on a fake clock: holds that grow and
queue per address, refusal before any credential is checked, identities slowed across
addresses, bounded tables."""

from __future__ import annotations

import pytest

from apexmesh.beep.sasl.throttle import FailureThrottle, ThrottlePolicy, peer_key

pytestmark = pytest.mark.unit

POLICY = ThrottlePolicy(
    max_failures=4, base_delay_seconds=0.5, max_delay_seconds=1.5, window_seconds=60.0
)


def test_the_delay_grows_with_each_failure_of_a_session_then_it_is_closed() -> None:
    throttle = FailureThrottle(POLICY)
    verdicts = []
    now = 0.0
    for n in range(1, 5):
        # a session tries again once the answer to its last failure has come
        verdicts.append(throttle.failed("10.0.0.1", n, now=now))
        now += verdicts[-1].delay + 0.1
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


def test_answers_held_for_one_address_leave_one_after_the_other() -> None:
    # Sessions opened at once, each failing at the same instant: the guesser does not
    # get five verdicts after the longest hold, it gets one per hold, in turn.
    throttle = FailureThrottle(POLICY)
    holds = [throttle.failed("10.0.0.1", 1, now=0.0).delay for _ in range(5)]
    assert holds == [0.5, 1.5, 3.0, 4.5, 6.0]
    # another address is not in that line
    assert throttle.failed("10.0.0.2", 1, now=0.0).delay == 0.5


def test_holds_are_bounded() -> None:
    policy = ThrottlePolicy(
        max_failures=100,
        base_delay_seconds=1.0,
        max_delay_seconds=2.0,
        refuse_after=100,
        max_hold_seconds=5.0,
    )
    throttle = FailureThrottle(policy)
    holds = [throttle.failed("10.0.0.1", 1, now=0.0).delay for _ in range(10)]
    assert holds[:3] == [1.0, 3.0, 5.0]
    assert max(holds) == 5.0


def test_an_address_past_refuse_after_is_refused_until_its_failures_age() -> None:
    policy = ThrottlePolicy(max_failures=3, refuse_after=4, window_seconds=60.0)
    throttle = FailureThrottle(policy)
    for n in range(4):
        assert throttle.admit("10.0.0.1", now=float(n)) is None
        throttle.failed("10.0.0.1", 1, now=float(n))
    refusal = throttle.admit("10.0.0.1", now=10.0)
    assert refusal is not None
    assert refusal.code == 421
    assert refusal.retry_after == pytest.approx(50.0)  # the first failure leaves at 60
    assert "50 s" in refusal.text
    assert throttle.admit("10.0.0.2", now=10.0) is None  # only that address
    assert throttle.admit("10.0.0.1", now=60.5) is None  # one failure has aged out


def test_an_identity_guessed_from_many_addresses_is_slowed_not_refused() -> None:
    policy = ThrottlePolicy(
        max_failures=5, base_delay_seconds=1.0, max_delay_seconds=4.0, identity_after=3
    )
    throttle = FailureThrottle(policy)
    now = 0.0
    verdicts = []
    for n in range(6):
        # a new address each time, one attempt each, waiting for the answer
        verdicts.append(throttle.failed(f"10.0.1.{n}", 1, now=now, identity="Fred@Example.com"))
        now += verdicts[-1].delay
    assert [v.identity_failures for v in verdicts] == [1, 2, 3, 4, 5, 6]
    # the address rule alone: 1 s each; past identity_after the identity's holds count
    assert [v.delay for v in verdicts] == [1.0, 1.0, 1.0, 1.0, 2.0, 4.0]
    assert throttle.recent_for("fred@example.com", now) == 6  # case folded
    # the identity is never refused: any address may still try (and succeed)
    assert throttle.admit("10.0.2.1", now) is None
    # another identity from a fresh address is not slowed by fred's
    assert throttle.failed("10.0.3.1", 1, now=now, identity="barney@example.com").delay == 1.0


def test_parallel_guesses_at_one_identity_from_many_addresses_queue() -> None:
    policy = ThrottlePolicy(base_delay_seconds=1.0, max_delay_seconds=1.0, identity_after=2)
    throttle = FailureThrottle(policy)
    holds = [
        throttle.failed(f"10.0.1.{n}", 1, now=0.0, identity="fred@example.com").delay
        for n in range(6)
    ]
    assert holds == [1.0, 1.0, 1.0, 2.0, 3.0, 4.0]


def test_ipv6_peers_count_per_64_and_mapped_ipv4_as_ipv4() -> None:
    assert peer_key("2001:db8:1:2::1") == peer_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert peer_key("2001:db8:1:3::1") != peer_key("2001:db8:1:2::1")
    assert peer_key("::ffff:10.0.0.1") == "10.0.0.1"
    assert peer_key("fe80::1%eth0") == "fe80::/64"
    assert peer_key("/run/apex.sock") == "/run/apex.sock"
    throttle = FailureThrottle(POLICY)
    for host in range(1, 5):
        throttle.failed(f"2001:db8:1:2::{host}", 1, now=0.0)
    assert throttle.recent("2001:db8:1:2::99", now=0.0) == 4


def test_the_identity_table_is_bounded() -> None:
    throttle = FailureThrottle(POLICY, max_identities=3)
    for n in range(10):
        throttle.failed("10.0.0.1", 1, now=0.0, identity=f"user{n}@example.com")
    assert throttle.recent_for("user0@example.com", now=0.0) == 0
    assert throttle.recent_for("user9@example.com", now=0.0) == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_failures": 0},
        {"refuse_after": 0},
        {"identity_after": 0},
        {"max_delay_seconds": 8.0, "max_hold_seconds": 1.0},
        {"base_delay_seconds": 2.0, "max_delay_seconds": 1.0},
        {"window_seconds": 0},
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must"):
        ThrottlePolicy(**kwargs)  # type: ignore[arg-type]
