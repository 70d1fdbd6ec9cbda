"""What the pubsub pods share about robust topics besides their streams (docs/robust.md
"Phase 2: the service design"): which topics are robust, who sequences each, the
permission table in force, and a topic's keys when it is deleted.

- **The registry** (``RobustKeys.topics``): a SET per domain of its robust topics. The
  pods' heartbeat task walks it to take the sequencer lease of topics nobody holds, so
  an idle topic gets heartbeats even when no publication made a pod its owner.
- **The holder** of a topic's sequencer lease (``RobustKeys.owner``): the pod id and,
  after a ``|``, the gRPC address a pod forwards a publication to (the lease value of
  :meth:`apexmesh.store.robust.RobustStore.own`).
- **The permission table** in force (``RobustKeys.table``), which a pod loads when it
  takes a topic over; :meth:`~apexmesh.store.robust.RobustStore.commit_permissions`
  writes it together with its ``perm`` entry.

Kept apart from :mod:`apexmesh.store.robust` (the scripts that number publications),
which these reads and writes never need to be atomic with.
"""

from __future__ import annotations

import json
from typing import Final

from redis.asyncio import Redis

from apexmesh.pubsub.robust.elements import MAX_GAP
from apexmesh.pubsub.robust.permissions import PermissionTable
from apexmesh.store.robust import PAGE, RobustKeys

#: Separates a lease holder's pod id from its gRPC address.
HOLDER_SEPARATOR: Final = "|"


def holder_value(pod_id: str, address: str) -> str:
    """The lease value of pod ``pod_id`` reachable at ``address`` (host:port)."""
    return f"{pod_id}{HOLDER_SEPARATOR}{address}"


def holder_address(value: str) -> str:
    """The gRPC address in a lease value ("" when it names none)."""
    return value.partition(HOLDER_SEPARATOR)[2]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RobustTopics:
    """The registry, lease holders and permission tables of one deployment."""

    def __init__(self, redis: Redis, keys: RobustKeys) -> None:
        self._redis = redis
        self.keys = keys

    async def register(self, domain: str, topic: str) -> None:
        await self._redis.sadd(self.keys.topics(domain), topic)

    async def topics(self, domain: str) -> list[str]:
        """The domain's robust topics, sorted (the heartbeat task takes them in order)."""
        return sorted(_text(t) for t in await self._redis.smembers(self.keys.topics(domain)))

    async def holder(self, domain: str, topic: str) -> str | None:
        """Who holds the topic's sequencer lease now (None: nobody, it lapsed)."""
        raw = await self._redis.get(self.keys.owner(domain, topic))
        return None if raw is None else _text(raw)

    async def table(self, domain: str, topic: str) -> PermissionTable:
        """The permission table in force (empty: no token granted to anyone)."""
        raw = await self._redis.get(self.keys.table(domain, topic))
        return PermissionTable() if raw is None else PermissionTable.from_json(json.loads(raw))

    async def table_before(
        self, domain: str, topic: str, entry_id: str, *, limit: int = MAX_GAP
    ) -> PermissionTable | None:
        """The table of the last ``perm`` entry before ``entry_id`` in the topic's stream
        (None when none is retained within ``limit`` entries back)."""
        stream = self.keys.stream(domain, topic)
        upper = "(" + entry_id
        seen = 0
        while seen < limit:
            page = await self._redis.xrevrange(stream, upper, "-", count=PAGE)
            if not page:
                return None
            for _id, fields in page:
                found = fields or {}
                if found.get(b"kind") == b"perm":
                    return PermissionTable.from_json(json.loads(found.get(b"table", b"{}")))
            seen += len(page)
            upper = "(" + _text(page[-1][0])
        return None

    async def begin_repair(
        self, domain: str, topic: str, subscriber: str, trans_id: int, ttl_ms: int
    ) -> None:
        """``trans_id`` is the subscriber's latest source repair (for ``ttl_ms``)."""
        await self._redis.set(self.keys.repair(domain, topic, subscriber), trans_id, px=ttl_ms)

    async def repair_current(self, domain: str, topic: str, subscriber: str, trans_id: int) -> bool:
        """Whether ``trans_id`` is still the subscriber's latest source repair (a stub
        that asked again wants only its new one: the old one's redeliveries would be
        dropped on arrival, and slow the new one down)."""
        raw = await self._redis.get(self.keys.repair(domain, topic, subscriber))
        return raw is None or _text(raw) == str(trans_id)

    async def forget(self, domain: str, topic: str) -> None:
        """The topic was deleted: its stream, counters, links, images, table and lease
        go, so a topic created again under the name starts afresh (epoch 1, seq 1)."""
        k = self.keys
        subscribers = await self._redis.hkeys(k.epochs(domain, topic))
        pipe = self._redis.pipeline(transaction=True)
        if k.keys.cluster:
            # The domain's set is in another slot than the topic's keys: it goes first,
            # on its own (a heartbeat that still finds the topic meanwhile finds no keys).
            await self._redis.srem(k.topics(domain), topic)
        else:
            pipe.srem(k.topics(domain), topic)
        pipe.delete(
            k.stream(domain, topic),
            k.sources(domain, topic),
            k.epochs(domain, topic),
            k.images(domain, topic),
            k.owner(domain, topic),
            k.table(domain, topic),
            k.upstream(domain, topic),
            k.upstream_answers(domain, topic),
            *(k.link(domain, topic, _text(s)) for s in subscribers),
        )
        await pipe.execute()


__all__ = ["HOLDER_SEPARATOR", "RobustTopics", "holder_address", "holder_value"]
