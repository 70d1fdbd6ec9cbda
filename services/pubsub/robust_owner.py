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
- :meth:`Sequencers.forward` sends a publication on to the owner with the forwarded
  mark (a pod that receives a forwarded call and cannot take the topic answers 450
  rather than forwarding again: no loops);
- :meth:`Sequencers.renew` keeps every owned lease (a third of its life), called by the
  robust task; a lease lost is forgotten at once, and every commit checks the lease
  holder in its script anyway (``NOTOWNER``), so a paused pod never interleaves.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import grpc
from redis.exceptions import RedisError

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.contracts.endpoint.v1 import endpoint_pb2, endpoint_pb2_grpc
from apexmesh.pubsub.robust.contribution import ContributionGate
from apexmesh.pubsub.robust.permissions import PermissionTable
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.rpc.observe import observed_channel
from apexmesh.store.robust import Retention, RobustStore
from apexmesh.store.robust_topics import RobustTopics, holder_address

_log = logging.getLogger(__name__)

#: gRPC metadata key marking a call one pubsub pod forwarded to a topic's owner.
FORWARDED_KEY: Final = "apexmesh-robust-forwarded"

#: Topic key: (domain, topic).
TopicKey = tuple[str, str]


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
    ) -> None:
        self.store = store
        self.topics = topics
        self._clock = clock
        self.lease_ms = lease_ms
        self._timeout = timeout
        self.owned: dict[TopicKey, OwnedTopic] = {}
        self.gate = ContributionGate()
        self._channels: dict[str, grpc.aio.Channel] = {}

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
        """Renew the leases due; returns the topics lost."""
        now = self._clock()
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

    async def forward(
        self, address: str, request: endpoint_pb2.EndpointDeliverRequest
    ) -> tuple[int, str]:
        """Hand ``request`` to the topic's owner at ``address``: its (code, text). A
        pod that cannot be reached is 450: the publication was not sequenced, the
        relay's sender may send it again."""
        if not address:
            raise ApexError(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "topic owner unknown")
        channel = self._channels.get(address)
        if channel is None:
            channel = observed_channel(address)
            self._channels[address] = channel
        stub = endpoint_pb2_grpc.WellKnownEndpointStub(channel)
        try:
            answer = await stub.Deliver(
                request, timeout=self._timeout, metadata=((FORWARDED_KEY, "1"),)
            )
        except grpc.aio.AioRpcError as exc:
            _log.warning("forwarding to topic owner %s: %s", address, exc.code())
            raise ApexError(
                ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "topic owner unreachable"
            ) from None
        return answer.status.code, answer.status.text

    async def aclose(self) -> None:
        """Give up every lease (the next pod takes the topics at once) and the channels."""
        for domain, topic in list(self.owned):
            try:
                await self.store.release(domain, topic)
            except (RedisError, OSError) as exc:
                _log.warning("releasing %s@%s: %s", topic, domain, exc)
        self.owned.clear()
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


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
    "Ownership",
    "Sequencers",
    "TopicKey",
    "forwarded",
    "retention_of",
]
