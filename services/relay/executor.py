"""Carrying out the routing decision (apexmesh/relay/routing.py) for accepted data.

The executor asks the decision, fetches what the decision says is missing (an access
decision, an endpoint's location) and decides again, then sends: on this pod's channels
within their bounds (services/relay/flow.py), to other pods over their delivery streams
(services/relay/peers.py), to well-known services, to other domains' relays. It reports
each copy's custody to the job's :class:`~services.relay.jobs.Custody` (which answers the
sender) and each outcome to the :class:`~services.relay.reports.Reporter`.

One retry policy: a delivery whose outcome says the location was stale (the pod asked
no longer holds the endpoint, or is gone) forgets that location and is decided once
more with a fresh one; whatever that second attempt gives is the outcome.

The fast path (:meth:`Executor.route_plain`) is the same decision with every fact
cached: plain data (one recipient, no option) to an endpoint attached here with room, or
on another pod whose stream has room, is sent before the data is even answered.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from apexmesh.apex.access import Decision
from apexmesh.apex.data import Data
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.hops import RecipientPlan, combine
from apexmesh.apex.report import PendingReport
from apexmesh.relay.outcomes import Outcome, Reason
from apexmesh.relay.routing import MISSING, Missing, Route, RouteKind, partition, route
from services.relay.deciding import Decider
from services.relay.futures import (
    answer_ok,
    chain,
    copy_future,
    done,
    group_ended,
    repeat,
    resolver,
    settled_outcome,
)
from services.relay.grouping import Group
from services.relay.jobs import Answer, Custody, Job, all_shed
from services.relay.party_steps import PartySteps
from services.relay.payloads import group_of, job_payload
from services.relay.reports import GroupDelivery, may_owe_reports

if TYPE_CHECKING:
    from apexmesh.store.access_cache import CachedAccessChecker
    from services.relay.attachments import AttachmentTable
    from services.relay.edge import ApexChannel
    from services.relay.holder import Holder
    from services.relay.locations import Locations
    from services.relay.mesh import MeshPool
    from services.relay.metrics import RelayMetrics
    from services.relay.peers import PeerDelivery
    from services.relay.reports import Reporter
    from services.relay.timekeeper import Timekeeper
    from services.relay.topics import TopicFanout
    from services.relay.wellknown import WellKnownServices

_log = logging.getLogger(__name__)

#: A decision the fast path could not take (the data then waits in its origin's order).
NOT_NOW: Final = MISSING

#: Decisions made from the cache that still lack a fact (fetched by :meth:`Executor.decide`).
_NEEDS_FACTS: Final = frozenset({RouteKind.NEED_ACCESS, RouteKind.NEED_LOCATION})


class Executor:
    """Routes accepted data (see the module docstring)."""

    def __init__(
        self,
        *,
        domains: frozenset[str],
        access: CachedAccessChecker,
        table: AttachmentTable,
        locations: Locations,
        peers: PeerDelivery,
        mesh: MeshPool,
        services: WellKnownServices,
        timekeeper: Timekeeper,
        reporter: Reporter,
        metrics: RelayMetrics,
    ) -> None:
        self.domains = domains
        #: Where a recipient goes when the cache lacks a fact (services/relay/deciding.py).
        self.decider = Decider(domains=domains, access=access, table=table, locations=locations)
        self.table = table
        self.locations = locations
        self.facts = self.decider.facts
        self.peers = peers
        self.mesh = mesh
        self.services = services
        self.timekeeper = timekeeper
        self.reporter = reporter
        self.metrics = metrics
        #: dataTiming and hold4Endpoint around final deliveries (RFC 3342 sections 2, 3).
        self.party = PartySteps(
            timekeeper=timekeeper, table=table, locations=locations, peers=peers
        )
        self._background: set[asyncio.Task[Any]] = set()
        self._to_pod = metrics.deliveries.labels("pod")
        self._to_local = metrics.deliveries.labels("local")
        self._to_topic = metrics.deliveries.labels("topic")
        #: Plain publications fanned out by this relay (services/relay/topics.py); None:
        #: every publication goes to the pubsub pods.
        self.topics: TopicFanout | None = None

    @property
    def holder(self) -> Holder | None:
        """hold4Endpoint (RFC 3342 section 3); None: the option is not offered."""
        return self.party.holder

    @holder.setter
    def holder(self, holder: Holder | None) -> None:
        self.party.holder = holder

    # ------------------------------------------------------------------ the fast path

    def route_plain(
        self, data: Data, endpoint: Endpoint, raw: bytes
    ) -> Answer | asyncio.Future[Answer] | Missing:
        """Steps 4 and 5, without waiting, for plain data (one recipient, no option) when
        every fact is cached and there is room: the answer now (None: ``ok``), or a
        future of it once the other pod answered; :data:`NOT_NOW` (nothing done) when
        the data must wait in its origin's order."""
        originator = data.originator.identity
        plan = RecipientPlan(
            recipient=data.recipients[0], final=endpoint.domain in self.domains, forward=data
        )
        routed = route(plan, originator, self.facts, domains=self.domains)
        kind = routed.kind
        if kind is RouteKind.LOCAL:
            channel = routed.channel
            assert channel is not None  # noqa: S101  (LOCAL routes name one)
            octets = len(raw)
            if not channel.flow.take_now(octets):
                return NOT_NOW
            self._to_local.inc()
            channel.transmit(
                raw, octets, functools.partial(self.reporter.count, originator, endpoint)
            )
            return None
        if kind is RouteKind.POD:
            if not self.peers.has_room(routed.address):
                return NOT_NOW
            self._to_pod.inc()
            answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
            settle = functools.partial(self._settled_plain, routed, originator, raw, answer)
            taken = functools.partial(answer_ok, answer)
            self.peers.send(routed.address, endpoint, originator, raw, settle, taken)
            return answer
        if kind is RouteKind.DONE:
            assert routed.outcome is not None  # noqa: S101  (DONE routes carry one)
            self.reporter.count(originator, endpoint, routed.outcome)
            return None
        return NOT_NOW

    def route_now(self, job: Job) -> bool:
        """:meth:`route_plain` for a job whose plan is the trivial one (the dispatcher
        tries it before queueing); False, with nothing done, otherwise."""
        plans = job.plan.recipients
        if len(plans) != 1 or job.held:
            return False
        plan = plans[0]
        if plan.forward is not job.data or plan.process or not plan.final:
            return False
        answer = self.route_plain(job.data, plan.recipient.identity, job.raw)
        if answer is NOT_NOW:
            return False
        custody = job.custody
        assert custody is not None  # noqa: S101  (jobs routed here carry one)
        if isinstance(answer, asyncio.Future):
            answer.add_done_callback(functools.partial(copy_future, target=custody.future))
        elif not custody.future.done():
            custody.future.set_result(answer)
        return True

    def _settled_plain(
        self,
        routed: Route[ApexChannel],
        originator: Endpoint,
        payload: bytes,
        answer: asyncio.Future[Answer],
        outcome: Outcome,
    ) -> None:
        """A plain delivery through another pod ended: a stale location is retried
        before the outcome counts and the data is answered."""
        if not outcome.stale_location:
            self._conclude_plain(originator, routed.endpoint, answer, outcome)
            return
        retry = asyncio.ensure_future(self._retry(routed, originator, payload, outcome))
        self._keep(retry)
        retry.add_done_callback(
            lambda done: self._conclude_plain(
                originator, routed.endpoint, answer, settled_outcome(done)
            )
        )

    def _conclude_plain(
        self,
        originator: Endpoint,
        endpoint: Endpoint,
        answer: asyncio.Future[Answer],
        outcome: Outcome,
    ) -> None:
        self.reporter.count(originator, endpoint, outcome)
        if answer.done():
            return
        if outcome.reason is Reason.SHED:
            answer.set_exception(all_shed())
        else:
            answer.set_result(None)

    # ------------------------------------------------------------------ dispatch

    async def dispatch(self, job: Job) -> None:
        """Route every recipient of an accepted data; its custody answers the sender,
        its outcomes are counted and reported in the background."""
        custody = job.custody
        assert custody is not None  # noqa: S101  (every routed job carries one)
        originator = job.data.originator.identity
        outcomes: dict[Endpoint, asyncio.Future[Outcome]] = {}
        hopped: list[PendingReport] = []
        routes: list[Route[ApexChannel]] = []
        #: How each recipient travelled (for traces, services/relay/tracing.py).
        where: dict[Endpoint, tuple[RouteKind, str]] = {}
        plans = job.plan.recipients
        known: dict[str, Decision] | None = None
        for index, plan in enumerate(plans):
            endpoint = plan.recipient.identity
            if endpoint in job.held:
                continue
            routed = route(plan, originator, self.facts, domains=self.domains)
            if routed.kind is RouteKind.NEED_ACCESS and known is None and index + 1 < len(plans):
                # The first cold recipient: its decision and the others' in one call.
                known = await self.decider.decide_ahead(plans[index:], originator, job.held)
            if routed.kind in _NEEDS_FACTS:
                routed = await self.decider.decide(plan, originator, known, routed)
            if routed.kind is RouteKind.DOMAIN:
                routed = self.party.time_next_hop(job, routed)
            if routed.kind is RouteKind.DONE:
                assert routed.outcome is not None  # noqa: S101  (DONE routes carry one)
                outcomes[endpoint] = done(routed.outcome)
                custody.known(routed.outcome)
                if routed.report is not None:
                    hopped.append(routed.report)
                continue
            routes.append(routed)
            where[endpoint] = (routed.kind, routed.address)
        parts = partition(routes)
        for routed in parts.single:
            outcomes[routed.endpoint] = await self.party.deliver_final(
                job, routed, custody, self._deliver
            )
        groups: list[GroupDelivery] = []
        for channel, members in parts.local_groups:
            await self._deliver_local_group(job, channel, members, custody, outcomes, groups)
        for address, members in parts.pod_groups:
            await self._deliver_pod_group(job, address, members, custody, outcomes, groups)
        for domain, members in parts.domains:
            forwarded = combine([member.plan for member in members])
            copy = custody.copy()
            sent = self.mesh.send(domain, job_payload(job, forwarded), copy.taken)
            sent.add_done_callback(copy.ended)
            for member in members:
                outcomes[member.endpoint] = sent
        custody.seal()
        if not hopped and not may_owe_reports(job):
            # Nothing to report whatever happens: outcomes are only counted and logged,
            # by callbacks rather than one more task per data (the common case).
            for endpoint, future in outcomes.items():
                future.add_done_callback(
                    functools.partial(self.reporter.record, originator, endpoint)
                )
            for endpoints, grouped in groups:
                grouped.add_done_callback(
                    functools.partial(self.reporter.record_group, originator, endpoints)
                )
            return
        self._keep(
            asyncio.get_running_loop().create_task(
                self.reporter.conclude(job, outcomes, tuple(hopped), groups, where)
            )
        )

    async def _publish(
        self, topics: TopicFanout, job: Job, routed: Route[ApexChannel], payload: bytes
    ) -> Outcome:
        """A publication fanned out here when it is plain (services/relay/topics.py),
        else delivered to the pubsub pods."""
        outcome = await topics.publish(routed.endpoint, job.data, job.parts)
        if outcome is not None:
            self._to_topic.inc()
            return outcome
        return await self.services.deliver(routed.endpoint, job.data, payload, job.parts)

    async def _deliver(
        self, job: Job, routed: Route[ApexChannel], custody: Custody
    ) -> asyncio.Future[Outcome]:
        """One copy to its next hop; its custody goes to ``custody``."""
        plan = routed.plan
        assert plan.forward is not None  # noqa: S101  (routed, so a forward exists)
        payload = job_payload(job, plan.forward)
        kind = routed.kind
        if kind is RouteKind.SERVICE:
            topics = self.topics
            served: asyncio.Future[Outcome]
            if topics is not None and topics.may_serve(routed.endpoint, job.data):
                served = asyncio.ensure_future(self._publish(topics, job, routed, payload))
            else:
                served = self.services.deliver(routed.endpoint, job.data, payload, job.parts)
            custody.settle_with(served)
            return served
        if kind is RouteKind.LOCAL:
            assert routed.channel is not None  # noqa: S101  (LOCAL routes name one)
            self.metrics.count(self.metrics.deliveries, "local")
            return await self._queue(routed.channel, payload, custody)
        if kind is RouteKind.POD:
            self.metrics.count(self.metrics.deliveries, "pod")
            copy = custody.copy()
            delivery = await self._to_other_pod(
                routed, job.data.originator.identity, payload, copy.taken
            )
            delivery.add_done_callback(copy.ended)
            return delivery
        raise AssertionError(f"no delivery for a {kind.value} route")  # pragma: no cover

    async def _queue(
        self, channel: ApexChannel, payload: bytes, custody: Custody
    ) -> asyncio.Future[Outcome]:
        """Queue one data on a channel of this pod, waiting for room (custody once it is
        queued, or shed)."""
        result: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        taken = channel.queue_data(payload, resolver(result))
        if isinstance(taken, asyncio.Future):
            taken = await taken
        custody.known(taken)
        return result

    async def _to_other_pod(
        self,
        routed: Route[ApexChannel],
        originator: Endpoint,
        payload: bytes,
        taken: Callable[[], None],
    ) -> asyncio.Future[Outcome]:
        """Deliver through the pod holding the endpoint (waiting for room on its stream);
        ``taken`` is told when that pod queued it; a stale location is retried once (see
        the module docstring)."""
        room = self.peers.room(routed.address)
        if room is not None:
            await room
        first = self.peers.deliver(routed.address, routed.endpoint, originator, payload, taken)
        return chain(
            first,
            lambda outcome: outcome.stale_location,
            lambda outcome: self._retry(routed, originator, payload, outcome),
        )

    async def _retry(
        self, routed: Route[ApexChannel], originator: Endpoint, payload: bytes, outcome: Outcome
    ) -> Outcome:
        """The one retry of a stale location: decide again with a fresh location."""
        self.locations.forget(routed.endpoint)
        again = await self.decider.decide(routed.plan, originator)
        if again.kind is RouteKind.DONE:
            assert again.outcome is not None  # noqa: S101  (DONE routes carry one)
            return again.outcome
        if again.kind is RouteKind.LOCAL:
            assert again.channel is not None  # noqa: S101  (LOCAL routes name one)
            result: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
            taken = again.channel.queue_data(payload, resolver(result))
            if isinstance(taken, asyncio.Future):
                taken = await taken
            return taken if taken is not None else await result
        if again.kind is RouteKind.POD and again.address != routed.address:
            return await self.peers.deliver(again.address, routed.endpoint, originator, payload)
        return outcome

    async def _deliver_local_group(
        self,
        job: Job,
        channel: ApexChannel,
        members: tuple[Route[ApexChannel], ...],
        custody: Custody,
        outcomes: dict[Endpoint, asyncio.Future[Outcome]],
        groups: list[GroupDelivery],
    ) -> None:
        """Recipients attached over one channel of this pod: one data naming them all."""
        group = await self._group_or_each(job, members, custody, outcomes)
        if group is None:
            return
        self.metrics.count(self.metrics.deliveries, "local", len(members))
        one = await self._queue(channel, group.payload(range(len(members))), custody)
        groups.append((group.recipients, repeat(one, len(members))))

    async def _deliver_pod_group(
        self,
        job: Job,
        address: str,
        members: tuple[Route[ApexChannel], ...],
        custody: Custody,
        outcomes: dict[Endpoint, asyncio.Future[Outcome]],
        groups: list[GroupDelivery],
    ) -> None:
        """Recipients attached to one other pod: one request that pod splits by channel."""
        group = await self._group_or_each(job, members, custody, outcomes)
        if group is None:
            return
        self.metrics.count(self.metrics.deliveries, "pod", len(members))
        room = self.peers.room(address)
        if room is not None:
            await room
        originator = job.data.originator.identity
        copy = custody.copy()
        sent = self.peers.deliver_group(address, group, originator, copy.taken)
        delivery = self._relocate(members, group, originator, sent)
        delivery.add_done_callback(functools.partial(group_ended, copy))
        groups.append((group.recipients, delivery))

    async def _group_or_each(
        self,
        job: Job,
        members: Sequence[Route[ApexChannel]],
        custody: Custody,
        outcomes: dict[Endpoint, asyncio.Future[Outcome]],
    ) -> Group | None:
        """The members as one :class:`Group`; None, once each was delivered on its own,
        when the payload cannot be split around them (as without grouping)."""
        forwards = [member.plan.forward for member in members if member.plan.forward is not None]
        group = group_of(job, forwards)
        if group is None:
            for member in members:
                outcomes[member.endpoint] = await self._deliver(job, member, custody)
        return group

    def _relocate(
        self,
        members: tuple[Route[ApexChannel], ...],
        group: Group,
        originator: Endpoint,
        sent: asyncio.Future[tuple[Outcome, ...]],
    ) -> asyncio.Future[tuple[Outcome, ...]]:
        """The group's outcomes, after the one retry (see :meth:`_retry`) of the members
        that were not where they were thought to be."""
        result: asyncio.Future[tuple[Outcome, ...]] = asyncio.get_running_loop().create_future()

        async def again(outcomes: tuple[Outcome, ...], stale: list[int]) -> tuple[Outcome, ...]:
            updated = list(outcomes)
            for index in stale:
                updated[index] = await self._retry(
                    members[index], originator, group.payload((index,)), outcomes[index]
                )
            return tuple(updated)

        def settled(future: asyncio.Future[tuple[Outcome, ...]]) -> None:
            if future.cancelled() or future.exception() is not None:
                copy_future(future, result)
                return
            outcomes = future.result()
            stale = [i for i, outcome in enumerate(outcomes) if outcome.stale_location]
            if not stale:
                result.set_result(outcomes)
                return
            follow = asyncio.ensure_future(again(outcomes, stale))
            follow.add_done_callback(lambda done: copy_future(done, result))

        sent.add_done_callback(settled)
        return result

    def _keep(self, task: asyncio.Future[Any]) -> None:
        self._background.add(task)  # type: ignore[arg-type]
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Wait for background conclusions (bounded by the caller's shutdown grace)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)


__all__ = ["NOT_NOW", "Executor"]
