"""Relay processing of data (RFC 3340 section 4.4.4.1) and of attach, bind and terminate.

Steps 1 to 3 run here, before the answer: the BEEP client must be allowed to originate on
behalf of the originator (537), applicable per-data options are processed (504 for a
mustUnderstand option this relay does not understand), hold4Endpoint writes data for
unattached recipients to Redis before ``ok``. Steps 4 and 5 run in arrival order per
origin (a :class:`~services.relay.jobs.Dispatcher` per APEX channel): the routing
decision (apexmesh/relay/routing.py) and its executor (services/relay/executor.py).

The answer goes once the data is in custody (services/relay/jobs.py): at once for data
to an endpoint attached here with room in its queue, once the next hop answered for data
that leaves this pod. Under load the answers wait, and the sender's BEEP window with them.

The module map of the relay's data path:

* :mod:`apexmesh.relay.routing`: where each recipient goes (pure decision); executor:
  fetches missing facts, sends, the one retry policy; flow: bounds per endpoint;
* jobs: accepted data, per-origin order, custody; reports: outcomes, statusResponses;
* attachments, locations: the facts; payloads, grouping: bytes sent on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from apexmesh.apex.access import CORE_ATTACH, CORE_DATA
from apexmesh.apex.associations import Association, Attachment
from apexmesh.apex.codes import ApexReplyCode, for_code
from apexmesh.apex.content import Payload
from apexmesh.apex.data import Data
from apexmesh.apex.elements import Attach, Bind
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.holding import EXPIRED_CODE, QUOTA_CODE, hold_options, wants_hold
from apexmesh.apex.hops import DataPlan, plain, plan_data
from apexmesh.apex.memo import ParseMemo
from apexmesh.apex.options import OptionRegistry
from apexmesh.apex.party import OVERRIDE_CODE, OVERRIDE_TEXT
from apexmesh.relay.routing import party_steps
from apexmesh.store.held import ATTACHED
from services.relay.attachments import AttachmentTable
from services.relay.edge import Mode
from services.relay.executor import NOT_NOW, Executor
from services.relay.flow import DEFAULT_LIMITS, FlowLimits
from services.relay.holder import Holder, payload_for, timing_state
from services.relay.jobs import Answer, Custody, Dispatcher, Job
from services.relay.locations import Locations
from services.relay.reports import Reporter, may_owe_reports
from services.relay.timekeeper import Timekeeper, wall_ms

if TYPE_CHECKING:
    from apexmesh.store.access_cache import CachedAccessChecker
    from apexmesh.store.attachments import AttachmentRegistry
    from services.relay.edge import ApexChannel
    from services.relay.mesh import MeshPool
    from services.relay.metrics import RelayMetrics
    from services.relay.peers import PeerDelivery
    from services.relay.presence_hook import PresenceHook
    from services.relay.tracing import HopTracer
    from services.relay.wellknown import WellKnownServices

_log = logging.getLogger(__name__)

#: What :meth:`Router.accept` returns: None (``ok`` now), a future of the answer (once in
#: custody), or an awaitable the channel waits for before its next message (options that
#: must be processed before ``ok``) giving either. A refusal is an
#: :class:`~apexmesh.apex.errors.ApexError`, raised or set on the future, turned into
#: the ``error`` reply once, by the caller that answers (the edge, the gRPC servicer).
Accepted = Answer | asyncio.Future[Answer] | Awaitable[Answer | asyncio.Future[Answer]]


class Router:
    """The relay's data processing for the domains it serves."""

    def __init__(
        self,
        *,
        domains: tuple[str, ...],
        options: OptionRegistry,
        access: CachedAccessChecker,
        attachments: AttachmentRegistry,
        peers: PeerDelivery,
        mesh: MeshPool,
        services: WellKnownServices,
        metrics: RelayMetrics,
        trusted: tuple[str, ...] = (),
        allow_anonymous: bool = False,
        clock: Callable[[], float],
        wall_clock: Callable[[], int] = wall_ms,
        min_transit_ms: int = 0,
        flow_limits: FlowLimits = DEFAULT_LIMITS,
    ) -> None:
        self.domains = frozenset(domains)
        #: The first configured domain: the relay's voice where no other domain applies.
        self.primary_domain = domains[0]
        self.options = options
        self.access = access
        self.attachments = attachments
        self.peers = peers
        self.mesh = mesh
        self.services = services
        self.metrics = metrics
        self.trusted = frozenset(trusted)
        self.allow_anonymous = allow_anonymous
        self.clock = clock
        #: Bounds on what this pod holds per endpoint (services/relay/flow.py).
        self.flow_limits = flow_limits
        #: Endpoints attached over an APEX channel of this pod.
        self.table = AttachmentTable()
        #: What this relay remembers of the documents it parses (apexmesh/apex/memo.py).
        self.memo = ParseMemo()
        self.locations = Locations(attachments, clock)
        self.reporter = Reporter(
            domains=self.domains,
            primary_domain=self.primary_domain,
            services=services,
            metrics=metrics,
        )
        #: dataTiming timers and reports (RFC 3342 section 2).
        self.timekeeper = Timekeeper(
            services=services,
            metrics=metrics,
            report_domain=self.reporter.voice_for,
            clock=wall_clock,
            min_transit_ms=min_transit_ms,
        )
        self.executor = Executor(
            domains=self.domains,
            access=access,
            table=self.table,
            locations=self.locations,
            peers=peers,
            mesh=mesh,
            services=services,
            timekeeper=self.timekeeper,
            reporter=self.reporter,
            metrics=metrics,
        )
        #: Access decisions, cached or fetched (services/relay/deciding.py).
        self._decide_access = self.executor.decider.decide_access
        services.originate = self.originate
        #: Data of this domain's services, in order per originating well-known endpoint
        #: (a topic): one topic's wait (a cold access check, a full subscriber queue)
        #: holds up no other's. Dropped once idle.
        self._service_dispatchers: dict[Endpoint, Dispatcher] = {}
        self._dispatchers: dict[ApexChannel, Dispatcher] = {}
        #: Tells apex=presence about attachments (optional, services/relay/presence_hook.py).
        self.presence: PresenceHook | None = None
        self._accepted = metrics.data.labels("accepted")

    @property
    def holder(self) -> Holder | None:
        """hold4Endpoint (RFC 3342 section 3); None: the option is not offered."""
        return self.executor.holder

    @holder.setter
    def holder(self, holder: Holder | None) -> None:
        self.executor.holder = holder

    @property
    def tracer(self) -> HopTracer | None:
        """Records where data with a statusRequest went (services/relay/tracing.py)."""
        return self.reporter.tracer

    @tracer.setter
    def tracer(self, tracer: HopTracer | None) -> None:
        self.reporter.tracer = tracer

    def _new_dispatcher(self) -> Dispatcher:
        executor = self.executor
        return Dispatcher(route_now=executor.route_now, route_later=executor.dispatch)

    # ------------------------------------------------------------ attach, bind, terminate

    async def attach(self, channel: ApexChannel, attach: Attach) -> None:
        """Steps 2 and 3 of 4.4.1 (553 foreign domain, 537 not authorized)."""
        endpoint = attach.endpoint
        if endpoint.domain not in self.domains:
            raise ApexError(
                ApexReplyCode.PARAMETER_INVALID,
                f"this relay does not serve {endpoint.domain}",
                trans_id=attach.trans_id,
            )
        if endpoint.is_service:
            raise ApexError(
                ApexReplyCode.NOT_AUTHORIZED,
                "well-known endpoints are served by the mesh",
                trans_id=attach.trans_id,
            )
        identity = peer_endpoint(channel, endpoint.domain)
        if identity is None:
            if self.allow_anonymous:
                return
            raise ApexError(
                ApexReplyCode.NOT_AUTHORIZED,
                "authenticate before attaching",
                trans_id=attach.trans_id,
            )
        decision = await self._decide_access(str(endpoint.base), str(identity), CORE_ATTACH)
        if decision.code == ApexReplyCode.SERVICE_NOT_AVAILABLE:
            raise ApexError(decision.code, decision.text, trans_id=attach.trans_id)
        if not decision.allowed:
            raise ApexError(ApexReplyCode.NOT_AUTHORIZED, "access denied", trans_id=attach.trans_id)

    async def claim(
        self, channel: ApexChannel, endpoint: Endpoint, trans_id: int, *, override: bool = False
    ) -> None:
        """Step 5 of 4.4.1: one attachment per endpoint in the whole domain (554).

        With ``override`` (the attachOverride option, RFC 3342 section 1) the endpoint's
        current attachment, on this pod or another, is terminated with 556 first.
        """
        if override:
            await self._override_here(endpoint)
        if endpoint in self.table:
            raise ApexError(
                ApexReplyCode.TRANSACTION_FAILED,
                "another application is attached as this endpoint",
                trans_id=trans_id,
            )
        holder = await self.attachments.claim(str(endpoint))
        if holder is not None and override and await self._override_elsewhere(endpoint):
            holder = await self.attachments.claim(str(endpoint))
        if holder is not None:
            raise ApexError(
                ApexReplyCode.TRANSACTION_FAILED,
                "another application is attached as this endpoint",
                trans_id=trans_id,
            )
        self.table.add(endpoint, channel, Attachment(trans_id, endpoint))
        self.locations.forget(endpoint)
        self.metrics.attachments.inc()
        if self.presence is not None:
            self.presence.attached(endpoint)

    async def _override_here(self, endpoint: Endpoint) -> None:
        held = self.table.get(endpoint)
        if held is not None:
            await held[0].terminate(held[1], OVERRIDE_CODE, OVERRIDE_TEXT, wait=False)

    async def _override_elsewhere(self, endpoint: Endpoint) -> bool:
        """Terminate the attachment another pod holds; True when it let go."""
        found = await self.attachments.locate(str(endpoint))
        if found is None:
            return True  # released meanwhile
        pod, address = found
        if pod == self.attachments.pod_id or not address:
            return False
        self.locations.forget(endpoint)
        return await self.peers.terminate(address, endpoint, OVERRIDE_CODE, OVERRIDE_TEXT)

    def bind(self, channel: ApexChannel, bind: Bind) -> None:
        """Step 2 of 4.4.2: who may serve as a relay of ``bind.relay`` (537)."""
        if bind.relay in self.trusted or self.allow_anonymous:
            return
        identity = channel.conn.session.peer_identity
        if identity is None or identity.lower() != bind.relay:
            raise ApexError(ApexReplyCode.NOT_AUTHORIZED, "access denied", trans_id=bind.trans_id)

    async def detached(self, channel: ApexChannel, association: Association) -> None:
        """An attachment ended (terminate, relay-initiated terminate, lost session)."""
        if not isinstance(association, Attachment):
            return
        if self.table.remove(association.endpoint, channel):
            self.metrics.attachments.dec()
            await self.attachments.release(str(association.endpoint))
            if self.presence is not None:
                self.presence.detached(association.endpoint)

    # ------------------------------------------------------------ data, steps 1 to 3

    def accept(self, data: Data, payload: Payload, raw: bytes, channel: ApexChannel) -> Accepted:
        """Steps 1-3 for data received on an APEX channel (see :data:`Accepted`); raises
        :class:`ApexError` 537 (originator), 504 (mustUnderstand), 501 (party options)."""
        originator = data.originator.identity
        if channel.mode is Mode.EDGE:
            allowed = channel.associations.attached(originator)
        else:
            allowed = (
                originator.domain in channel.associations.domains
                or originator.domain in channel.peer_domains
                or originator.domain in self.trusted
            )
        if not allowed:
            self.metrics.count(self.metrics.data, "refused")
            raise ApexError(ApexReplyCode.NOT_AUTHORIZED, "access denied")
        dispatcher = self._dispatchers.get(channel)
        if dispatcher is None:
            dispatcher = self._dispatchers[channel] = self._new_dispatcher()
        # Nothing to plan (no option anywhere) and nothing before it in this channel's
        # order: routed now when every fact is known here and there is room.
        is_plain = plain(data)
        if is_plain and not dispatcher.running:
            answer = self.executor.route_plain(data, data.recipients[0].identity, raw)
            if answer is not NOT_NOW:
                self._accepted.inc()
                return answer
        planned = self._plan(data)
        received_at = self.timekeeper.now()
        for recipient in planned.recipients:
            if recipient.process:
                return self._accept_with_options(
                    data, planned, payload, raw, received_at, dispatcher
                )
        self._accepted.inc()
        custody = Custody(asyncio.get_running_loop())
        job = Job(data, planned, tuple(payload.parts.values()), raw, received_at, custody=custody)
        if is_plain:
            dispatcher.enqueue(job)  # route_plain could not take it above: no second try
        else:
            dispatcher.submit(job)
        return custody.future

    async def _accept_with_options(
        self,
        data: Data,
        planned: DataPlan,
        payload: Payload,
        raw: bytes,
        received_at: int,
        dispatcher: Dispatcher,
    ) -> Answer | asyncio.Future[Answer]:
        """Step 3 of :meth:`accept` for data with options to process before ``ok``: the
        channel waits for this (holds are written in order), not for the custody of
        the data (a data circling through relays would otherwise wait for itself)."""
        self._check_party_options(data, planned, received_at)
        try:
            held = await self._hold_unattached(data, planned, payload, raw, received_at)
        except ApexError:
            self.metrics.count(self.metrics.data, "refused")
            raise
        self._accepted.inc()
        custody = Custody(asyncio.get_running_loop())
        parts = tuple(payload.parts.values())
        dispatcher.submit(Job(data, planned, parts, raw, received_at, held, custody=custody))
        return custody.future

    def originate(self, data: Data, payload: Payload, raw: bytes) -> asyncio.Future[Answer]:
        """Data a well-known endpoint of this domain sends (RFC 3340 section 6): the
        answer once in custody; a refusal now raises :class:`ApexError`."""
        originator = data.originator.identity
        if not originator.is_service or originator.domain not in self.domains:
            raise ApexError(
                ApexReplyCode.NOT_AUTHORIZED, "only this domain's services may submit data"
            )
        plan = self._plan(data)
        received_at = self.timekeeper.now()
        if any(p.process for p in plan.recipients):
            self._check_party_options(data, plan, received_at)
        self.metrics.count(self.metrics.data, "accepted")
        job = Job(data, plan, tuple(payload.parts.values()), raw, received_at)
        # A failure nobody would learn of is not custody: refused, so the service retries.
        custody = Custody(asyncio.get_running_loop(), refuse_transient=not may_owe_reports(job))
        dispatcher = self._service_dispatchers.get(originator)
        if dispatcher is None:
            dispatcher = self._new_dispatcher()
            dispatcher.on_idle = functools.partial(self._service_idle, originator, dispatcher)
        dispatcher.submit(dataclasses.replace(job, custody=custody))
        if dispatcher.running:
            self._service_dispatchers[originator] = dispatcher
        return custody.future

    def _service_idle(self, originator: Endpoint, dispatcher: Dispatcher) -> None:
        if self._service_dispatchers.get(originator) is dispatcher:
            del self._service_dispatchers[originator]

    def forget(self, channel: ApexChannel) -> None:
        """The channel is gone; its dispatcher finishes what it holds and is dropped."""
        self._dispatchers.pop(channel, None)

    def shed(self, channel: ApexChannel, count: int) -> None:
        """Data for endpoints attached over ``channel`` were shed (a slow consumer)."""
        endpoints = [str(e) for e in channel.associations.endpoints]
        _log.warning(
            "slow consumer %s: %d data shed (%d waiting, %d in flight)",
            ", ".join(endpoints) or "(no endpoint)",
            count,
            channel.flow.waiting,
            channel.flow.ledger.in_flight,
        )

    def _plan(self, data: Data) -> DataPlan:
        """Steps 2 (and the option plan of 4 and 5.1): 504 for a mustUnderstand option
        this relay does not understand."""
        try:
            return plan_data(data, self.options, is_final=self.is_final)
        except ApexError:
            self.metrics.count(self.metrics.data, "refused")
            raise

    def _check_party_options(self, data: Data, plan: DataPlan, received_at: int) -> None:
        """Invalid dataTiming or hold4Endpoint content is refused before ``ok`` (501
        carrying the option's transID), not discovered per recipient later."""
        try:
            for recipient in plan.recipients:
                if recipient.failure is None and party_steps(recipient):
                    timing_state(recipient, data, received_at)
                    hold_options(recipient)
        except ApexError:
            self.metrics.count(self.metrics.data, "refused")
            raise

    async def _hold_unattached(
        self, data: Data, plan: DataPlan, payload: Payload, raw: bytes, received_at: int
    ) -> frozenset[Endpoint]:
        """hold4Endpoint before ``ok`` (RFC 3342 section 3): data for recipients of this
        domain that are attached nowhere is written to Redis now, so that the ``ok`` is
        only given once it is durable. "Attached nowhere" is checked by the same Redis
        script that holds (so an attach cannot slip in between: every drain starts after
        its attach's claim); attached recipients get their data after ``ok`` as usual. A
        refused hold refuses the whole data (450 quota, 554 policy), taking back what was
        already written for its other recipients (raising :class:`ApexError`)."""
        holder = self.holder
        if holder is None:
            return frozenset()
        parts = tuple(payload.parts.values())
        written: list[tuple[Endpoint, int]] = []
        for rplan in plan.recipients:
            endpoint = rplan.recipient.identity
            if (
                rplan.failure is not None
                or not rplan.final
                or rplan.forward is None
                or endpoint.is_service
                or not wants_hold(rplan)
                or endpoint in self.table
                or not await self._may_send(endpoint, data.originator.identity)
            ):
                continue  # delivered (or refused) after ok, as without the option
            timing = timing_state(rplan, data, received_at)
            body = payload_for(rplan.forward, data, parts, raw)
            decision = holder.decide(rplan, timing, len(body))
            refusal: ApexError | None = None
            if decision.hold:
                result = await holder.hold(
                    endpoint, body, decision, timing, received_at, unless_attached=True
                )
                if isinstance(result, int):
                    written.append((endpoint, result))
                elif result.reason != ATTACHED:
                    refusal = ApexError(for_code(result.code) or QUOTA_CODE, result.text)
            elif decision.code is not None and decision.code != EXPIRED_CODE:
                self.metrics.count(self.metrics.held, "refused")  # an operator policy (554)
                refusal = ApexError(decision.code, decision.text)
            if refusal is not None:
                for endpoint_, entry in written:
                    await holder.forget(endpoint_, [entry])
                raise refusal
        return frozenset(endpoint for endpoint, _ in written)

    async def _may_send(self, endpoint: Endpoint, originator: Endpoint) -> bool:
        """Step 5.3's check (core:data), which holding must not bypass; no answer refuses
        the data before ``ok`` (421; after it, it would be lost: issue #30's failover; an
        earlier recipient's hold is kept, so a resend may hold it twice, never lose it)."""
        decision = await self._decide_access(str(endpoint), str(originator), CORE_DATA)
        if decision.code == ApexReplyCode.SERVICE_NOT_AVAILABLE:
            raise ApexError(ApexReplyCode.SERVICE_NOT_AVAILABLE, decision.text)
        return decision.allowed

    def attached_ready(self, endpoint: Endpoint) -> None:
        """An attach was answered ``ok``: deliver what is held for the endpoint."""
        if self.holder is not None and endpoint in self.table:
            self.holder.drain(endpoint)

    def attached_channel(self, endpoint: Endpoint) -> ApexChannel | None:
        """The APEX channel the endpoint is attached over on this pod, if any."""
        return self.table.channel_of(endpoint)

    def is_final(self, endpoint: Endpoint) -> bool:
        """This relay delivers to endpoints of its own domains directly."""
        return endpoint.domain in self.domains

    async def close(self) -> None:
        """Wait for background conclusions (bounded by the caller's shutdown grace)."""
        await self.executor.close()
        await self.locations.close()
        await self.timekeeper.close()


def peer_endpoint(channel: ApexChannel, domain: str) -> Endpoint | None:
    """The BEEP peer's authenticated identity as an endpoint (RFC 3340 section 3.2).

    A SASL identity without a domain is taken as a local part of ``domain``.
    """
    identity = channel.conn.session.peer_identity
    if not identity:
        return None
    text = identity if "@" in identity else f"{identity}@{domain}"
    try:
        return Endpoint.parse(text)
    except ValueError:
        return None


__all__ = ["Accepted", "Router", "peer_endpoint"]
