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

:class:`PubsubEndpointServicer` is ``WellKnownEndpoint.Deliver`` for ``apex=pubsub@D``
and ``apex=pubsub/TOPIC@D``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

import grpc

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Reply, reply_from
from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.apex.errors import ApexError
from apexmesh.apex.presence_core import error_reply
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.endpoint.v1 import endpoint_pb2
from apexmesh.contracts.presence.v1 import presence_pb2, presence_pb2_grpc
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
    Cancel,
    CreateTopic,
    DeleteTopic,
    ListTopics,
    Operation,
    Subscribe,
    is_service,
    operation_from,
    service_endpoint,
    topic_endpoint,
    topic_of,
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
from apexmesh.pubsub.topic_description import TopicDescription
from apexmesh.pubsub.topic_index import SelectorCompiler
from apexmesh.pubsub.wire import (
    access_get,
    access_set,
    delivered_content,
    element_payload,
    last_update,
    reply_code,
)
from apexmesh.pubsub.wkt import TOPICS, is_well_known
from apexmesh.rpc.access import AccessClient
from apexmesh.rpc.endpoint import WellKnownEndpointServicer
from apexmesh.rpc.relay import RelaySubmitter
from apexmesh.store.access_cache import CachedAccessChecker
from apexmesh.store.pubsub import JournalEntry, PubsubStore, TopicView, new_entry
from apexmesh.store.pubsub_cache import SubscriberCache
from apexmesh.store.pubsub_leader import Elector, RedisLeader
from apexmesh.store.pubsub_messages import MessageStore
from services.pubsub.content import ContentSelection
from services.pubsub.content_ops import ContentOperations, refused
from services.pubsub.metrics import PubsubMetrics
from services.pubsub.publishing import Publisher
from services.pubsub.settings import Upstream
from services.pubsub.well_known import WellKnownTopics, topic_operation

_log = logging.getLogger(__name__)

#: RFC 3341's token to change an owner's entries: who holds it on a topic owns it.
ACCESS_SET_TOKEN = "access:set"  # noqa: S105 - an access token name

#: Milliseconds since the epoch (the core reads no clock).
Clock = Callable[[], int]

#: Attempts at an operation whose topic keeps changing under it (optimistic commits).
COMMIT_ATTEMPTS = 16

#: Journal entries redone at once (bounded concurrency of Submit calls).
SEND_CONCURRENCY = 128

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
        self._relays = relays
        self._presence = presence
        self._metrics = metrics
        self._clock = clock
        self._lease_ms = lease_ms
        self._grant = grant_data
        self._hops = hops
        self._upstreams = tuple(upstreams)
        self._upstream_duration = upstream_duration
        self._timeout = timeout
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
        )
        self.content = ContentOperations(
            store=store,
            selection=self.selection,
            publisher=self.publisher,
            allowed=self._allowed,
            decided=self._decided,
            clock=clock,
            announce=lambda d, sub, status, duration: self.well_known.subscription_changed(
                d, sub, status=status, duration=duration
            ),
        )
        self._ids = itertools.count(1)
        self._last_scan = 0
        #: Domains this pod currently leads.
        self.leading: set[str] = set()

    def _next_id(self) -> int:
        return next(self._ids) % 2_147_483_647 or 1

    # ------------------------------------------------------------------ sending

    async def _submit(
        self, entry: JournalEntry, origin: Endpoint, recipient: Endpoint, content: bytes
    ) -> bool:
        """Send one element of ``entry``; True when the work is done (a relay answered,
        even with a refusal: the element can never be delivered then). The submission id
        is the entry's, so a redone entry whose first send went through (its pod died
        before forgetting it) is answered by the relay pod that took it, not relayed
        again (while that pod remembers it)."""
        outcome = await self._relays.submit(
            str(origin),
            element_payload(origin, recipient, content),
            key=str(recipient),
            submission_id=entry.submission_id,
        )
        self._metrics.sent.labels(str(outcome.code)).inc()
        if outcome.code != ApexReplyCode.SUCCESS:
            _log.info("to %s: relay answered %d %s", recipient, outcome.code, outcome.text)
        return outcome.source == "relay"

    async def _do(self, entry: JournalEntry) -> bool:
        f = entry.fields
        try:
            if entry.kind == "send":
                return await self._submit(
                    entry,
                    Endpoint.parse(f["origin"]),
                    Endpoint.parse(f["recipient"]),
                    bytes.fromhex(f["content"]),
                )
            if entry.kind == "expired":
                cancel: Cancel | ContentCancel = Cancel(
                    topic=f["topic"],
                    trans_id=int(f["trans_id"]),
                    subscriber=Endpoint.parse(f["subscriber"]),
                )
                if f.get("subscription_id"):
                    cancel = ContentCancel(
                        topic=f["topic"],
                        trans_id=int(f["trans_id"]),
                        subscriber=Endpoint.parse(f["subscriber"]),
                        subscription_id=int(f["subscription_id"]),
                    )
                self._metrics.expired.inc()
                return await self._submit(
                    entry,
                    service_endpoint(f["domain"]),
                    Endpoint.parse(f["originator"]),
                    cancel.to_xml(),
                )
            if entry.kind == "presence":
                return await self._tuple(f["domain"], f["topic"], add=f["action"] == "add")
            if entry.kind == "owner":
                return await self._grant_owner(
                    f["domain"], f["topic"], Endpoint.parse(f["owner"]), f["action"] == "grant"
                )
            if entry.kind == "access":
                return await self._grant_data(
                    f["domain"], f["topic"], Endpoint.parse(f["subscriber"]), f["action"] == "grant"
                )
        except (KeyError, ValueError, EndpointError, ApexError) as exc:
            _log.warning("journal entry %s cannot be done (%s): dropped", entry.id, exc)
            return True
        _log.warning("journal entry %s of unknown kind %r: dropped", entry.id, entry.kind)
        return True

    @property
    def leader(self) -> bool:
        return bool(self.leading)

    async def perform(self, domain: str, entries: Sequence[JournalEntry]) -> None:
        """Do journalled work in order (bounded concurrency) and forget what is done.
        Entries for one endpoint run one after the other, so it gets them in the order
        they were journalled (a deletetopic's reply, then the cancel of its subscriber's
        subscription); entries for different endpoints run at once."""
        for start in range(0, len(entries), SEND_CONCURRENCY):
            batch = entries[start : start + SEND_CONCURRENCY]
            if len(batch) == 1:
                results = [await self._do(batch[0])]
            else:
                results = await self._do_per_endpoint(batch)
            await self.store.done(
                domain, *(e.id for e, ok in zip(batch, results, strict=True) if ok)
            )

    async def _do_per_endpoint(self, batch: Sequence[JournalEntry]) -> list[bool]:
        chains: dict[str, list[int]] = {}
        for index, entry in enumerate(batch):
            fields = entry.fields
            endpoint = fields.get("recipient") or fields.get("subscriber") or entry.id
            chains.setdefault(endpoint, []).append(index)
        results = [False] * len(batch)

        async def chain(indices: list[int]) -> None:
            for index in indices:
                results[index] = await self._do(batch[index])

        await asyncio.gather(*(chain(indices) for indices in chains.values()))
        return results

    async def _tuple(self, domain: str, topic: str, *, add: bool) -> bool:
        """Sections 4.2/4.3 step 3.2: the topic's tuple in apex=pubsub's presence entry."""
        if self._presence is None:
            return True
        publisher = str(service_endpoint(domain))
        destination = f"apex:{topic_endpoint(topic, domain)}"
        try:
            if add:
                tuple_ = presence_pb2.Tuple(destination=destination)
                request = presence_pb2.SetTuplesRequest(publisher=publisher, tuples=[tuple_])
                answer = await self._presence.SetTuples(request, timeout=self._timeout)
            else:
                removal = presence_pb2.RemoveTuplesRequest(
                    publisher=publisher, destinations=[destination]
                )
                answer = await self._presence.RemoveTuples(removal, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            _log.warning("presence service unreachable: %s", exc.code())
            return False
        if answer.status.code != ApexReplyCode.SUCCESS:
            _log.warning("presence refused %s: %d", destination, answer.status.code)
        return True

    async def _grant_owner(self, domain: str, topic: str, owner: Endpoint, grant: bool) -> bool:
        """Sections 5.1 and 7: the creator's entry on its topic (or its removal)."""
        return await self._set_entry(
            domain, topic, owner, list(core.OWNER_TOKENS) if grant else [], only_if_found=not grant
        )

    async def _set_entry(
        self,
        domain: str,
        topic: str,
        actor: Endpoint,
        actions: list[str],
        *,
        only_if_found: bool = False,
    ) -> bool:
        """Write (or with no actions delete) the entry of ``actor`` on the topic, as the
        service; False when the access service could not be reached (done again)."""
        owner = topic_endpoint(topic, domain)
        service = str(service_endpoint(domain))
        try:
            get = access_get(owner, actor, self._next_id())
            found = last_update((await self._access.handle_operation(service, get)).reply.content)
            if only_if_found and not found:
                return True  # nothing to remove
            content = access_set(owner, actor, actions, found, self._next_id())
            result = await self._access.handle_operation(service, content)
        except grpc.aio.AioRpcError as exc:
            _log.warning("access service unreachable: %s", exc.code())
            return False
        if reply_code(result.reply.content) != ApexReplyCode.SUCCESS:
            _log.warning("access refused %s for %s: %r", owner, actor, result.reply.content[:120])
        return True

    async def _grant_data(self, domain: str, topic: str, subscriber: Endpoint, grant: bool) -> bool:
        """Section 7: core:data on the topic for a subscriber, or its removal.

        The grant is an entry for exactly the subscriber, which takes precedence over
        the wildcard entries that let it subscribe (RFC 3341 section 3.1): it therefore
        keeps the pubsub tokens the subscriber holds now, plus ``core:data``. Removal
        deletes that entry, so the subscriber falls back to the wildcard entries (an
        explicit entry it had before the grant is not restored: docs/pubsub.md). The
        topic's owner (who may set its entries) keeps its own entry either way."""
        owner = str(topic_endpoint(topic, domain))
        tokens = (SUBSCRIBE_TOKEN, CANCEL_TOKEN, ACCESS_SET_TOKEN)
        try:
            decisions, _ = await self._access.check_many(
                [(owner, str(subscriber), token) for token in tokens]
            )
        except grpc.aio.AioRpcError as exc:
            _log.warning("access service unreachable: %s", exc.code())
            return False
        if decisions[2].allowed:
            return True  # the owner's entry already holds core:data, and stays
        if not grant:
            return await self._set_entry(domain, topic, subscriber, [], only_if_found=True)
        actions = [t for t, d in zip(tokens[:2], decisions[:2], strict=True) if d.allowed]
        return await self._set_entry(domain, topic, subscriber, [*actions, DATA_TOKEN])

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

    def _entries(self, domain: str, sends: Iterable[Send]) -> list[JournalEntry]:
        origin = str(service_endpoint(domain))
        return [
            new_entry("send", origin=origin, recipient=str(s.recipient), content=s.content.hex())
            for s in sends
        ]

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
        work = self._entries(domain, outcome.sends)
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
        await self.perform(domain, entries)
        return True

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
            if allowed and not settings.is_default:
                try:  # 6.2.3: schemas this service cannot use are refused, never stored
                    compile_topic(settings, self.selection.compiler.schemas.local)
                except ApexError as exc:
                    outcome = refused(originator, op.trans_id, int(exc.code), str(exc)[:200])
                    await self._decided(domain, outcome, None, None)
                    return outcome
            outcome = await self._run(
                domain,
                op.topic,
                lambda v: core.create_topic(
                    op, originator, allowed=allowed, exists=v.exists, schemas_supported=True
                ),
                subscription=False,
                subscribers=(),
            )
            await self._topic_changed(domain, op, outcome)
            return outcome
        if isinstance(op, DeleteTopic):
            allowed = await self._allowed(service, originator, DELETETOPIC_TOKEN, op.trans_id)
            outcome = await self._run(
                domain,
                op.topic,
                lambda v: core.delete_topic(
                    op,
                    originator,
                    allowed=allowed,
                    exists=v.exists,
                    subscriptions=v.every_subscription,
                    creator=v.creator,
                ),
                subscription=False,
            )
            await self._topic_changed(domain, op, outcome)
            return outcome
        owner = topic_endpoint(op.topic, domain)
        if isinstance(op, Subscribe):
            allowed = await self._allowed(owner, originator, SUBSCRIBE_TOKEN, op.trans_id)
            return await self._run(
                domain,
                op.topic,
                lambda v: core.subscribe(
                    op,
                    originator,
                    domain=domain,
                    allowed=allowed,
                    exists=v.exists,
                    subscriptions=v.subscriptions,
                    now_ms=self._clock(),
                    grant_data=grant,
                ),
                subscribers=core.concerned(op.topic, op.subscriber),
            )
        allowed = await self._allowed(owner, originator, CANCEL_TOKEN, op.trans_id)
        return await self._run(
            domain,
            op.topic,
            lambda v: core.cancel(
                op,
                originator,
                domain=domain,
                allowed=allowed,
                exists=v.exists,
                subscriptions=v.subscriptions,
                now_ms=self._clock(),
                grant_data=grant,
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
            decide,
            subscription=False,
            subscribers=() if isinstance(op, CreateTopic) else None,
        )
        self._metrics.operations.labels(type(op).__name__.lower(), str(outcome.code)).inc()
        await self._topic_changed(domain, op, outcome)
        return outcome

    async def _topic_changed(
        self, domain: str, op: CreateTopic | DeleteTopic, outcome: Outcome
    ) -> None:
        """A topic created or deleted: announced on WKT=Topics (draft-wyman 6.2.2); a
        deleted topic's cached messages go with it."""
        if outcome.code != ApexReplyCode.SUCCESS:
            return
        deleted = isinstance(op, DeleteTopic)
        if deleted:
            await self.selection.messages.forget(domain, op.topic)
        description = op.description if isinstance(op, CreateTopic) else TopicDescription()
        await self.well_known.topic_changed(domain, op.topic, description, cancelled=deleted)

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
            op = parse_any_operation(content)
            name = type(op).__name__.lower()
            outcome = await self._operate(domain, originator, op)
        except ApexError as exc:
            await self.refuse(domain, originator, exc)
            self._metrics.operations.labels(name, str(int(exc.code))).inc()
            return int(exc.code)
        self._metrics.operations.labels(name, str(outcome.code)).inc()
        return outcome.code

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
        self, domain: str, topic: str, originator: Endpoint, payload: bytes, delivery_id: str = ""
    ) -> tuple[int, str]:
        """Section 4.7.1: (code, text) for the delivering relay (services/pubsub/publishing.py).
        A description published to WKT=Topics is a createtopic or deletetopic (6.2)."""
        if topic == TOPICS and originator != service_endpoint(domain):
            _data, body, _parts = delivered_content(payload)
            try:
                op = topic_operation(body, self._next_id())
            except ApexError as exc:
                return int(exc.code), str(exc)[:200]
            outcome = await self._operate(domain, originator, op)
            self._metrics.operations.labels(type(op).__name__.lower(), str(outcome.code)).inc()
            return outcome.code, ""
        return await self.publisher.publish(domain, topic, originator, payload, delivery_id)

    # ------------------------------------------------------------------ 2.6, as redistributor

    async def from_upstream(
        self, domain: str, topic: str, originator: Endpoint, content: bytes
    ) -> int:
        """Data to ``apex=pubsub/TOPIC@domain`` from another domain's ``apex=pubsub``: a
        subscribe or cancel it forwarded (4.5 step 4, 4.6 step 3), the cancel of our own
        upstream subscription, or its reply to it."""
        root = _dtd.parse_root(content)
        if _dtd.tag_of(root) == "reply":
            reply = reply_from(root, require_trans_id=False)
            if reply.code != ApexReplyCode.SUCCESS:
                _log.warning(
                    "upstream %s refused %s: %d %s", originator, topic, reply.code, reply.text
                )
            return 250
        op = operation_from(root)
        ours = topic_endpoint(topic, domain)
        if not any(
            u.topic == topic and u.domain == domain and u.upstream == originator.domain
            for u in self._upstreams
        ):
            raise ApexError(ApexReplyCode.NOT_AUTHORIZED, f"{originator} does not feed {topic}")
        if isinstance(op, Cancel) and op.subject(originator) == ours:
            await self.store.upstream_lost(domain, topic)
            return 250
        if isinstance(op, Subscribe):
            subject = op.subscriber

            def decide(view: TopicView) -> Outcome:
                if not view.exists:
                    return Outcome(
                        code=553,
                        step="4.5/2",
                        sends=(
                            Send(
                                subject,
                                Reply(
                                    code=553, trans_id=op.trans_id, text=f"no topic {topic}"
                                ).to_xml(),
                            ),
                        ),
                    )
                if op.duration <= 0:
                    return Outcome(
                        code=553,
                        step="4.5/3",
                        sends=(Send(subject, Reply(code=553, trans_id=op.trans_id).to_xml()),),
                    )
                return core.accept_subscribe(
                    op, subject, view.subscriptions, self._clock(), grant_data=self._grant
                )

            return (await self._run(domain, topic, decide, subscribers=(subject,))).code
        if isinstance(op, Cancel):
            subject = op.subject(originator)
            return (
                await self._run(
                    domain,
                    topic,
                    lambda v: core.accept_cancel(
                        op, subject, v.subscriptions, grant_data=self._grant
                    ),
                    subscribers=(subject,),
                )
            ).code
        raise ApexError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "not a forwarded operation")

    async def _renew_upstreams(self) -> None:
        now = self._clock()
        for up in self._upstreams:
            if up.domain not in self.leading:
                continue
            if not await self.store.upstream_due(up.domain, up.topic):
                continue
            ours = topic_endpoint(up.topic, up.domain)
            view = await self.store.read_topic(up.domain, up.topic)
            if not view.exists:
                create = core.create_topic(
                    CreateTopic(topic=up.topic, trans_id=self._next_id()),
                    service_endpoint(up.domain),
                    allowed=True,
                    exists=False,
                )
                await self.store.commit(up.domain, up.topic, view.version, create.changes, [], now)
            op = Subscribe(
                subscriber=ours,
                topic=up.topic,
                trans_id=self._next_id(),
                duration=self._upstream_duration,
            )
            entry = new_entry(
                "send",
                origin=str(ours),
                recipient=str(service_endpoint(up.upstream)),
                content=op.to_xml().hex(),
            )
            await self.store.journal(up.domain, [entry], now)
            await self.store.upstream_sent(up.domain, up.topic, self._upstream_duration * 500, now)
            await self.perform(up.domain, [entry])

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
                await self.perform(domain, due)
            if scan:
                now = self._clock()
                orphans = await self.store.orphans(domain, now, max(RETRY_AFTER_MS, self._lease_ms))
                if orphans:
                    _log.info("redoing %d journal entries of %s", len(orphans), domain)
                    await self.perform(domain, orphans)
        await self._renew_upstreams()

    async def next_timer(self) -> int | None:
        """The earliest lease end of the domains this pod leads."""
        ends = [await self.store.next_expiry(domain) for domain in sorted(self.leading)]
        return min((end for end in ends if end is not None), default=None)

    async def resign(self) -> None:
        for domain in sorted(self.leading):
            await self._elector.resign(domain)
        self.leading.clear()


# --------------------------------------------------------------------------- servicer


def _status(code: int, text: str = "") -> common_pb2.ApexStatus:
    return common_pb2.ApexStatus(code=int(code), text=text)


class PubsubEndpointServicer(WellKnownEndpointServicer):
    """``WellKnownEndpoint.Deliver`` for ``apex=pubsub@D`` and ``apex=pubsub/TOPIC@D``.

    An operation is answered 250 once handled (its outcome goes to the originator as a
    ``reply``); data for a topic is answered with section 4.7.1's code (250, 550) or
    537 without ``core:data``; a payload that is not APEX data gets its own code.
    """

    def __init__(self, service: PubsubService) -> None:
        self._service = service

    async def Deliver(  # noqa: N802 - generated servicer method name
        self, request: endpoint_pb2.EndpointDeliverRequest, _context: grpc.aio.ServicerContext
    ) -> endpoint_pb2.EndpointDeliverResponse:
        service = self._service
        try:
            recipient = Endpoint.parse(request.recipient)
            originator = Endpoint.parse(request.originator)
        except EndpointError as exc:
            return endpoint_pb2.EndpointDeliverResponse(status=_status(exc.code, str(exc)))
        if recipient.domain not in service.domains:
            return endpoint_pb2.EndpointDeliverResponse(
                status=_status(ApexReplyCode.ACTION_NOT_TAKEN, "unknown endpoint identity")
            )
        domain = recipient.domain
        if is_service(recipient):
            return await self._operation(domain, originator, bytes(request.payload))
        topic = topic_of(recipient)
        if topic is None:
            return endpoint_pb2.EndpointDeliverResponse(
                status=_status(ApexReplyCode.ACTION_NOT_TAKEN, "no such topic")
            )
        try:
            if core.is_upstream_operation(originator):
                _data, body, _parts = delivered_content(bytes(request.payload))
                code = await service.from_upstream(domain, topic, originator, body)
                return endpoint_pb2.EndpointDeliverResponse(status=_status(code))
            # Shielded: a relay that gives up waiting (its deadline) must not stop the
            # fan-out between its per-pod submits (some subscribers served, others not).
            code, text = await asyncio.shield(
                service.publish(
                    domain, topic, originator, bytes(request.payload), request.delivery_id
                )
            )
        except ApexError as exc:
            return endpoint_pb2.EndpointDeliverResponse(status=_status(exc.code, str(exc)[:200]))
        return endpoint_pb2.EndpointDeliverResponse(status=_status(code, text))

    async def _operation(
        self, domain: str, originator: Endpoint, payload: bytes
    ) -> endpoint_pb2.EndpointDeliverResponse:
        try:
            _data, body, _parts = delivered_content(payload)
        except ApexError as exc:
            # The operation cannot even be found: tell the originator, who sent it.
            await self._service.refuse(domain, originator, exc)
            return endpoint_pb2.EndpointDeliverResponse(status=_status(250))
        await self._service.handle(domain, originator, body)
        return endpoint_pb2.EndpointDeliverResponse(status=_status(250))


__all__ = [
    "PubsubEndpointServicer",
    "PubsubService",
]
