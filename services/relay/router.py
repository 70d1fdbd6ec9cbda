"""Relay processing of data (RFC 3340 section 4.4.4.1) and the routing of each recipient.

Steps 1 to 3 run before ``ok``: the BEEP client must be allowed to originate on behalf of
the originator (537), applicable per-data options are processed (504 for a
mustUnderstand option this relay does not understand). Steps 4 and 5 run after ``ok``,
in arrival order per origin (a :class:`Dispatcher` per APEX channel), and route every
recipient:

* another administrative domain: one ``data`` per domain to a relay of that domain over
  apex-mesh (:mod:`services.relay.mesh`);
* a well-known endpoint of this domain (``apex=NAME``): to that service over gRPC;
* an endpoint of this domain: the access service must grant ``core:data`` to the
  originator on the recipient (step 5.3, a cached decision), then to the endpoint's APEX
  channel on this pod, or to the pod holding its attachment (gRPC ``DeliverStream``), or
  550 "unknown endpoint identity" when it is not attached.

Recipients of one data attached over the same APEX channel (or to the same other pod)
travel as one data element (the grouping the last paragraph of 4.4.4.1 allows;
:mod:`services.relay.grouping`), unless dataTiming or hold4Endpoint makes their delivery
their own.

Dispatch never waits for a delivery to finish, only for the lookups that decide where it
goes; outcomes are collected in the background for statusRequest reports (section 5.1)
and metrics. Content is never modified: when the received payload already is what a next
hop must get, its bytes are forwarded as received.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

from apexmesh.apex.access import CORE_ATTACH, CORE_DATA, Decision
from apexmesh.apex.associations import Association, Attachment
from apexmesh.apex.codes import ApexReplyCode, for_code
from apexmesh.apex.content import MimePart, Payload
from apexmesh.apex.data import Data, DataContent, Originator, Recipient
from apexmesh.apex.elements import Attach, Bind, Error, Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.holding import (
    EXPIRED_CODE,
    HOLD_FOR_ENDPOINT,
    QUOTA_CODE,
    hold_options,
    wants_hold,
)
from apexmesh.apex.hops import DataPlan, RecipientPlan, combine, plain, plan_data
from apexmesh.apex.options import STATUS_REQUEST, Option, OptionRegistry
from apexmesh.apex.party import (
    HOPS_EXHAUSTED,
    HOPS_EXHAUSTED_TEXT,
    OVERRIDE_CODE,
    OVERRIDE_TEXT,
    next_relay,
)
from apexmesh.apex.report import PendingReport, pending_reports, status_response
from apexmesh.apex.timing import DATA_TIMING, Timer, forward, timing_options
from apexmesh.ops.logs import correlation_id
from apexmesh.store.held import ATTACHED, Refused
from services.relay.edge import Mode
from services.relay.grouping import Group, deliver_here
from services.relay.holder import Holder, payload_for, timing_state
from services.relay.outcomes import (
    DELIVERED,
    ENDPOINT_DETACHED,
    HELD,
    NOT_HERE,
    Outcome,
    code_of,
)
from services.relay.peers import UNAVAILABLE as POD_UNAVAILABLE
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

_T = TypeVar("_T")

#: Seconds a located attachment (endpoint -> pod) is reused without asking Redis again.
#: A stale entry costs one failed Deliver and a fresh lookup, never a lost message.
LOCATION_TTL_SECONDS: Final = 5.0

UNKNOWN_ENDPOINT: Final = Outcome(ApexReplyCode.ACTION_NOT_TAKEN, "unknown endpoint identity")

#: Recipients from which a data's per-recipient payloads are built from a template.
_TEMPLATE_FROM: Final = 8
#: Recipients from which those attached over the same channel (or to the same pod) get
#: one data element between them (services/relay/grouping.py).
_GROUP_FROM: Final = 2

#: What the data of one recipient shares with others' for one payload template.
_TemplateKey = tuple[Originator, tuple[Option, ...], DataContent | None]
#: The recipients of a group and the future of their outcomes, in the same order.
_GroupDelivery = tuple[tuple[Endpoint, ...], asyncio.Future[tuple[Outcome, ...]]]
#: The recipient a template is built around (never a real endpoint: ``.invalid``).
_PLACEHOLDER: Final = Recipient(identity=Endpoint.parse("apex-template@recipient.invalid"))
_PLACEHOLDER_XML: Final = _PLACEHOLDER.to_xml()


class OriginKind(enum.Enum):
    """Who handed the relay the data (RFC 3340 section 4.5)."""

    EDGE = "edge"
    MESH = "mesh"
    SERVICE = "service"


@dataclass(frozen=True, slots=True)
class Job:
    """Data accepted with ``ok``, waiting for steps 4 and 5."""

    data: Data
    plan: DataPlan
    parts: tuple[MimePart, ...]
    raw: bytes
    #: When this relay received it (epoch ms): the origin of its dataTiming clocks.
    received_at: int = 0
    #: Recipients whose data was held before ``ok`` (hold4Endpoint): nothing to deliver.
    held: frozenset[Endpoint] = frozenset()
    #: Payload templates of a fan-out (see :meth:`Router._payload`), built once per job.
    templates: dict[_TemplateKey, tuple[bytes, bytes]] = field(default_factory=dict, compare=False)
    #: The correlation id of the data (apexmesh/ops/logs.py), that of its acceptance.
    cid: str = field(default_factory=correlation_id.get, compare=False)


@dataclass(eq=False)
class Dispatcher:
    """Runs steps 4-5 for one origin, in the order its data was accepted."""

    router: Router
    jobs: deque[Job] = field(default_factory=deque)
    #: True while a task works through ``jobs`` (so a job routed now could pass one).
    running: bool = False
    task: asyncio.Task[None] | None = None

    def submit(self, job: Job) -> None:
        """Route ``job`` now when nothing of its origin waits and it needs no waiting
        (:meth:`Router.dispatch_now`), else queue it."""
        if not self.running:
            try:
                if self.router.dispatch_now(job):
                    return
            except Exception:  # noqa: BLE001  (as in _run: one job's bug stops no other)
                _log.exception("relaying data from %s failed", job.data.originator.identity)
                return
        self.enqueue(job)

    def enqueue(self, job: Job) -> None:
        """Queue ``job`` behind its origin's earlier data (a task works through them)."""
        self.jobs.append(job)
        if not self.running:
            self.running = True
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            while self.jobs:
                job = self.jobs.popleft()
                correlation_id.set(job.cid)  # this task's context: its log lines and calls
                try:
                    await self.router.dispatch(job)
                except Exception:  # noqa: BLE001  (a bug in one job must not stop the others)
                    _log.exception("relaying data from %s failed", job.data.originator.identity)
        finally:
            self.running = False


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
        #: Endpoints attached over an APEX channel of this pod.
        self.local: dict[Endpoint, tuple[ApexChannel, Attachment]] = {}
        self._locations: dict[Endpoint, tuple[float, str]] = {}
        #: Endpoints whose location is being asked again (see _refresh_location).
        self._refreshing: set[Endpoint] = set()
        self._service_dispatcher = Dispatcher(self)
        self._dispatchers: dict[int, Dispatcher] = {}
        self._background: set[asyncio.Task[Any]] = set()
        #: Tells apex=presence about attachments (optional, services/relay/presence_hook.py).
        self.presence: PresenceHook | None = None
        #: dataTiming timers and reports (RFC 3342 section 2).
        self.timekeeper = Timekeeper(
            services=services,
            metrics=metrics,
            report_domain=self._voice_for,
            clock=wall_clock,
            min_transit_ms=min_transit_ms,
        )
        #: hold4Endpoint (RFC 3342 section 3); None: the option is not offered.
        self.holder: Holder | None = None
        #: Records where data with a statusRequest went (services/relay/tracing.py).
        self.tracer: HopTracer | None = None
        # The counters every data moves, resolved once.
        self._accepted = metrics.data.labels("accepted")
        self._to_pod = metrics.deliveries.labels("pod")
        self._to_local = metrics.deliveries.labels("local")
        self._delivered = metrics.outcomes.labels("delivered")

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
        decision = await self._decide(str(endpoint.base), str(identity), CORE_ATTACH)
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
        if endpoint in self.local:
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
        self.local[endpoint] = (channel, Attachment(trans_id, endpoint))
        self._locations.pop(endpoint, None)
        self.metrics.attachments.inc()
        if self.presence is not None:
            self.presence.attached(endpoint)

    async def _override_here(self, endpoint: Endpoint) -> None:
        held = self.local.get(endpoint)
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
        self._locations.pop(endpoint, None)
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
        held = self.local.get(association.endpoint)
        if held is not None and held[0] is channel:
            del self.local[association.endpoint]
            self.metrics.attachments.dec()
            await self.attachments.release(str(association.endpoint))
            if self.presence is not None:
                self.presence.detached(association.endpoint)

    # ------------------------------------------------------------ data, steps 1 to 3

    def accept(
        self, data: Data, payload: Payload, raw: bytes, channel: ApexChannel
    ) -> Error | Awaitable[Error | None] | None:
        """Steps 1-3 for data received on an APEX channel; None means ``ok``. Data whose
        options must be looked at before ``ok`` (dataTiming, hold4Endpoint) get their
        answer as an awaitable; all other data get it on return."""
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
            return Error(code=ApexReplyCode.NOT_AUTHORIZED, text="access denied")
        dispatcher = self._dispatchers.get(id(channel))
        if dispatcher is None:
            dispatcher = self._dispatchers[id(channel)] = Dispatcher(self)
        # Nothing to plan (no option anywhere) and nothing before it in this channel's
        # order: routed now when every fact is known here.
        is_plain = plain(data)
        if (
            is_plain
            and not dispatcher.running
            and self.route_plain(data, data.recipients[0].identity, raw)
        ):
            self._accepted.inc()
            return None
        planned = self._plan(data)
        if isinstance(planned, Error):
            return planned
        received_at = self.timekeeper.now()
        for recipient in planned.recipients:
            if recipient.process:
                return self._accept_with_options(
                    data, planned, payload, raw, received_at, dispatcher
                )
        self._accepted.inc()
        job = Job(data, planned, tuple(payload.parts.values()), raw, received_at)
        if is_plain:
            dispatcher.enqueue(job)  # route_plain could not take it above: no second try
        else:
            dispatcher.submit(job)
        return None

    async def _accept_with_options(
        self,
        data: Data,
        planned: DataPlan,
        payload: Payload,
        raw: bytes,
        received_at: int,
        dispatcher: Dispatcher,
    ) -> Error | None:
        """Step 3 of :meth:`accept` for data with options to process before ``ok``."""
        checked = self._check_party_options(data, planned, received_at)
        if checked is not None:
            return checked
        held = await self._hold_unattached(data, planned, payload, raw, received_at)
        if isinstance(held, Error):
            self.metrics.count(self.metrics.data, "refused")
            return held
        self._accepted.inc()
        dispatcher.submit(Job(data, planned, tuple(payload.parts.values()), raw, received_at, held))
        return None

    def originate(self, data: Data, payload: Payload, raw: bytes) -> Error | None:
        """Data a well-known endpoint of this domain sends (RFC 3340 section 6)."""
        originator = data.originator.identity
        if not originator.is_service or originator.domain not in self.domains:
            return Error(
                code=ApexReplyCode.NOT_AUTHORIZED,
                text="only this domain's services may submit data",
            )
        return self._accept(data, payload, raw, self._service_dispatcher)

    def forget(self, channel: ApexChannel) -> None:
        """The channel is gone; its dispatcher finishes what it holds and is dropped."""
        self._dispatchers.pop(id(channel), None)

    def _accept(
        self, data: Data, payload: Payload, raw: bytes, dispatcher: Dispatcher
    ) -> Error | None:
        plan = self._plan(data)
        if isinstance(plan, Error):
            return plan
        received_at = self.timekeeper.now()
        if any(p.process for p in plan.recipients):
            checked = self._check_party_options(data, plan, received_at)
            if checked is not None:
                return checked
        self.metrics.count(self.metrics.data, "accepted")
        dispatcher.submit(Job(data, plan, tuple(payload.parts.values()), raw, received_at))
        return None

    def _plan(self, data: Data) -> DataPlan | Error:
        """Steps 2 (and the option plan of 4 and 5.1): 504 for a mustUnderstand option
        this relay does not understand."""
        try:
            return plan_data(data, self.options, is_final=self.is_final)
        except ApexError as exc:
            self.metrics.count(self.metrics.data, "refused")
            return Error.from_exception(exc)

    def _check_party_options(self, data: Data, plan: DataPlan, received_at: int) -> Error | None:
        """Invalid dataTiming or hold4Endpoint content is refused before ``ok`` (501
        carrying the option's transID), not discovered per recipient later."""
        try:
            for recipient in plan.recipients:
                if recipient.failure is None and _party_steps(recipient):
                    timing_state(recipient, data, received_at)
                    hold_options(recipient)
        except ApexError as exc:
            self.metrics.count(self.metrics.data, "refused")
            return Error.from_exception(exc)
        return None

    async def _hold_unattached(
        self, data: Data, plan: DataPlan, payload: Payload, raw: bytes, received_at: int
    ) -> frozenset[Endpoint] | Error:
        """hold4Endpoint before ``ok`` (RFC 3342 section 3): data for recipients of this
        domain that are attached nowhere is written to Redis now, so that the ``ok`` is
        only given once it is durable. "Attached nowhere" is checked by the same Redis
        script that holds (so an attach cannot slip in between: every drain starts after
        its attach's claim); attached recipients get their data after ``ok`` as usual. A
        refused hold refuses the whole data (450 quota, 554 policy), taking back what was
        already written for its other recipients."""
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
                or endpoint in self.local
                or not await self._may_send(endpoint, data.originator.identity)
            ):
                continue  # delivered (or refused) after ok, as without the option
            timing = timing_state(rplan, data, received_at)
            body = payload_for(rplan.forward, data, parts, raw)
            decision = holder.decide(rplan, timing, len(body))
            refusal: Error | None = None
            if decision.hold:
                result = await holder.hold(
                    endpoint, body, decision, timing, received_at, unless_attached=True
                )
                if isinstance(result, int):
                    written.append((endpoint, result))
                elif result.reason != ATTACHED:
                    refusal = Error(code=for_code(result.code) or QUOTA_CODE, text=result.text)
            elif decision.code is not None and decision.code != EXPIRED_CODE:
                self.metrics.count(self.metrics.held, "refused")  # an operator policy (554)
                refusal = Error(code=decision.code, text=decision.text)
            if refusal is not None:
                for endpoint_, entry in written:
                    await holder.forget(endpoint_, [entry])
                return refusal
        return frozenset(endpoint for endpoint, _ in written)

    async def _may_send(self, endpoint: Endpoint, originator: Endpoint) -> bool:
        """Step 5.3's access check (core:data), which holding must not bypass."""
        return (await self._decide(str(endpoint), str(originator), CORE_DATA)).allowed

    async def _decide(self, owner: str, actor: str, token: str) -> Decision:
        """An access decision, from the cache when possible; an unreachable access
        service fails closed as 421 (the operation is refused, never let through)."""
        decision = self.access.lookup(owner, actor, token)
        if decision is not None:
            return decision
        try:
            return await self.access.check(owner, actor, token)
        except Exception as exc:  # noqa: BLE001  (gRPC, Redis, timeouts: all fail closed)
            _log.warning("access check %s %s %s failed: %s", owner, actor, token, exc)
            return Decision(
                allowed=False,
                code=ApexReplyCode.SERVICE_NOT_AVAILABLE,
                text="access service not available",
            )

    async def _wake_drainer(self, endpoint: Endpoint) -> None:
        """The endpoint may have attached while its data was being held (after the
        drain of its attach had looked): have the pod holding it drain again."""
        if self.holder is None:
            return
        if endpoint in self.local:
            self.holder.drain(endpoint)
            return
        found = await self.attachments.locate(str(endpoint))
        if found is not None and found[1] and found[0] != self.attachments.pod_id:
            self.peers.drain(found[1], endpoint)

    def attached_ready(self, endpoint: Endpoint) -> None:
        """An attach was answered ``ok``: deliver what is held for the endpoint."""
        if self.holder is not None and endpoint in self.local:
            self.holder.drain(endpoint)

    def attached_channel(self, endpoint: Endpoint) -> ApexChannel | None:
        """The APEX channel the endpoint is attached over on this pod, if any."""
        held = self.local.get(endpoint)
        return None if held is None else held[0]

    def is_final(self, endpoint: Endpoint) -> bool:
        """This relay delivers to endpoints of its own domains directly."""
        return endpoint.domain in self.domains

    # ------------------------------------------------------------ data, steps 4 and 5

    def dispatch_now(self, job: Job) -> bool:
        """Steps 4 and 5 of a job without waiting, when :meth:`route_plain` can (the job's
        data is plain and its plan the trivial one); False, with nothing done, otherwise:
        :meth:`dispatch` then runs it in the origin's dispatcher."""
        plans = job.plan.recipients
        if len(plans) != 1 or job.held:
            return False
        plan = plans[0]
        if plan.forward is not job.data or plan.process or not plan.final:
            return False
        return self.route_plain(job.data, plan.recipient.identity, job.raw)

    def route_plain(self, data: Data, endpoint: Endpoint, raw: bytes) -> bool:
        """Steps 4 and 5 without waiting, for the most common data: ``data`` (received as
        ``raw``) is :func:`plain` and names ``endpoint`` of this domain; its ``core:data``
        decision is cached and its attachment here or located less than
        :data:`LOCATION_TTL_SECONDS` ago. False, with nothing done, when any of that does
        not hold (the caller then plans it and queues it in order)."""
        if endpoint.is_service or endpoint.domain not in self.domains:
            return False
        originator = data.originator.identity
        decision = self.access.lookup(str(endpoint), str(originator), CORE_DATA)
        if decision is None:
            return False
        if not decision.allowed:
            refused = Outcome(int(decision.code), decision.text or "access denied")
            self._count_outcome(originator, endpoint, refused)
            return True
        held = self.local.get(endpoint)
        if held is not None:
            self._to_local.inc()
            held[0].send_data(raw, functools.partial(self._count_outcome, originator, endpoint))
            return True
        located = self._locations.get(endpoint)
        if located is None:
            return False
        if located[0] <= self.clock() and not self._refresh_location(endpoint, located[0]):
            return False
        address = located[1]
        self._to_pod.inc()
        settle = functools.partial(self._settled_at_pod, originator, endpoint, raw, address)
        self.peers.send(address, endpoint, originator, raw, settle)
        return True

    def _refresh_location(self, endpoint: Endpoint, expired_at: float) -> bool:
        """A location past its TTL: asked again in the background (once), and used
        meanwhile for one more TTL (a stale one costs a retry, never the data): the
        data of that moment need not queue behind a Redis round trip. False when it is
        older than that."""
        if expired_at + LOCATION_TTL_SECONDS <= self.clock():
            return False
        if endpoint not in self._refreshing:
            self._refreshing.add(endpoint)
            task = asyncio.get_running_loop().create_task(self._relocate_soon(endpoint))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return True

    async def _relocate_soon(self, endpoint: Endpoint) -> None:
        try:
            await self._ask_location(endpoint)
        except Exception as exc:  # noqa: BLE001  (Redis away: the entry ages out instead)
            _log.warning("locating %s again failed: %s", endpoint, exc)
        finally:
            self._refreshing.discard(endpoint)

    def _settled_at_pod(
        self,
        originator: Endpoint,
        endpoint: Endpoint,
        payload: bytes,
        address: str,
        outcome: Outcome,
    ) -> None:
        """A delivery of :meth:`route_plain` through another pod ended; a stale location
        is retried (as :meth:`_deliver_here` does) before the outcome counts."""
        if outcome is DELIVERED or not _stale_location(outcome):
            self._count_outcome(originator, endpoint, outcome)
            return
        retry = asyncio.ensure_future(
            self._retry_elsewhere(endpoint, originator, payload, address, outcome)
        )
        self._background.add(retry)
        retry.add_done_callback(self._background.discard)
        retry.add_done_callback(functools.partial(self._record, originator, endpoint))

    def _record(
        self, originator: Endpoint, endpoint: Endpoint, future: asyncio.Future[Outcome]
    ) -> None:
        """Count and log one recipient's outcome once its delivery has settled."""
        try:
            outcome = future.result()
        except Exception as exc:  # noqa: BLE001  (a route failed without an outcome)
            _log.warning("delivery to %s failed: %s", endpoint, exc)
            outcome = Outcome(ApexReplyCode.ACTION_ABORTED, "local error")
        self._count_outcome(originator, endpoint, outcome)

    async def dispatch(self, job: Job) -> None:
        """Route every recipient of an accepted data; collect outcomes in the background."""
        outcomes: dict[Endpoint, asyncio.Future[Outcome]] = {}
        foreign: dict[str, list[RecipientPlan]] = {}
        hopped: list[PendingReport] = []
        groupable = len(job.plan.recipients) >= _GROUP_FROM
        plain: list[RecipientPlan] = []
        for plan in job.plan.recipients:
            endpoint = plan.recipient.identity
            if plan.failure is not None:
                outcomes[endpoint] = _done(Outcome(int(plan.failure.code), str(plan.failure)))
            elif not plan.final:
                try:
                    step = next_relay(plan)
                except ApexError as exc:
                    outcomes[endpoint] = _done(Outcome(int(exc.code), str(exc)))
                    continue
                if step.forward is None:
                    # dataHopping (RFC 3342 section 4): the hop count ran out here.
                    outcomes[endpoint] = _done(Outcome(HOPS_EXHAUSTED, HOPS_EXHAUSTED_TEXT))
                    if step.report and step.stopped is not None:
                        hopped.append(
                            PendingReport(
                                trans_id=step.stopped.trans_id,
                                originator=job.data.originator.identity,
                                recipients=(endpoint,),
                            )
                        )
                    continue
                if step.forward is not plan.forward:
                    plan = dataclasses.replace(plan, forward=step.forward)
                timed = self._time_next_hop(job, plan)
                if isinstance(timed, Outcome):
                    outcomes[endpoint] = _done(timed)
                    continue
                foreign.setdefault(endpoint.domain, []).append(timed)
            elif endpoint not in job.held:
                if groupable and not endpoint.is_service and not _party_steps(plan):
                    plain.append(plan)
                else:
                    outcomes[endpoint] = await self._deliver_final(job, plan)
        groups = await self._deliver_grouped(job, plain, outcomes) if plain else []
        for domain, plans in foreign.items():
            forwarded = combine(plans)
            sent = self.mesh.send(domain, self._payload(job, forwarded))
            for plan in plans:
                outcomes[plan.recipient.identity] = sent
        reports = (*pending_reports(job.data, job.plan), *hopped)
        if job.held:
            reports = _without(reports, job.held)
        if not reports and not _may_owe_reports(job):
            # Nothing to report whatever happens: outcomes are only counted and logged,
            # by callbacks rather than one more task per data (the common case).
            originator = job.data.originator.identity
            for endpoint, future in outcomes.items():
                future.add_done_callback(functools.partial(self._record, originator, endpoint))
            for endpoints, grouped in groups:
                grouped.add_done_callback(functools.partial(self._record_group, job, endpoints))
            return
        task = asyncio.get_running_loop().create_task(
            self._conclude(job, outcomes, reports, groups)
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _record_group(
        self,
        job: Job,
        endpoints: tuple[Endpoint, ...],
        future: asyncio.Future[tuple[Outcome, ...]],
    ) -> None:
        """Count and log the outcomes of a group once its deliveries have settled."""
        try:
            results = future.result()
        except Exception as exc:  # noqa: BLE001  (a route failed without an outcome)
            _log.warning("delivery to a group of %d failed: %s", len(endpoints), exc)
            results = (Outcome(ApexReplyCode.ACTION_ABORTED, "local error"),) * len(endpoints)
        delivered = 0
        for endpoint, outcome in zip(endpoints, results, strict=True):
            if outcome is DELIVERED:
                delivered += 1
            else:
                self._count_outcome(job.data.originator.identity, endpoint, outcome)
        if delivered:
            self.metrics.count(self.metrics.outcomes, "delivered", delivered)

    def _count_outcome(self, originator: Endpoint, endpoint: Endpoint, outcome: Outcome) -> None:
        if outcome is DELIVERED:
            self._delivered.inc()
            return
        if outcome is HELD:
            self.metrics.count(self.metrics.outcomes, "held")
            return
        self.metrics.count(self.metrics.outcomes, "delivered" if outcome.ok else str(outcome.code))
        if not outcome.ok:
            _log.info(
                "data from %s to %s not delivered: %s %s",
                originator,
                endpoint,
                outcome.code,
                outcome.text,
            )

    def _time_next_hop(self, job: Job, plan: RecipientPlan) -> RecipientPlan | Outcome:
        """Step 5.2 with dataTiming: the remaining times lowered by the time spent here,
        or the 550 when the deadline is reached or cannot be met."""
        if plan.forward is None or not timing_options(plan):
            return plan
        keeper = self.timekeeper
        state = timing_state(plan, job.data, job.received_at)
        assert state is not None  # noqa: S101  (timing options exist)
        moved = forward(state, plan.forward, keeper.now(), min_transit_ms=keeper.min_transit_ms)
        if moved.data is None:
            return keeper.missed(moved.step)
        keeper.report(moved.step.reports)
        return dataclasses.replace(plan, forward=moved.data)

    async def _deliver_final(self, job: Job, plan: RecipientPlan) -> asyncio.Future[Outcome]:
        """Step 5.3, with the party pack: dataTiming deadlines and reports around the
        delivery, hold4Endpoint when the endpoint turns out not to be attached."""
        if not plan.process:
            return await self._deliver_here(job, plan)
        keeper = self.timekeeper
        received = plan  # as received: what is held if the endpoint is gone
        state = timing_state(plan, job.data, job.received_at)
        timers: tuple[Timer, ...] = ()
        if state is not None and plan.forward is not None:
            moved = forward(state, plan.forward, keeper.now())
            if moved.data is None:
                return _done(keeper.missed(moved.step))
            keeper.report(moved.step.reports)
            state, timers = moved.step.state, moved.step.timers
            plan = dataclasses.replace(plan, forward=moved.data)
        delivery = await self._deliver_here(job, plan)
        if self.holder is not None and wants_hold(plan):
            delivery = _chain(
                delivery, _not_attached, lambda outcome: self._hold_late(job, received, outcome)
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
        await self._wake_drainer(endpoint)
        return HELD

    async def _deliver_here(self, job: Job, plan: RecipientPlan) -> asyncio.Future[Outcome]:
        endpoint = plan.recipient.identity
        originator = job.data.originator.identity
        assert plan.forward is not None  # noqa: S101  (no failure, so a forward exists)
        if endpoint.is_service:
            payload = self._payload(job, plan.forward)
            return self.services.deliver(endpoint, job.data, payload, job.parts, self)
        decision = await self._decide(str(endpoint), str(originator), CORE_DATA)
        if not decision.allowed:
            return _done(Outcome(int(decision.code), decision.text or "access denied"))
        payload = self._payload(job, plan.forward)
        held = self.local.get(endpoint)
        if held is not None:
            self.metrics.count(self.metrics.deliveries, "local")
            return held[0].deliver(payload)
        address = await self._locate(endpoint)
        if address is None:
            return _done(UNKNOWN_ENDPOINT)
        self.metrics.count(self.metrics.deliveries, "pod")
        return _chain(
            self.peers.deliver(address, endpoint, originator, payload),
            _stale_location,
            lambda outcome: self._retry_elsewhere(endpoint, originator, payload, address, outcome),
        )

    async def _deliver_grouped(
        self,
        job: Job,
        plans: list[RecipientPlan],
        outcomes: dict[Endpoint, asyncio.Future[Outcome]],
    ) -> list[_GroupDelivery]:
        """Step 5.3 for recipients with no option to process, grouped by where they are
        attached: one data per APEX channel of this pod, one request per other pod
        (services/relay/grouping.py). Refusals and unknown endpoints go to ``outcomes``;
        the groups are returned with the future of their outcomes."""
        originator = job.data.originator.identity
        actor = str(originator)
        # Recipients share a data element when their data differ in the recipient only:
        # the plans of one data share those parts as objects (apexmesh/apex/hops.py), so
        # comparing identities groups them without hashing the parts per recipient.
        here: dict[tuple[int, int, int], list[RecipientPlan]] = {}
        pods: dict[tuple[str, tuple[int, int, int]], list[RecipientPlan]] = {}
        for plan in plans:
            endpoint = plan.recipient.identity
            forward = plan.forward
            assert forward is not None  # noqa: S101  (no failure, so a forward exists)
            owner = str(endpoint)
            decision = self.access.lookup(owner, actor, CORE_DATA) or await self._decide(
                owner, actor, CORE_DATA
            )
            if not decision.allowed:
                refused = Outcome(int(decision.code), decision.text or "access denied")
                outcomes[endpoint] = _done(refused)
                continue
            key = (id(forward.originator), id(forward.options), id(forward.data_content))
            if endpoint in self.local:
                here.setdefault(key, []).append(plan)
                continue
            address = await self._locate(endpoint)
            if address is None:
                outcomes[endpoint] = _done(UNKNOWN_ENDPOINT)
                continue
            pods.setdefault((address, key), []).append(plan)
        deliveries: list[_GroupDelivery] = []
        targets = [("", members) for members in here.values()]
        targets += [(address, members) for (address, _key), members in pods.items()]
        for address, members in targets:
            group = _group(job, members)
            if group is None:  # no template: one data per recipient, as without grouping
                for plan in members:
                    outcomes[plan.recipient.identity] = await self._deliver_here(job, plan)
                continue
            self.metrics.count(self.metrics.deliveries, "pod" if address else "local", len(members))
            sent = (
                self.peers.deliver_group(address, group, originator)
                if address
                else deliver_here(group, self.local)
            )
            deliveries.append((group.recipients, self._relocate(group, originator, address, sent)))
        return deliveries

    def _relocate(
        self,
        group: Group,
        originator: Endpoint,
        address: str,
        sent: asyncio.Future[tuple[Outcome, ...]],
    ) -> asyncio.Future[tuple[Outcome, ...]]:
        """The group's outcomes, after looking again for the recipients that were not
        where they were thought to be (see :meth:`_retry_elsewhere`)."""
        result: asyncio.Future[tuple[Outcome, ...]] = asyncio.get_running_loop().create_future()

        async def again(outcomes: tuple[Outcome, ...], stale: list[int]) -> tuple[Outcome, ...]:
            updated = list(outcomes)
            for index in stale:
                updated[index] = await self._retry_elsewhere(
                    group.recipients[index],
                    originator,
                    group.payload((index,)),
                    address,
                    outcomes[index],
                )
            return tuple(updated)

        def settled(future: asyncio.Future[tuple[Outcome, ...]]) -> None:
            if future.cancelled() or future.exception() is not None:
                _copy(future, result)
                return
            outcomes = future.result()
            stale = [i for i, outcome in enumerate(outcomes) if _stale_location(outcome)]
            if not stale:
                result.set_result(outcomes)
                return
            follow = asyncio.ensure_future(again(outcomes, stale))
            follow.add_done_callback(lambda done: _copy(done, result))

        sent.add_done_callback(settled)
        return result

    async def _retry_elsewhere(
        self,
        endpoint: Endpoint,
        originator: Endpoint,
        payload: bytes,
        address: str,
        outcome: Outcome,
    ) -> Outcome:
        """A cached location was stale (the pod no longer holds the endpoint, or it is gone
        and its endpoints re-attached elsewhere): ask again."""
        self._locations.pop(endpoint, None)
        fresh = await self._locate(endpoint)
        if fresh is None:
            return UNKNOWN_ENDPOINT
        if fresh == address:
            return outcome
        return await self.peers.deliver(fresh, endpoint, originator, payload)

    async def _locate(self, endpoint: Endpoint) -> str | None:
        cached = self._locations.get(endpoint)
        if cached is not None and cached[0] > self.clock():
            return cached[1]
        return await self._ask_location(endpoint)

    async def _ask_location(self, endpoint: Endpoint) -> str | None:
        """Where Redis says ``endpoint`` is attached (None: here or nowhere), kept for
        :data:`LOCATION_TTL_SECONDS`."""
        now = self.clock()
        found = await self.attachments.locate(str(endpoint))
        if found is None or not found[1] or found[0] == self.attachments.pod_id:
            self._locations.pop(endpoint, None)
            return None
        if len(self._locations) > 100_000:
            self._locations.clear()
        self._locations[endpoint] = (now + LOCATION_TTL_SECONDS, found[1])
        return found[1]

    def _payload(self, job: Job, forward: Data) -> bytes:
        """The BEEP payload carrying ``forward`` (see :func:`job_payload`)."""
        return job_payload(job, forward)

    async def _conclude(
        self,
        job: Job,
        outcomes: dict[Endpoint, asyncio.Future[Outcome]],
        reports: tuple[PendingReport, ...],
        groups: list[_GroupDelivery],
    ) -> None:
        results: dict[Endpoint, Outcome] = {}
        for endpoint, future in outcomes.items():
            try:
                results[endpoint] = await future
            except Exception as exc:  # noqa: BLE001  (a route failed without an outcome)
                _log.warning("delivery to %s failed: %s", endpoint, exc)
                results[endpoint] = Outcome(ApexReplyCode.ACTION_ABORTED, "local error")
        for endpoints, grouped in groups:
            try:
                results.update(zip(endpoints, await grouped, strict=True))
            except Exception as exc:  # noqa: BLE001
                _log.warning("delivery to a group of %d failed: %s", len(endpoints), exc)
                results.update(
                    (endpoint, Outcome(ApexReplyCode.ACTION_ABORTED, "local error"))
                    for endpoint in endpoints
                )
        for endpoint, outcome in results.items():
            self._count_outcome(job.data.originator.identity, endpoint, outcome)
        held = frozenset(endpoint for endpoint, outcome in results.items() if outcome is HELD)
        reported: dict[str, None] = {}
        for report in _without((*reports, *self._forwarding_failures(job, results, reports)), held):
            reported[self._report_domain(report)] = None
            response = status_response(
                report,
                (
                    (
                        endpoint,
                        Reply(
                            code=code_of(results[endpoint].code),
                            trans_id=None,
                            text=results[endpoint].text if not results[endpoint].ok else "",
                        ),
                    )
                    for endpoint in report.recipients
                ),
            )
            await self.services.report(self._report_domain(report), report.originator, response)
        if self.tracer is not None:
            self.tracer.concluded(job.data, job.received_at, results, tuple(reported))

    def _report_domain(self, report: PendingReport) -> str:
        """The domain whose apex=report speaks for this relay (RFC 3340 section 5.1): the
        reported recipients' domain when this relay serves it, else its primary domain."""
        if not report.recipients:
            return self.primary_domain
        return self._voice_for(report.recipients[0])

    def _voice_for(self, recipient: Endpoint) -> str:
        """The domain whose apex=report reports on ``recipient``."""
        return recipient.domain if recipient.domain in self.domains else self.primary_domain

    def _forwarding_failures(
        self, job: Job, results: dict[Endpoint, Outcome], reports: tuple[PendingReport, ...]
    ) -> tuple[PendingReport, ...]:
        """statusRequests that did not apply here but whose forwarding failed here: the
        originator would otherwise never learn the fate of those recipients."""
        covered = {(r.trans_id, e) for r in reports for e in r.recipients}
        owed: dict[int, list[Endpoint]] = {}
        for plan in job.plan.recipients:
            endpoint = plan.recipient.identity
            if plan.final or results.get(endpoint, DELIVERED).ok:
                continue
            for option in (*job.data.options, *plan.recipient.options):
                if option.internal == STATUS_REQUEST and (option.trans_id, endpoint) not in covered:
                    owed.setdefault(option.trans_id, []).append(endpoint)
        return tuple(
            PendingReport(
                trans_id=trans_id,
                originator=job.data.originator.identity,
                recipients=tuple(endpoints),
            )
            for trans_id, endpoints in owed.items()
        )

    async def close(self) -> None:
        """Wait for background conclusions (bounded by the caller's shutdown grace)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
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


def _done(outcome: Outcome) -> asyncio.Future[Outcome]:
    future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
    future.set_result(outcome)
    return future


def _may_owe_reports(job: Job) -> bool:
    """True when a failed forwarding could owe a statusResponse (see _forwarding_failures)."""
    if any(option.internal == STATUS_REQUEST for option in job.data.options):
        return True
    return any(
        option.internal == STATUS_REQUEST
        for plan in job.plan.recipients
        for option in plan.recipient.options
    )


def job_payload(job: Job, forward: Data) -> bytes:
    """The BEEP payload carrying ``forward``: the received bytes when unchanged.

    A data with many recipients (a pubsub publication) becomes one data per
    recipient that differ only in their recipient element: the payload is built once
    around a placeholder recipient and each recipient's element spliced in.
    """
    if len(job.data.recipients) < _TEMPLATE_FROM or len(forward.recipients) != 1:
        return payload_for(forward, job.data, job.parts, job.raw)
    template = _template(job, forward)
    if template is None:
        return payload_for(forward, job.data, job.parts, job.raw)
    head, tail = template
    return b"".join((head, forward.recipients[0].to_xml(), tail))


def _template(job: Job, forward: Data) -> tuple[bytes, bytes] | None:
    """The payload carrying ``forward`` split around its recipient elements, built once
    per job and template key; None when it cannot be split (it is then built whole)."""
    key: _TemplateKey = (forward.originator, forward.options, forward.data_content)
    template = job.templates.get(key)
    if template is None:
        shaped = dataclasses.replace(forward, recipients=(_PLACEHOLDER,))
        built = payload_for(shaped, job.data, job.parts, job.raw)
        head, marker, tail = built.partition(_PLACEHOLDER_XML)
        if not marker:
            return None
        template = job.templates[key] = (head, tail)
    return template


def _group(job: Job, plans: list[RecipientPlan]) -> Group | None:
    """The recipients of ``plans`` (which share a template key) as one :class:`Group`."""
    forwards = [plan.forward for plan in plans if plan.forward is not None]
    template = _template(job, forwards[0])
    if template is None:
        return None
    return Group(
        recipients=tuple(forward.recipients[0].identity for forward in forwards),
        elements=tuple(forward.recipients[0].to_xml() for forward in forwards),
        head=template[0],
        tail=template[1],
    )


#: Options whose steps run around a final delivery (see Router._deliver_final).
_PARTY_STEPS: Final = frozenset({DATA_TIMING, HOLD_FOR_ENDPOINT})


def _party_steps(plan: RecipientPlan) -> bool:
    """dataTiming or hold4Endpoint applies: the recipient's delivery is its own (its
    timers, its hold), never part of a group."""
    return any(placed.option.internal in _PARTY_STEPS for placed in plan.process)


def _not_attached(outcome: Outcome) -> bool:
    """The recipient turned out not to be attached (or detached meanwhile)."""
    if outcome in (UNKNOWN_ENDPOINT, ENDPOINT_DETACHED):
        return True
    return outcome.code == ApexReplyCode.ACTION_NOT_TAKEN and outcome.text == NOT_HERE


def _without(
    reports: tuple[PendingReport, ...], held: frozenset[Endpoint]
) -> tuple[PendingReport, ...]:
    """statusRequest reports minus held recipients: their fate is not known yet."""
    kept = []
    for report in reports:
        recipients = tuple(e for e in report.recipients if e not in held)
        if recipients:
            kept.append(dataclasses.replace(report, recipients=recipients))
    return tuple(kept)


def _stale_location(outcome: Outcome) -> bool:
    """The pod asked no longer holds the endpoint, or is gone: locate it again."""
    moved = outcome.code == ApexReplyCode.ACTION_NOT_TAKEN and outcome.text == NOT_HERE
    return moved or outcome == POD_UNAVAILABLE


def _chain(
    first: asyncio.Future[Outcome],
    needs_more: Callable[[Outcome], bool],
    then: Callable[[Outcome], Awaitable[Outcome]],
) -> asyncio.Future[Outcome]:
    """The outcome of ``first``, or of ``then(it)`` when ``needs_more(it)``: callbacks, so
    that the common case costs no task."""
    result: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()

    def settled(future: asyncio.Future[Outcome]) -> None:
        if future.cancelled() or future.exception() is not None or not needs_more(future.result()):
            _copy(future, result)
            return
        follow = asyncio.ensure_future(then(future.result()))
        follow.add_done_callback(lambda done: _copy(done, result))

    first.add_done_callback(settled)
    return result


def _copy(source: asyncio.Future[_T], target: asyncio.Future[_T]) -> None:
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif (error := source.exception()) is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())
