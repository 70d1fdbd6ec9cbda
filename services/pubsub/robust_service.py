"""Robust topics in the pubsub service (XEP-0040 on APEX, docs/robust.md): the pieces
put together, and the per-pod task.

:class:`RobustService` is what :class:`services.pubsub.servicer.PubsubService` holds:

- :meth:`publication`: the publisher's hook for a publication (or permission change) to
  a robust topic (:mod:`services.pubsub.robust_serving`);
- :meth:`operation`: ``gap``, ``sourcequery``, ``snapshot`` to ``apex=pubsub@DOMAIN``
  (:mod:`services.pubsub.robust_ops`);
- :meth:`run`: the pod's one robust timer. Every third of the lease it renews the
  sequencer leases it holds, takes those of registered topics nobody holds (so an idle
  topic keeps its heartbeats when its owner died) and brings each owned topic's links in
  line with its subscriptions (a link whose subscription ended is ended: a new
  subscription starts at epoch 1); in between it sleeps until the next heartbeat is due
  and sends those (:class:`apexmesh.pubsub.robust.heartbeat.HeartbeatSchedule`).
  :meth:`step` is one round at a given time, which tests drive with their own clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from redis.exceptions import RedisError

from apexmesh.apex import _dtd
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.memo import ParseMemo
from apexmesh.ops.logs import failure
from apexmesh.pubsub.robust._wire import local
from apexmesh.pubsub.robust.operations import Request, parse_request
from apexmesh.pubsub.wire import delivered_content
from apexmesh.rpc.relay import RelaySubmitter
from apexmesh.store.pubsub import PubsubStore
from apexmesh.store.pubsub_cache import SubscriberCache, TopicState
from apexmesh.store.robust import RobustStore
from apexmesh.store.robust_topics import RobustTopics, holder_value
from services.pubsub.publishing import Publisher, Select
from services.pubsub.robust_ops import AnswerSender, RobustOperations, Served
from services.pubsub.robust_owner import OwnedTopic, Sequencers
from services.pubsub.robust_serving import (
    AccessCheck,
    ReplySender,
    RobustSequencing,
    RobustSettingsReader,
)
from services.pubsub.settings import Upstream

_log = logging.getLogger(__name__)

#: The robust operations sent to ``apex=pubsub@DOMAIN``.
OPERATIONS = frozenset({"gap", "sourcequery", "snapshot", "resume", "permissions"})
#: Longest sleep of the robust task (it also wakes for the next lease round).
MAX_SLEEP_SECONDS = 1.0


def robust_operation(content: bytes) -> Request | None:
    """``content`` parsed as a robust operation, or None when it is another one (a
    pubsub operation: the service parses it as before). Raises ApexError for a robust
    operation that does not parse."""
    head = content.lstrip()[:64]
    if not any(head.startswith(b"<" + name.encode()) for name in OPERATIONS):
        return None
    root = _dtd.parse_root(content)
    if local(root) not in OPERATIONS:
        return None
    return parse_request(content)


class RobustService:
    """Robust topics of one pubsub pod."""

    def __init__(
        self,
        *,
        domains: Iterable[str],
        store: PubsubStore,
        cache: SubscriberCache,
        publisher: Publisher,
        submitter: RelaySubmitter,
        allowed: AccessCheck,
        reply: ReplySender,
        answer: AnswerSender,
        clock: Callable[[], int],
        lease_ms: int,
        timeout: float,
    ) -> None:
        self.domains = tuple(sorted(domains))
        self._pod_id = store.pod_id
        self.store = RobustStore(store.redis, store.keys, holder_value(store.pod_id, ""))
        self.topics = RobustTopics(store.redis, self.store.keys)
        self._cache = cache
        self._pubsub = store
        self._clock = clock
        self.settings_of = RobustSettingsReader()
        self.sequencers = Sequencers(
            store=self.store, topics=self.topics, clock=clock, lease_ms=lease_ms, timeout=timeout
        )
        self.sequencing = RobustSequencing(
            sequencers=self.sequencers,
            store=store,
            cache=cache,
            publisher=publisher,
            submitter=submitter,
            allowed=allowed,
            reply=reply,
            clock=clock,
        )
        self.operations = RobustOperations(
            store=self.store,
            topics=self.topics,
            cache=cache,
            publisher=publisher,
            allowed=allowed,
            answer=answer,
            reply=reply,
            settings_of=self.settings_of,
            pubsub=store,
        )
        self._memo = ParseMemo()
        self._next_round = 0

    def advertise(self, address: str) -> None:
        """Where other pods forward this pod's topics (its gRPC host:port): part of the
        lease value, so set before the pod takes any lease."""
        self.store.pod_id = holder_value(self._pod_id, address)

    # ------------------------------------------------------------------ entry points

    async def publication(
        self,
        domain: str,
        topic: str,
        originator: Endpoint,
        payload: bytes,
        delivery_id: str,
        *,
        state: TopicState,
        allowed: bool,
        forwarded: bool,
        select: Select | None = None,
    ) -> tuple[int, str] | None:
        """A publication to ``topic`` served, or None when the topic is not robust
        (``select``: the topic's content-based selection)."""
        settings = self.settings_of(state)
        if settings is None:
            return None
        return await self.sequencing.publish(
            domain,
            topic,
            originator,
            payload,
            delivery_id,
            state=state,
            settings=settings,
            delivered=delivered_content(payload, self._memo),
            allowed=allowed,
            forwarded=forwarded,
            select=select,
        )

    async def operation(self, domain: str, originator: Endpoint, request: Request) -> Served:
        return await self.operations.handle(domain, originator, request)

    def redistribute(self, upstreams: Iterable[Upstream]) -> None:
        """The topics this pod's domains redistribute (``APEXMESH_PUBSUB_UPSTREAMS``):
        a robust one is taken from its upstream by a stub of this server's
        (services/pubsub/robust_upstream.py)."""
        self.sequencing.upstream.configure((u.topic, u.domain, u.upstream) for u in upstreams)

    async def upstream_answer(
        self, domain: str, topic: str, originator: Endpoint, body: bytes
    ) -> bool:
        """An upstream server's answer to a redistributed topic's stub (any pod gets
        it; the owner takes it): True when it was one."""
        return await self.sequencing.upstream.answer(domain, topic, originator, body)

    async def created(self, domain: str, topic: str) -> None:
        """A robust topic was created: registered for the pods' task."""
        await self.topics.register(domain, topic)

    async def deleted(self, domain: str, topic: str) -> None:
        """A topic was deleted: its robust state goes (a no-op for other topics)."""
        self.sequencers.lost(domain, topic)
        await self.topics.forget(domain, topic)

    # ------------------------------------------------------------------ the task

    async def run(self) -> None:
        """The pod's robust timer; stopped by cancelling it (``stop_task``)."""
        while True:
            try:
                await self.step(self._clock())
            except (RedisError, OSError, ApexError) as exc:
                _log.warning("robust task: %s", failure(exc))
            except Exception:  # noqa: BLE001 - the timer must outlive one bad round
                _log.exception("robust task")
            wake = self.sequencing.wake
            wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.delay(self._clock())):
                    await wake.wait()

    def delay(self, now: int) -> float:
        """Seconds until the next heartbeat or lease round is due."""
        deadlines = (
            self.sequencing.schedule.next_deadline(),
            self.sequencing.upstream.next_deadline(),
        )
        due = [self._next_round, *(d for d in deadlines if d is not None)]
        return min(MAX_SLEEP_SECONDS, max(0.0, (min(due) - now) / 1000))

    async def step(self, now: int) -> None:
        """One round at ``now``: leases and links when due, then the due heartbeats."""
        if now >= self._next_round:
            self._next_round = now + max(1, self.sequencers.lease_ms // 3)
            await self._leases(now)
        await self.sequencing.upstream.tick(self.sequencers.owned.values(), now)
        due = self.sequencing.schedule.due(now)
        by_topic: dict[tuple[str, str], list[str]] = {}
        for domain, topic, subscriber in due:
            by_topic.setdefault((domain, topic), []).append(subscriber)
        for (domain, topic), subscribers in by_topic.items():
            owned = self.sequencers.owned.get((domain, topic))
            if owned is None:
                for name in subscribers:
                    self.sequencing.link_ended(domain, topic, name)
                continue
            await self.sequencing.heartbeat(owned, sorted(set(subscribers) & owned.links))

    async def _leases(self, now: int) -> None:
        # A topic lost here has its links dropped from the schedule lazily: its due
        # heartbeats find no owned topic (step above).
        await self.sequencers.renew()
        for domain in self.domains:
            for topic in await self.topics.topics(domain):
                state = await self._cache.topic(domain, topic)
                settings = self.settings_of(state)
                if settings is None:
                    # Gone from the cache: forgotten once Redis says so too (this pod's
                    # cache may not have seen a creation the registry already has).
                    if (
                        not state.exists
                        and not (await self._pubsub.read_topic(domain, topic, ())).exists
                    ):
                        await self.deleted(domain, topic)
                    continue
                claim = await self.sequencers.claim(domain, topic, settings)
                if claim.owned is not None:
                    await self._sync_links(claim.owned, state, now)

    async def _sync_links(self, owned: OwnedTopic, state: TopicState, now: int) -> None:
        """The owned topic's links follow its subscriptions: a new one is scheduled (its
        first heartbeat one interval from now), an ended one ends (record and epoch)."""
        active = {str(sub.subscriber) for sub in state.subscriptions.values() if sub.active(now)}
        interval = owned.settings.heartbeat_ms
        schedule = self.sequencing.schedule
        for name in sorted(active - owned.links):
            if (owned.domain, owned.topic, name) not in schedule:
                schedule.touch((owned.domain, owned.topic, name), now, interval)
        for name in sorted(owned.links - active):
            self.sequencing.link_ended(owned.domain, owned.topic, name)
            await self.store.end_link(owned.domain, owned.topic, name)
        owned.links = active

    async def aclose(self) -> None:
        await self.operations.aclose()
        await self.sequencers.aclose()


__all__ = ["OPERATIONS", "RobustService", "robust_operation"]
