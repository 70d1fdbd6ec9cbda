"""The hold4Endpoint option of the APEX party pack (RFC 3342 section 3), sans I/O.

``<option internal='hold4Endpoint' />`` in a ``data`` (registration 5.3: "Contains:
nothing"; the DTD of section 6 declares no element for it, so any content is 501). Its
presence asks that, at step 5.3, data for a recipient whose endpoint is not attached be
queued until an application attaches as that endpoint, instead of being silently dropped.
The default targetHop ('final') is the natural one: only the final relay holds.

Section 7 asks for administrative limits (hold4Endpoint "may be used to facilitate
denial-of-service attacks"). :class:`HoldLimits` is the operator's policy: a maximum hold
time, maximum held bytes and entries per endpoint and per domain, and optionally "always
require that the dataTiming option also be present with a short-lived noLaterThan".
:func:`hold_decision` applies what can be decided without storage (the option, the
dataTiming deadline, the hold time, the per-data policy); the byte and count limits are
checked atomically by the store (:mod:`apexmesh.store.held`) which refuses with
:data:`QUOTA_CODE`.

Codes (the RFC names none): a hold refused because a quota is full is 450 (transient: it
may succeed once held data drains); a hold refused by policy (no dataTiming when one is
required, a noLaterThan longer than allowed, a single data larger than a whole quota) is
554 "transaction failed (e.g., policy violation)"; data whose deadline is already reached
is 550, as any missed noLaterThan (RFC 3342 section 2.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.hops import RecipientPlan
from apexmesh.apex.options import Option
from apexmesh.apex.timing import DATA_TIMING, RecipientTiming

#: RFC 3342 section 5.3.
HOLD_FOR_ENDPOINT: Final = "hold4Endpoint"
#: The options of sections 2 and 3, for the relay's OptionRegistry (beside PARTY_OPTIONS).
TIMING_OPTIONS: Final = frozenset({DATA_TIMING, HOLD_FOR_ENDPOINT})
#: A quota (bytes or entries, per endpoint or per domain) is full.
QUOTA_CODE: Final = ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT
#: The hold is against the operator's policy.
POLICY_CODE: Final = ApexReplyCode.TRANSACTION_FAILED
#: The data's noLaterThan is reached: nothing to hold.
EXPIRED_CODE: Final = ApexReplyCode.ACTION_NOT_TAKEN


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldLimits:
    """Operator-set limits on held data (RFC 3342 section 7). None: no limit."""

    #: Longest time any data is held (ms); the hold deadline is the earlier of this and
    #: the dataTiming deadline.
    max_hold_ms: int | None = 86_400_000
    #: Held bytes (payload octets) per endpoint.
    max_bytes_per_endpoint: int | None = 16 * 1024 * 1024
    #: Held entries per endpoint.
    max_count_per_endpoint: int | None = 100_000
    #: Held bytes per domain.
    max_bytes_per_domain: int | None = 1024 * 1024 * 1024
    #: Held entries per domain.
    max_count_per_domain: int | None = 1_000_000
    #: Hold only data that also carries a dataTiming with a non-zero noLaterThan.
    require_timing: bool = False
    #: Largest noLaterThan (ms) accepted for held data when set ("short-lived").
    max_no_later_than: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "max_hold_ms",
            "max_bytes_per_endpoint",
            "max_count_per_endpoint",
            "max_bytes_per_domain",
            "max_count_per_domain",
            "max_no_later_than",
        ):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"HoldLimits.{name} must be positive or None, not {value}")


def hold_options(plan: RecipientPlan) -> tuple[Option, ...]:
    """The applicable hold4Endpoint options of one recipient (501 if one has content)."""
    found = tuple(p.option for p in plan.process if p.option.internal == HOLD_FOR_ENDPOINT)
    for option in found:
        if option.content.strip():
            _dtd.fail("hold4Endpoint: the option contains nothing", trans_id=option.trans_id)
    return found


def wants_hold(plan: RecipientPlan) -> bool:
    """True when an applicable hold4Endpoint option asks to queue for this recipient."""
    return bool(hold_options(plan))


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldDecision:
    """What to do with data for a recipient that is not attached."""

    #: Queue it (then call the store's ``hold`` with ``deadline``).
    hold: bool
    #: Absolute time (ms) after which the held data is dropped (550 if reportErrors);
    #: None: held until attach (no dataTiming bound and no operator maximum).
    deadline: int | None = None
    #: When not held: the recipient's outcome code; None means "drop silently as without
    #: the option" (the relay's usual unattached outcome).
    code: ApexReplyCode | None = None
    #: Diagnostic for ``code``.
    text: str = ""


def hold_decision(
    plan: RecipientPlan,
    timing: RecipientTiming | None,
    limits: HoldLimits,
    *,
    now: int,
    size: int,
) -> HoldDecision:
    """Decide whether data (``size`` payload octets) for an unattached recipient is held.

    ``timing`` is the recipient's dataTiming state (:func:`apexmesh.apex.timing.state_of`)
    or None. The store still checks the byte and count quotas atomically.
    """
    if not wants_hold(plan):
        return HoldDecision(hold=False)
    deadline = timing.deadline if timing is not None else None
    if deadline is not None and now >= deadline:
        return HoldDecision(hold=False, code=EXPIRED_CODE, text="dataTiming: noLaterThan reached")
    if limits.require_timing and deadline is None:
        return HoldDecision(
            hold=False,
            code=POLICY_CODE,
            text="hold4Endpoint: this relay holds only data with a dataTiming noLaterThan",
        )
    if limits.max_no_later_than is not None and deadline is not None and timing is not None:
        longest = max(c.timing.no_later_than for c in timing.clocks)
        if longest > limits.max_no_later_than:
            return HoldDecision(
                hold=False,
                code=POLICY_CODE,
                text=f"hold4Endpoint: noLaterThan above {limits.max_no_later_than} ms",
            )
    for limit in (limits.max_bytes_per_endpoint, limits.max_bytes_per_domain):
        if limit is not None and size > limit:
            return HoldDecision(
                hold=False, code=POLICY_CODE, text="hold4Endpoint: data larger than the quota"
            )
    if limits.max_hold_ms is not None:
        cap = now + limits.max_hold_ms
        deadline = cap if deadline is None else min(deadline, cap)
    return HoldDecision(hold=True, deadline=deadline)


__all__ = [
    "EXPIRED_CODE",
    "HOLD_FOR_ENDPOINT",
    "POLICY_CODE",
    "QUOTA_CODE",
    "TIMING_OPTIONS",
    "HoldDecision",
    "HoldLimits",
    "hold_decision",
    "hold_options",
    "wants_hold",
]
