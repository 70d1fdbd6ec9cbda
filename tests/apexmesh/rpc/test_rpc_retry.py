"""The one retry policy (apexmesh/rpc/retry.py): what a failure code means, and when the
next attempt starts. Pure: no clock, no sleep, no random draw of its own."""

from __future__ import annotations

import dataclasses

import grpc
import pytest

from apexmesh.rpc.retry import (
    CUT_OFF,
    DELIVER,
    SERVICE_RESTART,
    SUBMIT,
    Failure,
    RetryPolicy,
    failure_of,
    may_repeat,
)

pytestmark = pytest.mark.unit


def test_unavailable_reached_nobody_and_the_cut_off_codes_may_have_acted() -> None:
    assert failure_of(grpc.StatusCode.UNAVAILABLE) is Failure.UNREACHED
    for code in CUT_OFF:
        assert failure_of(code) is Failure.CUT_OFF
    for code in (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.NOT_FOUND,
    ):
        assert failure_of(code) is Failure.FINAL
    assert grpc.StatusCode.UNAVAILABLE not in CUT_OFF
    assert grpc.StatusCode.OK not in CUT_OFF


def test_only_a_callee_that_tells_a_repeat_gets_a_cut_off_call_again() -> None:
    assert may_repeat(Failure.UNREACHED, repeatable=False)
    assert may_repeat(Failure.UNREACHED, repeatable=True)
    assert may_repeat(Failure.CUT_OFF, repeatable=True)
    assert not may_repeat(Failure.CUT_OFF, repeatable=False)
    assert not may_repeat(Failure.FINAL, repeatable=True)


def test_the_wait_doubles_up_to_its_ceiling_and_the_attempts_bound_it() -> None:
    policy = RetryPolicy(attempts=5, first_backoff_seconds=0.1, max_backoff_seconds=0.3)
    assert [policy.next_delay(n) for n in range(1, 6)] == [0.1, 0.2, 0.3, 0.3, None]
    assert policy.allows_after(4)
    assert not policy.allows_after(5)


def test_jitter_takes_up_to_its_share_off_the_wait() -> None:
    policy = RetryPolicy(first_backoff_seconds=0.2, jitter=0.5)
    assert policy.backoff(1, draw=1.0) == pytest.approx(0.2)
    assert policy.backoff(1, draw=0.0) == pytest.approx(0.1)
    assert policy.backoff(1, draw=0.5) == pytest.approx(0.15)


def test_time_bounds_the_attempts_as_well() -> None:
    policy = RetryPolicy(
        attempts=None,
        first_backoff_seconds=1.0,
        max_backoff_seconds=4.0,
        bound_seconds=10.0,
        attempt_seconds=2.0,
    )
    assert policy.next_delay(1, elapsed=0.0) == 1.0
    assert policy.next_delay(9, elapsed=1.0) == 4.0  # no attempt bound
    assert policy.next_delay(2, elapsed=9.0) is None  # would start past the bound
    assert policy.next_delay(1, remaining=2.5) is None  # too little of the deadline left
    assert policy.next_delay(1, remaining=3.5) == 1.0


def test_a_policy_without_any_bound_or_attempt_is_refused() -> None:
    with pytest.raises(ValueError, match="bounded"):
        RetryPolicy(attempts=None)
    with pytest.raises(ValueError, match="at least one"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=1.5)


def test_with_at_least_only_ever_raises_the_attempts() -> None:
    assert SUBMIT.with_at_least(7).attempts == 7
    assert SUBMIT.with_at_least(2) is SUBMIT
    assert SERVICE_RESTART.with_at_least(9) is SERVICE_RESTART  # bounded by time only


def test_the_named_policies_keep_their_documented_shape() -> None:
    """Submits: four jittered attempts; deliveries to pubsub: the same id again twice,
    50 ms then 100 ms; a service restart: 100 ms doubling to 1 s for 5 s."""
    assert SUBMIT.attempts == 4
    assert SUBMIT.jitter == 0.5
    assert [DELIVER.next_delay(n) for n in (1, 2, 3)] == [0.05, 0.1, None]
    restart = dataclasses.replace(SERVICE_RESTART, bound_seconds=5.0)
    pauses, waited, rounds = [], 0.0, 0
    while (pause := restart.next_delay(rounds + 1, elapsed=waited)) is not None:
        rounds += 1
        pauses.append(pause)
        waited += pause
    assert pauses == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert waited <= 5.0
