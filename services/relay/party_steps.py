"""The party pack around a final delivery (RFC 3342 sections 2 and 3), for the executor.

dataTiming: the remaining times are lowered by the time spent at this relay before the
data goes on (to another relay, or to the endpoint), deadlines watched and reports sent
(services/relay/timekeeper.py). hold4Endpoint: an endpoint that turns out not to be
attached when its data arrive (it detached between ``ok`` and delivery) has the data
held in Redis instead (services/relay/holder.py), and the pod that holds it is woken to
drain it if it attached meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from apexmesh.apex.holding import wants_hold
from apexmesh.apex.hops import RecipientPlan
from apexmesh.apex.timing import Timer, forward, timing_options
from apexmesh.relay.outcomes import HELD, Outcome
from apexmesh.relay.routing import Route, RouteKind
from apexmesh.store.held import Refused
from services.relay.futures import chain, done
from services.relay.holder import payload_for, timing_state
from services.relay.jobs import Custody, Job

if TYPE_CHECKING:
    from apexmesh.apex.endpoint import Endpoint
    from services.relay.attachments import AttachmentTable
    from services.relay.edge import ApexChannel
    from services.relay.holder import Holder
    from services.relay.locations import Locations
    from services.relay.peers import PeerDelivery
    from services.relay.timekeeper import Timekeeper

#: How the executor sends one copy (its custody reported to the job's Custody).
Deliver = Callable[[Job, Route["ApexChannel"], Custody], Awaitable[asyncio.Future[Outcome]]]


class PartySteps:
    """dataTiming and hold4Endpoint around deliveries (see the module docstring)."""

    def __init__(
        self,
        *,
        timekeeper: Timekeeper,
        table: AttachmentTable,
        locations: Locations,
        peers: PeerDelivery,
    ) -> None:
        self._timekeeper = timekeeper
        self._table = table
        self._locations = locations
        self._peers = peers
        #: hold4Endpoint (RFC 3342 section 3); None: the option is not offered.
        self.holder: Holder | None = None

    def time_next_hop(self, job: Job, routed: Route[ApexChannel]) -> Route[ApexChannel]:
        """Step 5.2 with dataTiming: the remaining times lowered by the time spent here,
        or DONE with the 550 when the deadline is reached or cannot be met."""
        plan = routed.plan
        if plan.forward is None or not timing_options(plan):
            return routed
        keeper = self._timekeeper
        state = timing_state(plan, job.data, job.received_at)
        assert state is not None  # noqa: S101  (timing options exist)
        moved = forward(state, plan.forward, keeper.now(), min_transit_ms=keeper.min_transit_ms)
        if moved.data is None:
            return dataclasses.replace(
                routed, kind=RouteKind.DONE, outcome=keeper.missed(moved.step)
            )
        keeper.report(moved.step.reports)
        return dataclasses.replace(routed, plan=dataclasses.replace(plan, forward=moved.data))

    async def deliver_final(
        self, job: Job, routed: Route[ApexChannel], custody: Custody, deliver: Deliver
    ) -> asyncio.Future[Outcome]:
        """Step 5.3, with the party pack: dataTiming deadlines and reports around the
        delivery (``deliver``, the executor's), hold4Endpoint when the endpoint turns out
        not to be attached."""
        plan = routed.plan
        if not plan.process:
            return await deliver(job, routed, custody)
        keeper = self._timekeeper
        received = plan  # as received: what is held if the endpoint is gone
        state = timing_state(plan, job.data, job.received_at)
        timers: tuple[Timer, ...] = ()
        if state is not None and plan.forward is not None:
            moved = forward(state, plan.forward, keeper.now())
            if moved.data is None:
                missed = keeper.missed(moved.step)
                custody.known(missed)
                return done(missed)
            keeper.report(moved.step.reports)
            state, timers = moved.step.state, moved.step.timers
            routed = dataclasses.replace(routed, plan=dataclasses.replace(plan, forward=moved.data))
        delivery = await deliver(job, routed, custody)
        if self.holder is not None and wants_hold(routed.plan):
            delivery = chain(
                delivery,
                lambda outcome: outcome.not_attached,
                lambda outcome: self._hold_late(job, received, outcome),
            )
        if state is None:
            return delivery
        return keeper.track(state, timers, delivery)

    async def _hold_late(self, job: Job, plan: RecipientPlan, outcome: Outcome) -> Outcome:
        """The endpoint detached between ``ok`` and delivery: hold its data now."""
        holder = self.holder
        endpoint = plan.recipient.identity
        if holder is None or plan.forward is None:
            return outcome
        timing = timing_state(plan, job.data, job.received_at)
        body = payload_for(plan.forward, job.data, job.parts, job.raw)
        decision = holder.decide(plan, timing, len(body))
        if not decision.hold:
            return outcome if decision.code is None else Outcome(int(decision.code), decision.text)
        result = await holder.hold(endpoint, body, decision, timing, job.received_at)
        if isinstance(result, Refused):
            return Outcome(result.code, result.text)
        await self.wake_drainer(endpoint)
        return HELD

    async def wake_drainer(self, endpoint: Endpoint) -> None:
        """The endpoint may have attached while its data was being held (after the
        drain of its attach had looked): have the pod holding it drain again."""
        holder = self.holder
        if holder is None:
            return
        if endpoint in self._table:
            holder.drain(endpoint)
            return
        address = await self._locations.lookup(endpoint)
        if address is not None:
            self._peers.drain(address, endpoint)


__all__ = ["Deliver", "PartySteps"]
