"""Journalled work of the pubsub service: what an operation committed together with its
changes (replies, cancels of ended leases, presence tuples, access entries,
announcements on the well-known topics) is done here and then forgotten.

Section 4 of draft-schwartz keeps in-progress operations in persistent storage: an entry
stays in the domain's journal (Redis) until its work is done, so a pod that dies between
commit and send leaves it to the leader, which does it again (the submission id makes a
redone send idempotent at the relay). :class:`JournalWorker` is the one place that does
that work:

* at most ``concurrency`` entries are in flight at once, as a sliding window over every
  batch handed to it (not a barrier per batch: one slow recipient holds one slot, not a
  whole batch of them);
* entries for one endpoint run one after the other in journal order, also across
  batches, so an endpoint gets a deletetopic's reply before the cancel of its own
  subscription, as journalled;
* :meth:`start` returns once the entries are taken (waiting only while the window is
  full), so the lease loop claims the next due leases on time while earlier cancels are
  still being sent; :meth:`perform` waits until they are done.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

import grpc

from apexmesh.apex.access import AccessError, ActorPattern, Entries
from apexmesh.apex.access_answers import get_xml, list_xml, parse_answer, set_xml
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.apex.errors import ApexError
from apexmesh.contracts.presence.v1 import presence_pb2, presence_pb2_grpc
from apexmesh.pubsub import core
from apexmesh.pubsub.changes import Subscription
from apexmesh.pubsub.core import Send
from apexmesh.pubsub.elements import (
    CANCEL_TOKEN,
    DATA_TOKEN,
    SUBSCRIBE_TOKEN,
    Cancel,
    service_endpoint,
    topic_endpoint,
)
from apexmesh.pubsub.subscription_elements import ContentCancel
from apexmesh.pubsub.topic_access import TopicAccess, default_access
from apexmesh.pubsub.wire import access_get, access_set, element_payload, last_update, reply_code
from apexmesh.rpc.access import AccessClient
from apexmesh.rpc.relay import SubmitOutcome, SubmitSource
from apexmesh.store.pubsub import JournalEntry, JournalKind, PubsubStore, new_entry
from services.pubsub.metrics import PubsubMetrics

_log = logging.getLogger(__name__)

#: RFC 3341's token to change an owner's entries: who holds it on a topic owns it.
ACCESS_SET_TOKEN = "access:set"  # noqa: S105 - an access token name

#: Journal entries in flight at once (bounded concurrency of Submit calls).
SEND_CONCURRENCY = 128


class Submitter(Protocol):
    """What the worker needs of :class:`apexmesh.rpc.relay.RelaySubmitter`."""

    async def submit(
        self, originator: str, payload: bytes, *, key: str | None = None, submission_id: str = ""
    ) -> SubmitOutcome: ...


def send_entries(domain: str, sends: Iterable[Send]) -> list[JournalEntry]:
    """The journal entries of an outcome's sends, from ``apex=pubsub@domain``."""
    origin = str(service_endpoint(domain))
    return [
        new_entry(
            JournalKind.SEND, origin=origin, recipient=str(s.recipient), content=s.content.hex()
        )
        for s in sends
    ]


#: ``announce(domain, topic, content, key, retire)``: publish an announcement on a
#: well-known topic (:meth:`services.pubsub.well_known.WellKnownTopics.perform`); True
#: once done, False to leave it journalled for a redo.
Announcer = Callable[[str, str, bytes, str, int | None], Awaitable[bool]]


def _chain_key(entry: JournalEntry) -> str:
    """Entries with the same key are done in journal order: those for one endpoint, and
    the announcements of one well-known message (its revisions in order)."""
    fields = entry.fields
    return fields.get("recipient") or fields.get("subscriber") or fields.get("chain") or entry.id


#: ``lease_ended(domain, subscription, at_ms, key)``: publish the subscription's lease-end
#: record on the Subscriptions topic; True once done.
LeaseEnded = Callable[[str, Subscription, int, str], Awaitable[bool]]


class JournalWorker:
    """Does journal entries (sends through the relays, presence tuples, access entries)
    within a window of ``concurrency`` and forgets each once done."""

    def __init__(
        self,
        *,
        store: PubsubStore,
        access: AccessClient,
        relays: Submitter,
        presence: presence_pb2_grpc.PresenceServiceStub | None,
        metrics: PubsubMetrics,
        timeout: float,
        concurrency: int = SEND_CONCURRENCY,
        announce: Announcer | None = None,
    ) -> None:
        self._store = store
        self._announce = announce
        self._access = access
        self._relays = relays
        self._presence = presence
        self._metrics = metrics
        self._timeout = timeout
        self._window = asyncio.Semaphore(concurrency)
        #: The last entry taken per endpoint: the next one for it waits for that one.
        self._tails: dict[str, asyncio.Future[None]] = {}
        self._running: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        #: Draft-wyman 6.3's record of a lease end (set by the service; None: none).
        self.lease_ended: LeaseEnded | None = None

    def next_id(self) -> int:
        """A transID for the service's own operations (access entries)."""
        return next(self._ids) % 2_147_483_647 or 1

    # ------------------------------------------------------------------ scheduling

    async def start(self, domain: str, entries: Sequence[JournalEntry]) -> list[asyncio.Task[None]]:
        """Take ``entries`` (waiting while the window is full) and return their tasks;
        each entry is forgotten once its work is done."""
        tasks = []
        for entry in entries:
            await self._window.acquire()
            key = _chain_key(entry)
            before = self._tails.get(key)
            mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._tails[key] = mine
            task = asyncio.create_task(self._run(domain, entry, key, before, mine))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
            tasks.append(task)
        return tasks

    async def perform(self, domain: str, entries: Sequence[JournalEntry]) -> None:
        """Do ``entries`` and return once all of them were tried."""
        tasks = await self.start(domain, entries)
        if tasks:
            await asyncio.gather(*tasks)

    async def _run(
        self,
        domain: str,
        entry: JournalEntry,
        key: str,
        before: asyncio.Future[None] | None,
        mine: asyncio.Future[None],
    ) -> None:
        try:
            if before is not None:
                await asyncio.shield(before)
            if await self._do(entry):
                await self._store.done(domain, entry.id)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - one entry's failure leaves it for a redo
            _log.exception("journal entry %s failed; it will be redone", entry.id)
        finally:
            self._window.release()
            if not mine.done():
                mine.set_result(None)
            if self._tails.get(key) is mine:
                del self._tails[key]

    async def aclose(self, grace: float = 2.0) -> None:
        """Let the entries in flight finish for ``grace`` seconds, then stop them (what
        was not done stays journalled and is redone by the leader)."""
        if self._running:
            await asyncio.wait(set(self._running), timeout=grace)
        for task in list(self._running):
            task.cancel()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    # ------------------------------------------------------------------ the work

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
        return outcome.source is SubmitSource.RELAY

    async def _do(self, entry: JournalEntry) -> bool:
        f = entry.fields
        kind = entry.known_kind
        try:
            if kind is JournalKind.SEND:
                return await self._submit(
                    entry,
                    Endpoint.parse(f["origin"]),
                    Endpoint.parse(f["recipient"]),
                    bytes.fromhex(f["content"]),
                )
            if kind is JournalKind.EXPIRED:
                return await self._expired(entry)
            if kind is JournalKind.PRESENCE:
                return await self._tuple(f["domain"], f["topic"], add=f["action"] == "add")
            if kind is JournalKind.OWNER:
                owner = Endpoint.parse(f["owner"])
                grant = f["action"] == "grant"
                done = await self._grant_owner(f["domain"], f["topic"], owner, grant)
                if done and grant:
                    return await self._state_access(f["domain"], f["topic"], owner, f.get("access"))
                return done
            if kind is JournalKind.ACCESS:
                return await self._grant_data(
                    f["domain"], f["topic"], Endpoint.parse(f["subscriber"]), f["action"] == "grant"
                )
            if kind is JournalKind.ANNOUNCE:
                if self._announce is None:
                    return False  # left to a pod that publishes (every service pod does)
                retire = int(f["retire"]) if f.get("retire") else None
                return await self._announce(
                    f["domain"], f["topic"], bytes.fromhex(f["content"]), f["key"], retire
                )
        except (KeyError, ValueError, EndpointError, ApexError) as exc:
            _log.warning("journal entry %s cannot be done (%s): dropped", entry.id, exc)
            return True
        _log.warning("journal entry %s of unknown kind %r: dropped", entry.id, entry.kind)
        return True

    async def _expired(self, entry: JournalEntry) -> bool:
        """Section 4.5 step 5.2: a lease ended; its cancel goes to who subscribed."""
        f = entry.fields
        subscriber = Endpoint.parse(f["subscriber"])
        cancel: Cancel | ContentCancel = Cancel(
            topic=f["topic"], trans_id=int(f["trans_id"]), subscriber=subscriber
        )
        if f.get("subscription_id"):
            cancel = ContentCancel(
                topic=f["topic"],
                trans_id=int(f["trans_id"]),
                subscriber=subscriber,
                subscription_id=int(f["subscription_id"]),
            )
        self._metrics.expired.inc()
        sent = await self._submit(
            entry, service_endpoint(f["domain"]), Endpoint.parse(f["originator"]), cancel.to_xml()
        )
        if not sent or self.lease_ended is None:
            return sent
        # Draft-wyman 6.3: the Subscriptions topic hears of the lease end too (redone
        # with the entry until published; the cancel's resend has the same submission id).
        ended = Subscription(
            topic=f["topic"],
            subscriber=subscriber,
            originator=Endpoint.parse(f["originator"]),
            trans_id=int(f["trans_id"]),
            expires_ms=int(f["expires_ms"]),
            subscription_id=int(f["subscription_id"]) if f.get("subscription_id") else None,
            selector_class=f.get("selector_class", ""),
            selector=f.get("selector", ""),
            since_ms=int(f.get("since_ms") or 0),
        )
        return await self.lease_ended(f["domain"], ended, int(f["at_ms"]), f"expired:{entry.id}")

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

    async def _state_access(
        self, domain: str, topic: str, creator: Endpoint, stated: str | None
    ) -> bool:
        """The createtopic's access statement as the topic's entries, beside the
        creator's (apexmesh/pubsub/topic_access.py); with none stated, the default, only
        on a topic without entries of its own (an operator's seeded ones stay as they
        are). False when the access service could not be reached (done again)."""
        owner = str(topic_endpoint(topic, domain))
        service = str(service_endpoint(domain))
        mine = ActorPattern.exactly(creator).key
        try:
            if stated:
                access = TopicAccess.from_json(stated)
            else:
                listed = await self._access.handle_operation(
                    service, list_xml(self.next_id(), owner)
                )
                answer = parse_answer(listed.reply.content)
                if not isinstance(answer, Entries):
                    _log.warning("access refused listing %s: %r", owner, answer)
                    return True
                if any(entry.actor.key != mine for entry in answer.entries):
                    return True  # the topic's entries were made before it: theirs
                access = default_access(domain)
            for grant in access.entries:
                if grant.actor.key == mine:
                    continue  # the creator's own entry is OWNER_TOKENS, always
                got = await self._access.handle_operation(
                    service, get_xml(self.next_id(), owner, str(grant.actor))
                )
                found = last_update(got.reply.content) or None
                content = set_xml(
                    self.next_id(), owner, str(grant.actor), sorted(grant.actions), found
                )
                result = await self._access.handle_operation(service, content)
                if reply_code(result.reply.content) != ApexReplyCode.SUCCESS:
                    _log.warning("access refused %s for %s: %r", owner, grant.actor, result.reply)
        except grpc.aio.AioRpcError as exc:
            _log.warning("access service unreachable: %s", exc.code())
            return False
        except (AccessError, ValueError) as exc:
            _log.warning("access statement of %s not written: %s", owner, exc)
        return True

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
            get = access_get(owner, actor, self.next_id())
            found = last_update((await self._access.handle_operation(service, get)).reply.content)
            if only_if_found and not found:
                return True  # nothing to remove
            content = access_set(owner, actor, actions, found, self.next_id())
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


__all__ = [
    "ACCESS_SET_TOKEN",
    "SEND_CONCURRENCY",
    "Announcer",
    "JournalWorker",
    "Submitter",
    "send_entries",
]
