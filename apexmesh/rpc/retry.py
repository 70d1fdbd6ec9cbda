"""The one retry policy of every internal call (issue #28).

Five loops used to decide alone when a failed gRPC call is tried again, with two
different sets of "cut off" codes and four backoff rules. They all ask the same two
questions, answered here once:

- **What did the failure mean?** (:func:`failure_of`) A call that reached nobody
  (``UNAVAILABLE``) did nothing anywhere: it may go again, to this callee or another,
  for any request. A call cut off mid-flight (:data:`CUT_OFF`) may have been carried
  out: it may go again only when the callee can tell a repeat (a submission or delivery
  id, or an operation that sets a state), or the request could take effect twice. Any
  other code would fail alike: it is the answer.
- **When, if at all, is the next attempt?** (:meth:`RetryPolicy.next_delay`) Exponential
  backoff with jitter, bounded by a number of attempts and, where the caller has one, by
  time: the seconds since the first attempt and what is left of the caller's own deadline.

Sans-I/O: nothing here sleeps, reads a clock or draws a random number; the caller passes
the time spent and the draw. A caller keeps its own routing (which callee next); only the
two decisions above are shared.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Final

import grpc

#: Codes of a call cut off mid-flight: it may have reached the callee and taken effect.
CUT_OFF: Final = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


class Failure(Enum):
    """What a failed call's status code says about its effect."""

    #: ``UNAVAILABLE``: the call reached nobody, so it did nothing anywhere.
    UNREACHED = "unreached"
    #: One of :data:`CUT_OFF`: the outcome is unknown, the callee may have acted.
    CUT_OFF = "cut-off"
    #: Any other code: the callee answered it, and would again.
    FINAL = "final"


def failure_of(code: grpc.StatusCode) -> Failure:
    """Classify a failed call's code (module docstring)."""
    if code == grpc.StatusCode.UNAVAILABLE:
        return Failure.UNREACHED
    if code in CUT_OFF:
        return Failure.CUT_OFF
    return Failure.FINAL


def may_repeat(failure: Failure, *, repeatable: bool) -> bool:
    """Whether a call that failed so may be sent again: reached nobody, or cut off and
    ``repeatable`` (the callee tells a repeat from a new request)."""
    if failure is Failure.UNREACHED:
        return True
    return failure is Failure.CUT_OFF and repeatable


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often and how soon a failed call is tried again (module docstring)."""

    #: Attempts at one request, the first included; None: bounded only by time.
    attempts: int | None = 4
    #: Wait before the second attempt; doubled for each further one.
    first_backoff_seconds: float = 0.05
    #: The wait between attempts never grows past this.
    max_backoff_seconds: float = 1.0
    #: Share of each wait drawn at random (0.5: between half and all of it), so that
    #: callers that failed together do not all come back at once.
    jitter: float = 0.0
    #: Seconds after the first attempt past which no new attempt starts; None: no bound.
    bound_seconds: float | None = None
    #: Time one attempt may need: none starts with less than this left of the caller's
    #: deadline (when the caller has one).
    attempt_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError("a retry policy allows at least one attempt")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter is a share of the wait, between 0 and 1")
        if self.attempts is None and self.bound_seconds is None:
            raise ValueError("a retry policy is bounded by attempts, by time, or both")

    def backoff(self, attempt: int, draw: float = 1.0) -> float:
        """Seconds to wait after attempt ``attempt`` (1, 2, ...) failed; ``draw`` is a
        random number in [0, 1] (1: no jitter taken off)."""
        full = min(
            self.max_backoff_seconds, self.first_backoff_seconds * 2.0 ** max(0, attempt - 1)
        )
        return full * (1.0 - self.jitter * (1.0 - draw))

    def allows_after(self, attempt: int) -> bool:
        """Whether the attempts leave room for one after attempt ``attempt``."""
        return self.attempts is None or attempt < self.attempts

    def next_delay(
        self,
        attempt: int,
        *,
        elapsed: float = 0.0,
        remaining: float | None = None,
        draw: float = 1.0,
    ) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``; None: no further attempt (the
        attempts are used up, it would start past :attr:`bound_seconds` after the first,
        or with less than :attr:`attempt_seconds` of the caller's ``remaining`` time)."""
        if not self.allows_after(attempt):
            return None
        delay = self.backoff(attempt, draw)
        if self.bound_seconds is not None and elapsed + delay > self.bound_seconds:
            return None
        if remaining is not None and remaining - delay < self.attempt_seconds:
            return None
        return delay

    def with_at_least(self, attempts: int) -> RetryPolicy:
        """The same policy allowing ``attempts`` or more (e.g. one per callee, so each is
        tried once)."""
        if self.attempts is None or self.attempts >= attempts:
            return self
        return replace(self, attempts=attempts)


#: Submits of data through the relays (apexmesh/rpc/relay.py): 50 ms doubling to 1 s,
#: jittered, four attempts (and at least one per relay).
SUBMIT: Final = RetryPolicy(attempts=4, jitter=0.5)

#: A ``Deliver`` to a service that does each delivery id once (pubsub), by the relay
#: (services/relay/wellknown.py) and by a pubsub pod forwarding to a robust topic's owner
#: (services/pubsub/robust_owner.py): the same id again after 50 ms, then 100 ms.
DELIVER: Final = RetryPolicy(attempts=3, max_backoff_seconds=0.25)

#: Every pod of a service reached nobody: wait for one to come back, 100 ms doubling to
#: 1 s, for as long as the caller's patience (``bound_seconds``, set by the caller).
SERVICE_RESTART: Final = RetryPolicy(
    attempts=None, first_backoff_seconds=0.1, max_backoff_seconds=1.0, bound_seconds=5.0
)

#: The relay's attach and detach reports to the presence service: state changes, so a
#: repeat is harmless; 200 ms, then 400 ms.
PRESENCE_REPORT: Final = RetryPolicy(attempts=3, first_backoff_seconds=0.2)


__all__ = [
    "CUT_OFF",
    "DELIVER",
    "PRESENCE_REPORT",
    "SERVICE_RESTART",
    "SUBMIT",
    "Failure",
    "RetryPolicy",
    "failure_of",
    "may_repeat",
]
