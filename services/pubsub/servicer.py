"""The pubsub service's I/O around :mod:`apexmesh.pubsub.core` and the Redis store.

:class:`PubsubService` runs each operation as: parse (500/501/553), step 1 through the
access service (537; an access service that cannot be reached is 451), read the topic,
decide in the core, then commit the changes together with the journal of what must be
sent (one Lua script; a concurrent change of the same topic makes it re-read and decide
again), then send through the relays and clear the journal. A pod that dies between
commit and send leaves its journal to the leader, which sends it (section 4: in-progress
operations in persistent storage).

Data to ``apex=pubsub/TOPIC`` (section 4.7.1) is answered only after the relay accepted
the forwarded data (``Submit`` 250): the ``ok`` the delivering relay receives means the
fan-out is the relays' job from then on, so nothing about a publication needs to be
journalled. Subscriber lists are cached per pod and re-read when the topic's version
moves (one Redis round trip per publication).

:meth:`PubsubService.tick` runs on every pod: it renews the pod's lease, and on the
leader alone ends due leases (one cancel each, section 4.5 step 5.2), redoes orphaned
journal entries and keeps upstream subscriptions of redistributed topics alive (2.6).

Robust topics (XEP-0040, docs/robust.md) are :class:`services.pubsub.robust_service.
RobustService`'s: the publisher hands it their publications, :meth:`handle` its
operations; ``WellKnownEndpoint.Deliver`` is :mod:`services.pubsub.endpoint`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

import grpc

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.presence_core import error_reply
from apexmesh.contracts.presence.v1 import presence_pb2_grpc
from apexmesh.pubsub import core
from apexmesh.pubsub._fields import pubsub_tag
from apexmesh.pubsub.core import Outcome, Send
from apexmesh.pubsub.elements import (
    CANCEL_TOKEN,
    CREATETOPIC_TOKEN,
    DATA_TOKEN,
    DELETETOPIC_TOKEN,
    LISTTOPICS_TOKEN,
    SUBSCRIBE_TOKEN,
    CreateTopic,
    DeleteTopic,
    ListTopics,
    Operation,
    Subscribe,
    operation_from,
    service_endpoint,
    topic_endpoint,
)
from apexmesh.pubsub.schema import LocalSchemas, SchemaCache, compile_topic
from apexmesh.pubsub.selection.registry import default_classes
from apexmesh.pubsub.subscription_elements import (
    ContentCancel,
    ContentOperation,
    ContentSubscribe,
    content_operation_from,
    is_content_form,
)
from apexmesh.pubsub.topic_index import SelectorCompiler
from apexmesh.pubsub.topic_updates import is_modification, modify_topic
from apexmesh.pubsub.wire import (
    delivered_content,
)
from apexmesh.pubsub.wkt import TOPICS, is_well_known
from apexmesh.rpc.access import AccessClient
from apexmesh.rpc.relay import RelaySubmitter
from apexmesh.store.access_cache import CachedAccessChecker
from apexmesh.store.pubsub import PubsubStore, TopicView
from apexmesh.store.pubsub_cache import SubscriberCache
from apexmesh.store.pubsub_leader import Elector, RedisLeader
from apexmesh.store.pubsub_messages import MessageStore
from services.pubsub.content import ContentSelection
from services.pubsub.content_ops import ContentOperations, refused
from services.pubsub.journal import JournalWorker, send_entries
from services.pubsub.metrics import PubsubMetrics
from services.pubsub.publishing import Publisher
from services.pubsub.robust_service import RobustService, robust_operation
from services.pubsub.settings import Upstream
from services.pubsub.upstream import Redistribution
from services.pubsub.well_known import WellKnownTopics, topic_operation

_log = logging.getLogger(__name__)

#: Milliseconds since the epoch (the core reads no clock).
Clock = Callable[[], int]

#: Attempts at an operation whose topic keeps changing under it (optimistic commits).
COMMIT_ATTEMPTS = 16

#: Leases ended per claim (one Lua call).
EXPIRY_BATCH = 500

#: An entry still in the journal this long after it was written is redone (its send
#: failed, e.g. no relay reachable): at-least-once for journalled work.
RETRY_AFTER_MS = 10_000

#: How often the leader scans the journal for orphaned work.
ORPHAN_SCAN_MS = 1_000


def parse_any_operation(content: bytes) -> Operation | ContentOperation:
    """An operation to ``apex=pubsub``: a subscribe or cancel in the draft-wyman form
    (namespace, child elements, its attributes) as content-based, anything else as
    draft-schwartz reads it (500, 501, 553)."""
    root = _dtd.parse_root(content)
    if pubsub_tag(root) in ("subscribe", "cancel") and is_content_form(root):
        return content_operation_from(root)
    return operation_from(root)


class PubsubService:
    """Sections 4.2-4.7 over the store, the access service and the relays."""

    def __init__(
        self,
        *,
        domains: Iterable[str],
        store: PubsubStore,
        access: AccessClient,
        access_cache: CachedAccessChecker | None,
        relays: RelaySubmitter,
        cache: SubscriberCache,
        fanout: RelaySubmitter | None = None,
        direct: Mapping[str, RelaySubmitter] | None = None,
        presence: presence_pb2_grpc.PresenceServiceStub | None,
        metrics: PubsubMetrics,
        clock: Clock,
        lease_ms: int,
        grant_data: bool = False,
        hops: int = core.DEFAULT_HOPS,
        upstreams: Sequence[Upstream] = (),
        upstream_duration: int = 3600,
        timeout: float = 2.0,
        elector: Elector | None = None,
        selection: ContentSelection | None = None,
    ) -> None:
        self.domains = frozenset(domains)
        self.store = store
        self._elector: Elector = elector or RedisLeader(store)
        self._access = access
        self._access_cache = access_cache
        self._metrics = metrics
        self._clock = clock
        self._lease_ms = lease_ms
        self._grant = grant_data
        #: The pod's subscriber lists (apexmesh/store/pubsub_cache.py).
        self._topics = cache
        #: Content-based selection (draft-wyman): selector classes, schemas, cached
        #: messages.
        self.selection = selection or ContentSelection(
            compiler=SelectorCompiler(default_classes(), SchemaCache(LocalSchemas())),
            messages=MessageStore(store.redis, store.keys),
            metrics=metrics,
            clock=clock,
        )
        self.publisher = Publisher(
            cache=cache,
            allowed=lambda owner, actor: self._allowed(owner, actor, DATA_TOKEN, None),
            fanout=fanout or relays,
            direct=direct or {},
            metrics=metrics,
            clock=clock,
            hops=hops,
            selection=self.selection,
        )
        self.well_known = WellKnownTopics(
            store=store,
            messages=self.selection.messages,
            publish=lambda d, t, o, p, k: self.publisher.publish(d, t, o, p, k, trusted=True),
            clock=clock,
            classes=self.selection.compiler.classes.names,
        )
        self.content = ContentOperations(
            store=store,
            selection=self.selection,
            publisher=self.publisher,
            allowed=self._allowed,
            decided=self._decided,
            clock=clock,
            announce=lambda d, sub, status, duration: self.well_known.subscription_announcement(
                d, sub, status=status, duration=duration
            ),
            grant_data=grant_data,
        )
        self.journal = JournalWorker(
            store=store,
            access=access,
            relays=relays,
            presence=presence,
            metrics=metrics,
            timeout=timeout,
            announce=self.well_known.perform,
        )
        self.journal.lease_ended = self.well_known.lease_ended
        self.redistribution = Redistribution(
            store=store,
            journal=self.journal,
            run=self._run,
            clock=clock,
            upstreams=upstreams,
            duration_seconds=upstream_duration,
            grant_data=grant_data,
            content=self.content,
            well_known=self.well_known,
        )
        #: Robust topics (XEP-0040, docs/robust.md): publications, gap, sourcequery,
        #: snapshot, permissions, and the per-pod task of leases and heartbeats.
        self.robust = RobustService(
            domains=self.domains,
            store=store,
            cache=cache,
            publisher=self.publisher,
            submitter=relays,
            allowed=self._allowed,
            reply=lambda d, to, code, trans_id, text: self._send(
                d, to, Reply(code=code, trans_id=trans_id, text=text).to_xml(), code
            ),
            answer=lambda d, to, content: self._send(d, to, content, 250),
            clock=clock,
            lease_ms=lease_ms,
            timeout=timeout,
        )
        self.publisher.robust = self.robust.publication
        self.publisher.refused = lambda d, to, trans_id, code, text: self._send(
            d, to, Reply(code=code, trans_id=trans_id, text=text[:200]).to_xml(), code
        )
        self._last_scan = 0
        #: Domains this pod currently leads.
        self.leading: set[str] = set()

    @property
    def leader(self) -> bool:
        return bool(self.leading)

    # ------------------------------------------------------------------ access

    async def _allowed(
        self, owner: Endpoint, actor: Endpoint, token: str, trans_id: int | None
    ) -> bool:
        """Step 1 of every operation; 451 when the access service cannot answer."""
        try:
            if self._access_cache is not None:
                decision = self._access_cache.lookup(str(owner), str(actor), token)
                if decision is None:
                    decision = await self._access_cache.check(str(owner), str(actor), token)
            else:
                decision, _ = await self._access.check(str(owner), str(actor), token)
        except grpc.aio.AioRpcError as exc:
            _log.warning("access check failed: %s %s", exc.code(), exc.details())
            raise ApexError(
                ApexReplyCode.ACTION_ABORTED, "access service unavailable", trans_id=trans_id
            ) from None
        return decision.allowed

    # ------------------------------------------------------------------ operations

    async def _decided(
        self,
        domain: str,
        outcome: Outcome,
        topic: str | None,
        version: int | None,
        *,
        subscription: bool = False,
    ) -> bool:
        """Commit (with the journal) and send; False when the topic moved meanwhile.
        A subscription change needs only the topic to exist still (``subscription``);
        topic creation and deletion need the version they were decided on."""
        work = send_entries(domain, outcome.sends)
        now = self._clock()
        if outcome.changes and topic is not None:
            entries = await self.store.commit(
                domain,
                topic,
                None if subscription else version,
                outcome.changes,
                work,
                now,
                topic_exists=subscription,
            )
            if entries is None:
                return False
        else:
            await self.store.journal(domain, work, now)
            entries = work
        await self.journal.perform(domain, entries)
        return True

    async def _send(self, domain: str, recipient: Endpoint, content: bytes, code: int) -> None:
        """An answer from ``apex=pubsub@domain`` through the journal (the reply path)."""
        outcome = Outcome(code=code, step="robust", sends=(Send(recipient, content),))
        await self._decided(domain, outcome, None, None)

    async def _run(
        self,
        domain: str,
        topic: str,
        decide: Callable[[TopicView], Outcome],
        *,
        subscription: bool = True,
        subscribers: Sequence[Endpoint] | None = None,
    ) -> Outcome:
        """Read (only the subscriptions of ``subscribers`` when given), decide, commit
        if the topic did not change meanwhile; again otherwise."""
        for _ in range(COMMIT_ATTEMPTS):
            view = await self.store.read_topic(domain, topic, subscribers)
            outcome = decide(view)
            if await self._decided(domain, outcome, topic, view.version, subscription=subscription):
                return outcome
        raise ApexError(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, f"topic {topic} is busy")

    async def _operate(
        self, domain: str, originator: Endpoint, op: Operation | ContentOperation
    ) -> Outcome:
        service = service_endpoint(domain)
        grant = self._grant
        if isinstance(op, ContentSubscribe):
            return await self.content.subscribe(domain, originator, op)
        if isinstance(op, ContentCancel):
            return await self.content.cancel(domain, originator, op)
        if isinstance(op, ListTopics):
            allowed = await self._allowed(service, originator, LISTTOPICS_TOKEN, op.trans_id)
            topics = await self.store.topics(domain) if allowed else []
            topics = [topic for topic in topics if not is_well_known(topic)]
            outcome = core.list_topics(op, originator, allowed=allowed, topics=topics)
            await self._decided(domain, outcome, None, None)
            return outcome
        if isinstance(op, CreateTopic):
            allowed = await self._allowed(service, originator, CREATETOPIC_TOKEN, op.trans_id)
            settings = op.description.settings
            if allowed and settings.has_schemas:
                try:  # 6.2.3: schemas this service cannot use are refused, never stored
                    compile_topic(settings, self.selection.compiler.schemas.local)
                except ApexError as exc:
                    outcome = refused(originator, op.trans_id, int(exc.code), str(exc)[:200])
                    await self._decided(domain, outcome, None, None)
                    return outcome

            def create_or_modify(v: TopicView) -> Outcome:
                # 6.2.2: the creator's createtopic of its existing topic modifies it.
                if v.creator is not None and is_modification(
                    op, originator, exists=v.exists, creator=v.creator
                ):
                    return modify_topic(
                        op,
                        originator,
                        allowed=allowed,
                        creator=v.creator,
                        created_ms=v.created_ms,
                        current=v.settings,
                    )
                return core.create_topic(
                    op, originator, allowed=allowed, exists=v.exists, schemas_supported=True
                )

            return await self._run(
                domain,
                op.topic,
                self.well_known.announcing(domain, op, create_or_modify),
                subscription=False,
                subscribers=(),
            )
        if isinstance(op, DeleteTopic):
            allowed = await self._allowed(service, originator, DELETETOPIC_TOKEN, op.trans_id)
            return await self._run(
                domain,
                op.topic,
                self.well_known.announcing(
                    domain,
                    op,
                    lambda v: core.delete_topic(
                        op,
                        originator,
                        allowed=allowed,
                        exists=v.exists,
                        subscriptions=v.every_subscription,
                        creator=v.creator,
                    ),
                ),
                subscription=False,
            )
        owner = topic_endpoint(op.topic, domain)
        if isinstance(op, Subscribe):
            allowed = await self._allowed(owner, originator, SUBSCRIBE_TOKEN, op.trans_id)
            return await self._run(
                domain,
                op.topic,
                lambda v: self.well_known.subscriptions_announced(
                    domain,
                    core.subscribe(
                        op,
                        originator,
                        domain=domain,
                        allowed=allowed,
                        exists=v.exists,
                        subscriptions=v.subscriptions,
                        now_ms=self._clock(),
                        grant_data=grant,
                    ),
                    op.duration,
                ),
                subscribers=core.concerned(op.topic, op.subscriber),
            )
        allowed = await self._allowed(owner, originator, CANCEL_TOKEN, op.trans_id)
        return await self._run(
            domain,
            op.topic,
            lambda v: self.well_known.subscriptions_announced(
                domain,
                core.cancel(
                    op,
                    originator,
                    domain=domain,
                    allowed=allowed,
                    exists=v.exists,
                    subscriptions=v.subscriptions,
                    now_ms=self._clock(),
                    grant_data=grant,
                ),
                0,
                v.subscriptions,
            ),
            subscribers=core.concerned(op.topic, op.subject(originator)),
        )

    async def administer(self, domain: str, op: CreateTopic | DeleteTopic) -> Outcome:
        """An operator's createtopic or deletetopic (the admin API, ``apexctl topics
        create/delete``): allowed, done as ``apex=pubsub@domain`` (recorded as the
        topic's creator), whose own reply is not sent (no endpoint asked); the
        subscribers of a deleted topic get their cancels as after any deletetopic."""
        operator = service_endpoint(domain)

        def decide(view: TopicView) -> Outcome:
            if isinstance(op, CreateTopic):
                outcome = core.create_topic(op, operator, allowed=True, exists=view.exists)
            else:
                outcome = core.delete_topic(
                    op,
                    operator,
                    allowed=True,
                    exists=view.exists,
                    subscriptions=view.every_subscription,
                )
            sends = tuple(send for send in outcome.sends if send.recipient != operator)
            return dataclasses.replace(outcome, sends=sends)

        outcome = await self._run(
            domain,
            op.topic,
            self.well_known.announcing(domain, op, decide),
            subscription=False,
            subscribers=() if isinstance(op, CreateTopic) else None,
        )
        self._metrics.operations.labels(type(op).__name__.lower(), str(outcome.code)).inc()
        if outcome.code == ApexReplyCode.SUCCESS:
            await self._robust_topic(domain, op)
        return outcome

    def purge(self, domain: str, topic: str) -> bool:
        """Forget what this pod caches of a topic (its subscriber list and where they
        are attached): the next publication reads both from Redis again. True when
        something was cached."""
        return self._topics.forget(domain, topic)

    async def handle(self, domain: str, originator: Endpoint, content: bytes) -> int:
        """An operation sent to ``apex=pubsub@domain``; returns the reply code sent (0
        when it was forwarded to a redistributing server)."""
        name = "unknown"
        try:
            robust = robust_operation(content)
            if robust is not None:
                served = await self.robust.operation(domain, originator, robust)
                self._metrics.operations.labels(served.value, "250").inc()
                return 250
            op = parse_any_operation(content)
            name = type(op).__name__.lower()
            outcome = await self._operate(domain, originator, op)
            if outcome.code == ApexReplyCode.SUCCESS and isinstance(op, CreateTopic | DeleteTopic):
                await self._robust_topic(domain, op)
        except ApexError as exc:
            await self.refuse(domain, originator, exc)
            self._metrics.operations.labels(name, str(int(exc.code))).inc()
            return int(exc.code)
        self._metrics.operations.labels(name, str(outcome.code)).inc()
        return outcome.code

    async def _robust_topic(self, domain: str, op: CreateTopic | DeleteTopic) -> None:
        """After a createtopic or deletetopic (however it came): a robust topic is
        registered for the pods' task, a deleted topic's robust state goes."""
        if isinstance(op, DeleteTopic):
            await self.robust.deleted(domain, op.topic)
        elif op.description.settings.robust is not None:
            await self.robust.created(domain, op.topic)

    async def refuse(self, domain: str, originator: Endpoint, exc: ApexError) -> None:
        reply = error_reply(exc)
        await self._decided(
            domain,
            Outcome(code=reply.code, step="parse", sends=(Send(originator, reply.to_xml()),)),
            None,
            None,
        )

    # ------------------------------------------------------------------ 4.7.1

    async def publish(
        self,
        domain: str,
        topic: str,
        originator: Endpoint,
        payload: bytes,
        delivery_id: str = "",
        *,
        forwarded: bool = False,
    ) -> tuple[int, str]:
        """Section 4.7.1: (code, text) for the delivering relay (services/pubsub/publishing.py).
        A description published to WKT=Topics is a createtopic or deletetopic (6.2)."""
        if topic == TOPICS and originator != service_endpoint(domain):
            _data, body, _parts = delivered_content(payload)
            try:
                op = topic_operation(body, self.journal.next_id())
            except ApexError as exc:
                return int(exc.code), str(exc)[:200]
            outcome = await self._operate(domain, originator, op)
            self._metrics.operations.labels(type(op).__name__.lower(), str(outcome.code)).inc()
            if outcome.code == ApexReplyCode.SUCCESS:
                await self._robust_topic(domain, op)
            return outcome.code, ""
        return await self.publisher.publish(
            domain, topic, originator, payload, delivery_id, forwarded=forwarded
        )

    # ------------------------------------------------------------------ time

    async def keep_alive(self) -> None:
        """Renew the pod's lease and the leader locks. Runs in its own loop (every third
        of the lease), never behind a long round of work: a pod busy sending cancels
        must not look dead, or its journal would be redone by another pod."""
        await self.store.heartbeat(self._lease_ms)
        for domain in sorted(self.domains):
            await self.well_known.ensure(domain)
            if await self._elector.lead(domain, self._lease_ms):
                self.leading.add(domain)
            else:
                self.leading.discard(domain)

    async def tick(self) -> None:
        """For each domain this pod leads: due leases (a cancel each), orphaned journal
        entries, upstream subscriptions."""
        scan = self._clock() - self._last_scan >= ORPHAN_SCAN_MS
        if scan:
            self._last_scan = self._clock()
        for domain in sorted(self.leading):
            while True:
                due = await self.store.claim_expired(domain, self._clock(), EXPIRY_BATCH)
                if not due:
                    break
                # Not awaited to the end: leases that fall due while these cancels are
                # sent are claimed on time (start waits only while the window is full).
                await self.journal.start(domain, due)
            if scan:
                now = self._clock()
                orphans = await self.store.orphans(domain, now, max(RETRY_AFTER_MS, self._lease_ms))
                if orphans:
                    _log.info("redoing %d journal entries of %s", len(orphans), domain)
                    await self.journal.perform(domain, orphans)
        await self.redistribution.renew(self.leading)

    async def next_timer(self) -> int | None:
        """The earliest lease end of the domains this pod leads."""
        ends = [await self.store.next_expiry(domain) for domain in sorted(self.leading)]
        return min((end for end in ends if end is not None), default=None)

    async def resign(self) -> None:
        for domain in sorted(self.leading):
            await self._elector.resign(domain)
        self.leading.clear()


__all__ = ["PubsubService"]
