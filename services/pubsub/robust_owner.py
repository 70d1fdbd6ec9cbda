"""One sequencer per robust topic (docs/robust.md "One sequencer per topic").

Link seqs must be assigned in one order, and the last-value images folded by one writer,
so each robust topic has one owner pod at a time: the holder of its Redis lease
(:meth:`apexmesh.store.robust.RobustStore.own`, whose value names the pod and its gRPC
address). :class:`Sequencers` is a pod's side of that:

- :meth:`Sequencers.claim` answers, for a publication or permission change, whether this
  pod sequences the topic (:attr:`Ownership.OWNED`, taking a lapsed lease), or another
  pod does (:attr:`Ownership.ELSEWHERE`, with its address to forward to);
- an owned topic's :class:`OwnedTopic` holds what the sequencer keeps in memory: the
  permission table in force (loaded from Redis when the topic is taken over) and the
  lock that orders commits (its fan-outs then travel side by side: the stubs order by
  link seq);
- :meth:`Sequencers.owned_or_forwarded` is what a publication or permission change
  does with that: sequenced here, or forwarded and the owner's answer returned; an owner
  pod that died is waited for until its lease lapses (a lease and a third at most), so
  what was in flight to it is sequenced by the next owner rather than refused;
- :meth:`Sequencers.forward` sends a publication on to the owner with the forwarded
  mark (a pod that receives a forwarded call and cannot take the topic answers 450
  rather than forwarding again: no loops), batched over one ``DeliverStream`` per owner
  pod (:mod:`apexmesh.rpc.batched`, as the relays call the pubsub pods), so a topic's
  forwarded publications pipeline instead of costing one unary call each. The rule
  for failures is the relay's (services/relay/wellknown.py): a forward that reached
  nobody (``UNAVAILABLE``) is 450, nothing was sequenced; one cut off mid-flight may
  have been committed by the owner, so it is sent again with the same delivery id
  (the owner answers a repeat from its first commit), and when every attempt was cut
  off the outcome stays unknown: :class:`OutcomeUnknownError`, never "not sequenced";
- the channels to owner pods are a bounded cache (least recently used closed first),
  and a channel idle for :data:`OWNER_CHANNEL_IDLE_MS` or whose pod went away
  (``UNAVAILABLE``) is closed: owner pods come and go with their addresses;
- :meth:`Sequencers.renew` keeps every owned lease (a third of its life), called by the
  robust task; a lease lost is forgotten at once, and every commit checks the lease
  holder in its script anyway (``NOTOWNER``), so a paused pod never interleaves.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import grpc
from redis.exceptions import RedisError

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.common.cache import BoundedCache
from apexmesh.contracts.endpoint.v1 import endpoint_pb2, endpoint_pb2_grpc
from apexmesh.pubsub.elements import topic_endpoint
from apexmesh.pubsub.robust.contribution import ContributionGate
from apexmesh.pubsub.robust.permissions import PermissionTable
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.rpc.batched import BatchedCaller
from apexmesh.rpc.observe import observed_channel
from apexmesh.rpc.retry import DELIVER, Failure, failure_of
from apexmesh.store.robust import Retention, RobustStore
from apexmesh.store.robust_topics import RobustTopics, holder_address

_log = logging.getLogger(__name__)

#: gRPC metadata key marking a call one pubsub pod forwarded to a topic's owner.
FORWARDED_KEY: Final = "apexmesh-robust-forwarded"

#: The metadata of every forwarded call (of the stream that carries forwards in batches:
#: the callee reads the stream's metadata for each call in it).
_FORWARDED_METADATA: Final = ((FORWARDED_KEY, "1"),)

#: Topic key: (domain, topic).
TopicKey = tuple[str, str]

#: Owner pods a pod keeps a channel to at once. A domain has a few pubsub pods; the
#: bound matters when pods come and go (every new pod is a new address): the least
#: recently used channel is then closed, not kept for the life of the process.
OWNER_CHANNELS: Final = 32
#: A channel to an owner pod unused this long (ms) is closed by the robust task's round
#: (:meth:`Sequencers.renew`): its pod went away or no longer owns topics we are sent.
OWNER_CHANNEL_IDLE_MS: Final = 300_000

#: Claims of a topic whose owner pod is unreachable, a sixth of a lease apart, before
#: its publication is 450: a dead owner's lease lapses within them
#: (:meth:`Sequencers.owned_or_forwarded`).
TAKEOVER_ROUNDS: Final = 8


class OutcomeUnknownError(Exception):
    """A forward was cut off mid-flight on every attempt: the owner may have sequenced
    the publication, or not.

    Not an :class:`ApexError`: no reply code says it. 450 would tell the publisher that
    nothing was sequenced, and its new send (a new delivery id) would be sequenced twice
    if the owner did commit. The ``Deliver`` that carried the publication here ends cut
    off instead (services/pubsub/endpoint.py), so the relay retries that delivery with
    the same id, which the owner answers from its first commit.

    ``owner_gone``: the last attempt reached nobody (the owner pod died after taking
    the first). Its lease then lapses, and the pod that takes the topic over commits
    the publication under the same delivery key, which the commit script answers from
    the dead owner's commit if there was one: the outcome becomes known.
    """

    def __init__(self, address: str, *, owner_gone: bool) -> None:
        super().__init__(f"forward to topic owner {address} cut off")
        self.address = address
        self.owner_gone = owner_gone


class OwnerUnreachableError(ApexError):
    """450: a forward reached nobody (``UNAVAILABLE``), so nothing was sequenced.

    Its own type because the caller may do better than pass the 450 on: an owner pod
    that died holds its lease until it lapses, and a publication that waits for that can
    be sequenced by the next owner (:meth:`Sequencers.owned_or_forwarded`)."""

    def __init__(self, address: str) -> None:
        super().__init__(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "topic owner unreachable")
        self.address = address


_Caller = BatchedCaller[endpoint_pb2.EndpointDeliverRequest, endpoint_pb2.EndpointDeliverResponse]


@dataclass(frozen=True, slots=True)
class _OwnerLink:
    """The channel to one owner pod and the batched ``Deliver`` calls over it."""

    channel: grpc.aio.Channel
    caller: _Caller

    @classmethod
    def open(cls, address: str) -> _OwnerLink:
        channel = observed_channel(address)
        stub = endpoint_pb2_grpc.WellKnownEndpointStub(channel)
        caller: _Caller = BatchedCaller(
            functools.partial(stub.DeliverStream, metadata=_FORWARDED_METADATA),
            functools.partial(stub.Deliver, metadata=_FORWARDED_METADATA),
            endpoint_pb2.EndpointDeliverResponse.FromString,
            name=f"topic owner {address}",
        )
        return cls(channel, caller)

    async def aclose(self) -> None:
        """End the streams (the owner finishes what it has, briefly), then the channel."""
        await self.caller.aclose()
        await self.channel.close()


class Ownership(enum.Enum):
    """Who sequences a topic, as this pod sees it."""

    #: This pod: commit here.
    OWNED = "owned"
    #: Another pod holds the lease: forward to it.
    ELSEWHERE = "elsewhere"


def retention_of(settings: RobustSettings) -> Retention:
    """What a topic keeps: its stream by count and age, and its links' context for
    ``max(retainms, 10 * heartbeatms)`` after their last number (docs/robust.md "Link
    context": ten heartbeats, so a context never lapses on a link still heartbeating)."""
    return Retention(
        count=settings.retain_count,
        ms=settings.retain_ms,
        link_ttl_ms=max(settings.retain_ms, 10 * settings.heartbeat_ms),
    )


@dataclass(slots=True)
class OwnedTopic:
    """What the sequencer of one topic keeps in memory while it owns the topic."""

    domain: str
    topic: str
    settings: RobustSettings
    table: PermissionTable
    #: When the lease must be renewed (ms, the pod's clock).
    renew_at: int
    #: Orders commits (one link order).
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The subscribers whose links the robust task keeps (heartbeats, link ends).
    links: set[str] = field(default_factory=set)

    @property
    def retention(self) -> Retention:
        return retention_of(self.settings)


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer of :meth:`Sequencers.claim`."""

    ownership: Ownership
    #: The topic's state when this pod owns it.
    owned: OwnedTopic | None = None
    #: The holder's gRPC address when another pod does ("" when it names none).
    address: str = ""


class Sequencers:
    """The robust topics this pod sequences, and the way to the pods that sequence the
    others."""

    def __init__(
        self,
        *,
        store: RobustStore,
        topics: RobustTopics,
        clock: Callable[[], int],
        lease_ms: int,
        timeout: float,
        channels: int = OWNER_CHANNELS,
    ) -> None:
        self.store = store
        self.topics = topics
        self._clock = clock
        self.lease_ms = lease_ms
        self._timeout = timeout
        self.owned: dict[TopicKey, OwnedTopic] = {}
        self.gate = ContributionGate()
        #: Owner address -> its channel; each use pushes its idle expiry back.
        self._links: BoundedCache[str, _OwnerLink] = BoundedCache(
            "pubsub.robust_owner_channels", channels
        )
        #: Channels being closed (evicted, idle, or their pod gone), awaited by aclose.
        self._closing: set[asyncio.Task[None]] = set()

    async def claim(self, domain: str, topic: str, settings: RobustSettings) -> Claim:
        """OWNED with the topic's state when this pod sequences it (the lease taken if
        it lapsed, renewed if due), else ELSEWHERE with the holder's address."""
        key = (domain, topic)
        now = self._clock()
        owned = self.owned.get(key)
        if owned is not None and now < owned.renew_at:
            owned.settings = settings
            return Claim(Ownership.OWNED, owned)
        if await self.store.own(domain, topic, self.lease_ms):
            owned = self.owned.get(key)  # another claim may have taken it meanwhile
            if owned is None:
                table = await self.topics.table(domain, topic)
                owned = self.owned.get(key)
                if owned is None:  # checked again after the await: one state per topic
                    owned = OwnedTopic(
                        domain=domain, topic=topic, settings=settings, table=table, renew_at=0
                    )
                    self.owned[key] = owned
                    _log.info("sequencing robust topic %s@%s", topic, domain)
                    await self.topics.register(domain, topic)
            owned.settings = settings
            owned.renew_at = now + self.lease_ms // 3
            return Claim(Ownership.OWNED, owned)
        self.lost(domain, topic)
        holder = await self.topics.holder(domain, topic)
        return Claim(Ownership.ELSEWHERE, address=holder_address(holder or ""))

    def lost(self, domain: str, topic: str) -> None:
        """The lease is someone else's (a commit said NOTOWNER, or renewal failed)."""
        if self.owned.pop((domain, topic), None) is not None:
            _log.info("robust topic %s@%s is sequenced elsewhere now", topic, domain)

    async def renew(self) -> list[TopicKey]:
        """Renew the leases due (and close the channels to owner pods left idle);
        returns the topics lost."""
        now = self._clock()
        self._close_idle(now)
        lost: list[TopicKey] = []
        for key, owned in list(self.owned.items()):
            if now < owned.renew_at:
                continue
            if await self.store.own(key[0], key[1], self.lease_ms):
                owned.renew_at = now + self.lease_ms // 3
            else:
                self.lost(*key)
                lost.append(key)
        return lost

    async def owned_or_forwarded(
        self,
        domain: str,
        topic: str,
        settings: RobustSettings,
        originator: Endpoint,
        payload: bytes,
        delivery_id: str,
        forwarded: bool,
    ) -> OwnedTopic | tuple[int, str]:
        """The topic's state when this pod sequences it; else the owner pod's answer to
        the forward.

        An owner pod that died (its forward reached nobody: UNAVAILABLE) holds the
        lease until it lapses, at most a lease. Every publication in flight to it would
        be 450 meanwhile, each a send again for its publisher (the relay's ``ok`` holds
        no promise for it), so the publication waits for the lease instead: claimed
        again every sixth of a lease, :data:`TAKEOVER_ROUNDS` times (a lease and a
        third in all), it is sequenced here or by whichever pod took the topic. An owner
        alive but unreachable from here keeps renewing: 450 after the wait, as before.
        A forwarded call (we were named owner and are not) never waits: the pod that
        forwarded it does.

        A forward cut off and then unreachable (the owner died with it in flight:
        :attr:`OutcomeUnknownError.owner_gone`) waits the same way when it has a
        delivery id: the next owner commits it under the same delivery key, which the
        commit script answers from the dead owner's commit if it made one, so the
        publication is sequenced once either way. Without a delivery id its outcome
        stays unknown."""
        for round_ in range(TAKEOVER_ROUNDS + 1):
            claim = await self.claim(domain, topic, settings)
            if claim.owned is not None:
                return claim.owned
            try:
                return await self._forward_to(
                    claim.address, domain, topic, originator, payload, delivery_id, forwarded
                )
            except (OwnerUnreachableError, OutcomeUnknownError) as exc:
                resolvable = isinstance(exc, OwnerUnreachableError) or (
                    exc.owner_gone and bool(delivery_id)
                )
                if round_ == TAKEOVER_ROUNDS or not resolvable:
                    raise
                if round_ == 0:
                    _log.warning(
                        "owner %s of robust topic %s@%s unreachable: waiting for its lease",
                        exc.address,
                        topic,
                        domain,
                    )
                await asyncio.sleep(self.lease_ms / 6 / 1000)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _forward_to(
        self,
        address: str,
        domain: str,
        topic: str,
        originator: Endpoint,
        payload: bytes,
        delivery_id: str,
        forwarded: bool,
    ) -> tuple[int, str]:
        if forwarded:  # forwarded to us, and we are not the owner either: no loops
            raise ApexError(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "topic sequencer moved")
        request = endpoint_pb2.EndpointDeliverRequest(
            recipient=str(topic_endpoint(topic, domain)),
            originator=str(originator),
            payload=payload,
            delivery_id=delivery_id,
        )
        return await self.forward(address, request)

    async def forward(
        self, address: str, request: endpoint_pb2.EndpointDeliverRequest
    ) -> tuple[int, str]:
        """Hand ``request`` to the topic's owner at ``address``: its (code, text).

        A forward that reached nobody is :class:`OwnerUnreachableError`, 450 (nothing was
        sequenced; the relay's sender may send it again). One cut off mid-flight is sent
        again with the same delivery id, :data:`~apexmesh.rpc.retry.DELIVER`'s attempts
        at most; the owner answers a repeat from its first commit, so the publication is
        sequenced once whichever attempt got there.
        Raises :class:`OutcomeUnknownError` when the attempts ran out with the outcome
        unknown (or at once without a delivery id: the owner could not tell a repeat).
        """
        if not address:
            raise ApexError(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "topic owner unknown")
        repeatable = bool(request.delivery_id)
        cut_off = False
        attempt = 0
        while True:
            attempt += 1
            link = self._link(address)
            try:
                answer = await link.caller.call(request, timeout=self._timeout)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                _log.warning(
                    "forwarding %s to topic owner %s, attempt %d: %s",
                    request.delivery_id,
                    address,
                    attempt,
                    code,
                )
                failure = failure_of(code)
                if failure is Failure.CUT_OFF:
                    cut_off = True
                else:
                    if failure is Failure.UNREACHED:
                        self._drop(address, link)  # its pod went away, or is not up yet
                    if not cut_off:  # reached nobody, now and before
                        raise OwnerUnreachableError(address) from None
                delay = DELIVER.next_delay(attempt) if repeatable else None
                if delay is None:
                    break
                await asyncio.sleep(delay)
                continue
            return answer.status.code, answer.status.text
        raise OutcomeUnknownError(address, owner_gone=code == grpc.StatusCode.UNAVAILABLE)

    def _link(self, address: str) -> _OwnerLink:
        """The channel to ``address`` (opened on first use), its idle expiry pushed
        back; the channel evicted to make room is closed."""
        link = self._links.get(address)
        if link is None:
            link = _OwnerLink.open(address)
        evicted = self._links.put(address, link, expires=self._clock() + OWNER_CHANNEL_IDLE_MS)
        if evicted is not None:
            self._close_later(evicted[1])
        return link

    def _drop(self, address: str, link: _OwnerLink) -> None:
        """Close ``link`` unless the address has a newer one already."""
        if self._links.get(address) is link:
            self._links.pop(address)
            self._close_later(link)

    def _close_idle(self, now: int) -> None:
        for address in self._links:
            expires = self._links.expiry(address)
            if expires is not None and expires <= now:
                link = self._links.pop(address)
                if link is not None:
                    self._close_later(link)

    def _close_later(self, link: _OwnerLink) -> None:
        """Close ``link`` in a task of its own: a forward never waits for it."""
        task = asyncio.get_running_loop().create_task(link.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    @property
    def owner_addresses(self) -> tuple[str, ...]:
        """The owner pods this pod has a channel to, least recently used first."""
        return tuple(self._links)

    async def aclose(self) -> None:
        """Give up every lease (the next pod takes the topics at once) and the channels."""
        for domain, topic in list(self.owned):
            try:
                await self.store.release(domain, topic)
            except (RedisError, OSError) as exc:
                _log.warning("releasing %s@%s: %s", topic, domain, exc)
        self.owned.clear()
        for address in self._links:
            link = self._links.pop(address)
            if link is not None:
                self._close_later(link)
        if self._closing:
            await asyncio.wait(tuple(self._closing))


def forwarded(context: grpc.aio.ServicerContext | None) -> bool:
    """Whether a ``Deliver`` call was forwarded by another pubsub pod."""
    if context is None:
        return False
    try:
        metadata = context.invocation_metadata() or ()
    except (AttributeError, RuntimeError):
        return False
    return any(item[0] == FORWARDED_KEY for item in metadata)


__all__ = [
    "FORWARDED_KEY",
    "Claim",
    "OwnedTopic",
    "OWNER_CHANNELS",
    "OWNER_CHANNEL_IDLE_MS",
    "OutcomeUnknownError",
    "OwnerUnreachableError",
    "Ownership",
    "Sequencers",
    "TopicKey",
    "forwarded",
    "retention_of",
]
