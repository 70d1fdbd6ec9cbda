"""Resisting password guessing across SASL exchanges and sessions, sans-I/O.

RFC 4422 section 6.2 names the threat ("online and offline dictionary attacks"); RFC
2831 section 3.4 and RFC 5802 section 9 leave the defence to the server. This module is
the listener's policy. It keeps, for each peer address and for each claimed identity, the
failures of a sliding window (``window_seconds``), and answers three questions:

* **May this address try?** (:meth:`FailureThrottle.admit`, asked when a SASL exchange
  starts, before any credential is looked at.) Not once ``refuse_after`` of its failures
  are in the window: the exchange is refused with 421 ("service not available") and its
  credentials are never checked, so a right guess cannot be told from a wrong one.
* **How long is the answer to a failure held?** (:meth:`FailureThrottle.failed`.) The
  ``535`` (or any failure) goes out only after a delay that doubles with each failure of
  the address in the window (``base_delay_seconds`` .. ``max_delay_seconds``), and the
  held answers of one address leave one after the other: a guesser who opens a new
  session for every attempt, or many sessions at once, waits for each verdict in turn
  (before this policy the answer came at once and only the next read was delayed, so a
  new session per attempt gained everything). Once an identity (known to the server or
  not: an unknown user must look like a known one) has ``identity_after`` failures in the
  window, from any addresses, its failures are held the same way and in one line too,
  which slows a guesser who spreads over many addresses. Identities are never refused,
  only slowed: refusing them would let anyone lock a user out. Success is never held.
* **Is the session released?** After the failure that brings the session, or the
  address, to ``max_failures``: the held answer goes, then the session is released with
  421.

IPv6 peers are counted per /64 (one host is usually given a whole /64, so per address
it could guess without limit); an IPv4-mapped IPv6 address counts as its IPv4 address.

Memory is bounded: addresses and identities live in two
:class:`~apexmesh.common.cache.BoundedCache` instances (the least recently failing
entries are forgotten first when full), each keeping at most ``refuse_after`` (or
``identity_after + refuse_after``) failure times. Time is an argument (``now``, seconds
on the caller's monotonic clock); the caller owns the clock, the hold and the close.
"""

from __future__ import annotations

import ipaddress
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Final

from apexmesh.beep.codes import ReplyCode
from apexmesh.common.cache import BoundedCache, Eviction

#: Addresses remembered at most (an attacker with many addresses cannot grow the table).
MAX_PEERS: Final = 10_000
#: Claimed identities remembered at most.
MAX_IDENTITIES: Final = 10_000
#: Longest identity kept as a key (longer claims are cut: a key, not a name to show).
MAX_IDENTITY_KEY: Final = 256
#: IPv6 addresses are counted per network of this prefix length.
IPV6_PREFIX: Final = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class ThrottlePolicy:
    """How failures are answered (see the module docstring)."""

    #: Failures (per session, or per address within ``window_seconds``) after which the
    #: session is released with 421, once the failure's answer has gone.
    max_failures: int = 5
    #: Hold of the answer to an address's first failure; each further failure doubles it.
    base_delay_seconds: float = 0.5
    #: The hold of one failure never grows past this.
    max_delay_seconds: float = 8.0
    #: How long a failure counts against its address and its identity.
    window_seconds: float = 600.0
    #: Failures of an address within the window after which its SASL exchanges are
    #: refused (421) before any credential is checked.
    refuse_after: int = 20
    #: Failures of one identity within the window (from any address) after which its
    #: failures are held too.
    identity_after: int = 10
    #: Longest hold of one answer, however many held answers of its address or identity
    #: wait before it: a held session occupies a connection, so a flood cannot hold
    #: connections open for hours.
    max_hold_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.max_failures < 1 or self.refuse_after < 1 or self.identity_after < 1:
            raise ValueError("max_failures, refuse_after and identity_after must be at least 1")
        if self.base_delay_seconds < 0 or self.max_delay_seconds < self.base_delay_seconds:
            raise ValueError("delays must satisfy 0 <= base <= max")
        if self.max_hold_seconds < self.max_delay_seconds:
            raise ValueError("max_hold_seconds must be at least max_delay_seconds")
        if self.window_seconds <= 0:
            raise ValueError("window_seconds must be positive")

    def delay(self, failures: int) -> float:
        """The hold of the ``failures``-th failure (1, 2, ...) of one address."""
        if failures < 1:
            return 0.0
        exponent = min(failures - 1, 64)  # 2**64 * base is past any max already
        return min(self.base_delay_seconds * 2.0**exponent, self.max_delay_seconds)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do after one failure."""

    #: Failures counted against the session or its address, whichever is more.
    failures: int
    #: Seconds the answer to the failure is held (and the session reads nothing).
    delay: float
    #: True: once the answer has gone, release the session with 421.
    close: bool
    #: Failures of the claimed identity in the window (0 when none was claimed).
    identity_failures: int = 0


@dataclass(frozen=True, slots=True)
class Refusal:
    """An address that may not try now (:meth:`FailureThrottle.admit`)."""

    #: Seconds until its oldest counted failure leaves the window.
    retry_after: float
    #: The code the exchange is refused with.
    code: int = ReplyCode.SERVICE_NOT_AVAILABLE

    @property
    def text(self) -> str:
        """The error element's text (says nothing of the credentials)."""
        return f"too many failed authentications; try again in {math.ceil(self.retry_after)} s"


@dataclass(slots=True)
class _Failures:
    """Failure times of one address or identity, and when its next held answer may go."""

    times: deque[float]
    #: The caller's clock: the release time of the last answer held for this key.
    free_at: float = field(default=-math.inf)

    def waiting(self, now: float) -> float:
        """Seconds until the last answer held for this key has gone (0 when it has)."""
        return max(0.0, self.free_at - now)

    def trim(self, horizon: float) -> None:
        while self.times and self.times[0] <= horizon:
            self.times.popleft()


def peer_key(address: str) -> str:
    """The key an address is counted under: IPv6 per /64, IPv4-mapped as IPv4, anything
    that is not an IP address (a Unix socket path) as it is."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # no zone index
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, IPV6_PREFIX), strict=False))
    return str(ip)


def identity_key(identity: str) -> str:
    """The key a claimed identity is counted under (case folded: ``Fred@Example.com`` and
    ``fred@example.com`` are one target to a guesser)."""
    return identity[:MAX_IDENTITY_KEY].casefold()


class FailureThrottle:
    """Failure counts per peer address and per claimed identity (module docstring)."""

    def __init__(
        self,
        policy: ThrottlePolicy | None = None,
        *,
        max_peers: int = MAX_PEERS,
        max_identities: int = MAX_IDENTITIES,
    ) -> None:
        self.policy = policy or ThrottlePolicy()
        self._peers: BoundedCache[str, _Failures] = BoundedCache(
            "sasl failures by address", max_peers, policy=Eviction.LRU
        )
        self._identities: BoundedCache[str, _Failures] = BoundedCache(
            "sasl failures by identity", max_identities, policy=Eviction.LRU
        )
        self._peer_depth = max(self.policy.refuse_after, self.policy.max_failures)
        self._identity_depth = self.policy.identity_after + self.policy.refuse_after

    def admit(self, peer: str, now: float) -> Refusal | None:
        """None when ``peer`` may start a SASL exchange at ``now``; else the refusal."""
        record = self._peers.get(peer_key(peer))
        if record is None:
            return None
        record.trim(now - self.policy.window_seconds)
        needed = self.policy.refuse_after
        if len(record.times) < needed:
            return None
        oldest_counted = record.times[-needed]
        return Refusal(retry_after=max(0.0, oldest_counted + self.policy.window_seconds - now))

    def failed(
        self, peer: str, session_failures: int, now: float, identity: str | None = None
    ) -> Verdict:
        """Record one failure from ``peer`` (its session's ``session_failures``-th, for
        the claimed ``identity`` when the exchange got that far) at ``now``; return the
        verdict."""
        policy = self.policy
        horizon = now - policy.window_seconds
        address = self._record(self._peers, peer_key(peer), self._peer_depth, horizon, now)
        failures = max(session_failures, len(address.times))
        # Held answers of one key leave one after the other: this one after the last.
        hold = address.waiting(now) + policy.delay(len(address.times))
        identity_failures = 0
        named: _Failures | None = None
        if identity:
            named = self._record(
                self._identities, identity_key(identity), self._identity_depth, horizon, now
            )
            identity_failures = len(named.times)
            over = identity_failures - policy.identity_after
            if over > 0:
                hold = max(hold, named.waiting(now) + policy.delay(over))
        hold = min(hold, policy.max_hold_seconds)
        address.free_at = now + hold
        if named is not None and identity_failures > policy.identity_after:
            named.free_at = now + hold
        return Verdict(
            failures=failures,
            delay=hold,
            close=failures >= policy.max_failures,
            identity_failures=identity_failures,
        )

    @staticmethod
    def _record(
        table: BoundedCache[str, _Failures], key: str, depth: int, horizon: float, now: float
    ) -> _Failures:
        record = table.get(key)
        if record is None:
            record = _Failures(deque(maxlen=depth))
            table.put(key, record)
        record.trim(horizon)
        record.times.append(now)
        return record

    def recent(self, peer: str, now: float) -> int:
        """Failures of ``peer`` still inside the window at ``now``."""
        return self._count(self._peers.get(peer_key(peer)), now)

    def recent_for(self, identity: str, now: float) -> int:
        """Failures of the claimed ``identity`` still inside the window at ``now``."""
        return self._count(self._identities.get(identity_key(identity)), now)

    def _count(self, record: _Failures | None, now: float) -> int:
        if record is None:
            return 0
        return sum(1 for when in record.times if when > now - self.policy.window_seconds)


__all__ = [
    "IPV6_PREFIX",
    "MAX_IDENTITIES",
    "MAX_IDENTITY_KEY",
    "MAX_PEERS",
    "FailureThrottle",
    "Refusal",
    "ThrottlePolicy",
    "Verdict",
    "identity_key",
    "peer_key",
]
