"""Held data at the relay (RFC 3342 section 3, hold4Endpoint), around the sans-I/O
decision of :mod:`apexmesh.apex.holding` and the Redis store of :mod:`apexmesh.store.held`.

* **Hold, before ok.** Data with an applicable hold4Endpoint for a recipient of this
  domain that is attached nowhere is written to Redis (quota checks and all indexes in one
  Lua script) *before* the relay answers ``ok``: no relay process ever holds accepted data
  in memory alone, so the death of any relay process loses nothing. A full quota refuses
  the data with 450, an operator policy with 554 (``HoldLimits``), never a silent drop.
* **Drain, on attach.** When an endpoint attaches, on any pod, that pod becomes the one
  drainer (a lease in Redis), delivers the held data in order on the new attachment,
  each with its dataTiming lowered by the time it was held (the 60000 -> 18000 of the
  RFC's example), and removes an entry only after the recipient's ``ok`` (or its error:
  the application has decided). Delivery is at least once: a drainer that dies between
  the ``ok`` and the removal leaves the entry to be delivered again.
* **Sweep, on every pod.** Held data whose deadline is reached is removed and reported
  (550 with reportErrors); transient reports (350) of held data are taken once from Redis
  by whichever pod sees them first; the per-domain gauges are refreshed from Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from apexmesh.aio.tasks import within
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import MimePart, build_payload, parse_payload
from apexmesh.apex.data import Data
from apexmesh.apex.elements import parse_message
from apexmesh.apex.errors import ApexError
from apexmesh.apex.holding import HoldDecision, HoldLimits, hold_decision
from apexmesh.apex.hops import RecipientPlan, plan_data
from apexmesh.apex.options import OptionRegistry
from apexmesh.apex.report import carries_status_response
from apexmesh.apex.timing import (
    RecipientTiming,
    ReportKind,
    TimerKind,
    dropped,
    forward,
    mark_report_after_fired,
    state_of,
    tick,
    timing_options,
)
from apexmesh.beep.mime import beep_xml
from apexmesh.relay.outcomes import Outcome
from apexmesh.store.held import ATTACHED, HeldEntry, HeldStore, Refused

if TYPE_CHECKING:
    from apexmesh.apex.endpoint import Endpoint
    from services.relay.edge import ApexChannel
    from services.relay.metrics import RelayMetrics
    from services.relay.timekeeper import Timekeeper

_log = logging.getLogger(__name__)

#: Held data delivered per round of a drain (and in flight on the attachment at once).
DRAIN_BATCH: Final = 64


def payload_for(
    forward_data: Data, received: Data, parts: tuple[MimePart, ...], raw: bytes
) -> bytes:
    """The BEEP payload carrying ``forward_data``: the received bytes when it is the data
    as received, else the data with the same MIME parts (content is never modified)."""
    if forward_data is received or forward_data == received:
        return raw
    if not parts:
        return beep_xml(forward_data.to_xml())
    return build_payload(forward_data, parts, boundary=secrets.token_hex(16))


def timing_state(plan: RecipientPlan, data: Data, received_at: int) -> RecipientTiming | None:
    """The recipient's dataTiming state, None when no dataTiming applies to it."""
    if not timing_options(plan):
        return None
    return state_of(
        plan,
        originator=data.originator.identity,
        received_at=received_at,
        is_report=carries_status_response(data),
    )


@dataclass(frozen=True, slots=True)
class _Unpacked:
    """A held entry read back: its data, MIME parts and timing state."""

    data: Data
    parts: tuple[MimePart, ...]
    state: RecipientTiming | None


class Holder:
    """hold4Endpoint for one relay pod."""

    def __init__(
        self,
        *,
        store: HeldStore,
        limits: HoldLimits,
        registry: OptionRegistry,
        timekeeper: Timekeeper,
        metrics: RelayMetrics,
        pod_id: str,
        domains: tuple[str, ...],
        attached: Callable[[Endpoint], ApexChannel | None],
        sweep_seconds: float = 0.25,
    ) -> None:
        self.store = store
        self.limits = limits
        self._registry = registry
        self._timekeeper = timekeeper
        self._metrics = metrics
        self._pod_id = pod_id
        self._domains = domains
        self._attached = attached
        self._sweep_seconds = sweep_seconds
        self._drains: dict[Endpoint, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    # ----------------------------------------------------------------- hold

    def decide(
        self, plan: RecipientPlan, timing: RecipientTiming | None, size: int
    ) -> HoldDecision:
        """Whether data of ``size`` octets for an unattached recipient is held."""
        return hold_decision(plan, timing, self.limits, now=self._timekeeper.now(), size=size)

    async def hold(
        self,
        endpoint: Endpoint,
        payload: bytes,
        decision: HoldDecision,
        timing: RecipientTiming | None,
        received_at: int,
        *,
        unless_attached: bool = False,
    ) -> int | Refused:
        """Write one recipient's data to Redis; the entry id once it is there. It is held
        as of ``received_at``, when this relay received it: the time it spends here before
        and while held counts against its dataTiming."""
        report_at = None
        if timing is not None:
            report_at = next(
                (t.at for t in timing.timers() if t.kind is TimerKind.REPORT_AFTER), None
            )
        result = await self.store.hold(
            str(endpoint),
            endpoint.domain,
            payload,
            now=received_at,
            deadline=decision.deadline,
            limits=self.limits,
            report_at=report_at,
            unless_attached=unless_attached,
        )
        if isinstance(result, Refused):
            if result.reason != ATTACHED:
                self._metrics.count(self._metrics.held, "refused")
        else:
            self._metrics.count(self._metrics.held, "held")
        return result

    async def forget(self, endpoint: Endpoint, ids: list[int]) -> None:
        """Take back entries written for data that is refused after all (one of its
        other recipients could not be held): the sender gets the error, not a partial
        hold."""
        await self.store.ack(str(endpoint), ids)

    # ----------------------------------------------------------------- drain

    def drain(self, endpoint: Endpoint) -> None:
        """Deliver what is held for ``endpoint``, now attached to this pod (in the
        background; one drain per endpoint at a time in this pod, one in the domain)."""
        running = self._drains.get(endpoint)
        if running is not None and not running.done():
            return
        task = asyncio.get_running_loop().create_task(self._drain(endpoint))
        self._drains[endpoint] = task
        task.add_done_callback(lambda _: self._drains.pop(endpoint, None))

    async def _drain(self, endpoint: Endpoint) -> None:
        key = str(endpoint)
        owner = f"{self._pod_id}/{secrets.token_hex(6)}"
        try:
            if not await self.store.has_held(key):
                return  # nothing held: no lease to take (data held later wakes a drain)
            while self._attached(endpoint) is not None:
                if await self.store.claim_drain(key, owner) is not None:
                    return  # another pod drains; it re-reads before it lets go
                try:
                    finished = await self._drain_claimed(endpoint, key, owner)
                finally:
                    await self.store.release_drain(key, owner)
                # Data held while the drain was ending would wait for the next attach:
                # look once more now that the lease is released.
                if not finished or not await self.store.read(key, limit=1):
                    return
        except Exception:  # noqa: BLE001  (Redis or a bug: the data stays held)
            _log.exception("draining held data of %s failed", endpoint)

    async def _drain_claimed(self, endpoint: Endpoint, key: str, owner: str) -> bool:
        """Deliver batches until nothing is left (True) or the endpoint leaves (False)."""
        after = 0
        while True:
            channel = self._attached(endpoint)
            if channel is None:
                return False
            entries = await self.store.read(key, after=after, limit=DRAIN_BATCH)
            if not entries:
                return True
            sent = [(entry, self._deliver(entry, channel)) for entry in entries]
            done: list[int] = []
            left = False
            for entry, outcome in sent:
                result = await outcome
                if not result.ok and self._attached(endpoint) is not channel:
                    left = True  # not delivered: the attachment ended; keep it held
                    break
                done.append(entry.id)
                self._metrics.count(
                    self._metrics.held, "delivered" if result.ok else "refused_by_endpoint"
                )
            await self.store.ack(key, done)
            if left:
                return False
            after = entries[-1].id
            await self.store.claim_drain(key, owner)  # renew the lease between batches

    def _deliver(self, entry: HeldEntry, channel: ApexChannel) -> asyncio.Future[Outcome]:
        """One held entry to the attachment, its dataTiming adjusted to the time held."""
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        try:
            unpacked = self._unpack(entry, report_taken=entry.report_at is None)
        except ApexError as exc:
            _log.warning("held entry %s of %s is unreadable: %s", entry.id, entry.endpoint, exc)
            future.set_result(Outcome(int(exc.code), str(exc)))
            return future
        if unpacked.state is None:
            return channel.deliver(entry.payload)
        now = self._timekeeper.now()
        moved = forward(unpacked.state, unpacked.data, now)
        self._timekeeper.report(moved.step.reports)
        if moved.data is None:
            self._metrics.count(self._metrics.held, "expired")
            future.set_result(self._timekeeper.missed(moved.step))
            return future
        payload = payload_for(moved.data, unpacked.data, unpacked.parts, entry.payload)
        return self._timekeeper.track(moved.step.state, moved.step.timers, channel.deliver(payload))

    def _unpack(self, entry: HeldEntry, *, report_taken: bool = False) -> _Unpacked:
        """Parse a held payload back (the data for this recipient alone, as received at
        the final relay) and rebuild its timing state from the time it was held;
        ``report_taken``: its transient report was taken from the store (sent by some
        pod) or none was due, so reportAfter fires no more."""
        payload = parse_payload(entry.payload)
        data = parse_message(payload.control)
        if not isinstance(data, Data):
            raise ApexError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "held payload is not data")
        plan = plan_data(data, self._registry, is_final=lambda _: True).recipients[0]
        state = timing_state(plan, data, entry.held_at)
        if state is not None and report_taken:
            state = mark_report_after_fired(state)
        return _Unpacked(data=data, parts=tuple(payload.parts.values()), state=state)

    # ----------------------------------------------------------------- sweep

    def start(self) -> None:
        """Start the sweeper (expiry, transient reports, gauges)."""
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.sweep()
            except Exception:  # noqa: BLE001  (Redis away: try again next round)
                _log.exception("sweeping held data failed")
            # Woken by close() too: a cancellation swallowed inside a Redis call must not
            # leave this loop sleeping forever.
            with contextlib.suppress(TimeoutError):
                await within(self._stopping.wait(), self._sweep_seconds)

    async def sweep(self) -> None:
        """One round: expire, send due transient reports, refresh the gauges."""
        now = self._timekeeper.now()
        for entry in await self.store.expire(now):
            self._metrics.count(self._metrics.held, "expired")
            self._report_expired(entry, now)
        for entry in await self.store.due_reports(now):
            self._report_transient(entry, now)
        for domain in self._domains:
            stats = await self.store.stats(domain, now)
            self._metrics.held_count.labels(domain).set(stats.count)
            self._metrics.held_bytes.labels(domain).set(stats.bytes)
            self._metrics.held_oldest_age.labels(domain).set((stats.oldest_age_ms or 0) / 1000)

    def _report_expired(self, entry: HeldEntry, now: int) -> None:
        state = self._state_of(entry)
        if state is None:
            return
        step = tick(state, now)
        if step.expired:
            self._timekeeper.missed(step)  # its own noLaterThan: 550 with reportErrors
        else:
            self._timekeeper.report(dropped(state))  # the operator's maximum hold time

    def _report_transient(self, entry: HeldEntry, now: int) -> None:
        state = self._state_of(entry)
        if state is None:
            return
        step = tick(state, now)
        if not step.expired:
            self._timekeeper.report(r for r in step.reports if r.kind is ReportKind.TRANSIENT)

    def _state_of(self, entry: HeldEntry) -> RecipientTiming | None:
        try:
            return self._unpack(entry).state
        except ApexError as exc:
            _log.warning("held entry %s of %s is unreadable: %s", entry.id, entry.endpoint, exc)
            return None

    async def close(self, timeout: float = 2.0) -> None:  # noqa: ASYNC109
        """Stop sweeping and draining (held data stays in Redis for the next attach;
        a drain stopped between a delivery and its removal delivers it again later)."""
        self._stopping.set()
        tasks = [t for t in (self._sweeper, *self._drains.values()) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=timeout)
            if stuck:
                _log.warning("%d held-data tasks did not stop within %.1fs", len(stuck), timeout)


__all__ = ["DRAIN_BATCH", "Holder", "payload_for", "timing_state"]
