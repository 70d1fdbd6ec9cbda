"""Throttling of failed SASL authentications (RFC 4422 section 6.2), sans-I/O.

RFC 4422 section 6.2 asks servers to resist password guessing "by delaying, slowing or
otherwise limiting" failed exchanges. :class:`FailureThrottle` decides, for each failure
a listener sees, how long that BEEP session reads nothing more (a delay that doubles with
every failure) and whether the session is closed (421, "service not available") instead.
Failures are counted twice: per session, and per peer address over a sliding window, so
that a guesser gains nothing by opening a new session for every attempt.

Time is an argument (``now``, seconds on any monotonic clock); the caller owns the
clock, the delay and the close. The per-address table is bounded: the oldest addresses
are forgotten first when it is full.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Final

#: Addresses remembered at most (an attacker with many addresses cannot grow the table).
MAX_PEERS: Final = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ThrottlePolicy:
    """How failures are answered."""

    #: Failures (per session, or per address within ``window_seconds``) after which the
    #: session is closed with 421.
    max_failures: int = 5
    #: Delay after the first failure; each further failure doubles it.
    base_delay_seconds: float = 0.5
    #: The delay never grows past this.
    max_delay_seconds: float = 8.0
    #: How long a failure counts against its address.
    window_seconds: float = 600.0

    def __post_init__(self) -> None:
        if self.max_failures < 1:
            raise ValueError("max_failures must be at least 1")
        if self.base_delay_seconds < 0 or self.max_delay_seconds < self.base_delay_seconds:
            raise ValueError("delays must satisfy 0 <= base <= max")
        if self.window_seconds <= 0:
            raise ValueError("window_seconds must be positive")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do after one failure."""

    #: Failures counted against the session or its address, whichever is more.
    failures: int
    #: Seconds the session reads nothing more.
    delay: float
    #: True: close the session with 421 instead.
    close: bool


class FailureThrottle:
    """Failure counts per peer address, and the verdict for each new failure."""

    def __init__(self, policy: ThrottlePolicy | None = None, *, max_peers: int = MAX_PEERS):
        self.policy = policy or ThrottlePolicy()
        self._max_peers = max_peers
        self._by_peer: OrderedDict[str, deque[float]] = OrderedDict()

    def failed(self, peer: str, session_failures: int, now: float) -> Verdict:
        """Record one failure from ``peer`` (its session's ``session_failures``-th) at
        ``now``; return the verdict."""
        policy = self.policy
        times = self._by_peer.pop(peer, None) or deque()
        horizon = now - policy.window_seconds
        while times and times[0] <= horizon:
            times.popleft()
        times.append(now)
        self._by_peer[peer] = times
        while len(self._by_peer) > self._max_peers:
            self._by_peer.popitem(last=False)
        failures = max(session_failures, len(times))
        delay = min(policy.base_delay_seconds * 2 ** (failures - 1), policy.max_delay_seconds)
        return Verdict(failures=failures, delay=delay, close=failures >= policy.max_failures)

    def recent(self, peer: str, now: float) -> int:
        """Failures of ``peer`` still inside the window at ``now``."""
        times = self._by_peer.get(peer)
        if not times:
            return 0
        return sum(1 for when in times if when > now - self.policy.window_seconds)


__all__ = ["MAX_PEERS", "FailureThrottle", "ThrottlePolicy", "Verdict"]
