"""The per-pod robust task (services/pubsub/robust_service.py) driven by a fake clock,
against a real redis-server, with a fan-out that records instead of submitting: one
timer takes the sequencer lease of a registered topic, heartbeats each of its links
every interval (numbered like deliveries), ends the link of a subscription that ended,
and another pod takes the topic over once the owner's lease lapsed, continuing the
numbers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.asyncio import Redis

from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.options import Option
from apexmesh.pubsub.core import Subscribed, Subscription, TopicCreated, TopicDeleted
from apexmesh.pubsub.robust.elements import RobustInfo, robust_from_option
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.pubsub.topic_description import TopicSettings
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import PubsubStore
from apexmesh.store.pubsub_cache import SubscriberCache
from services.pubsub.robust_service import RobustService
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

DOMAIN = "example.com"
TOPIC = "news"
HEARTBEAT_MS = 1_000
LEASE_MS = 3_000
SETTINGS = RobustSettings(resolution=Resolution.BITS16, heartbeat_ms=HEARTBEAT_MS)
FRED = Endpoint.parse("fred@example.com")
WILMA = Endpoint.parse("wilma@example.com")
BARNEY = Endpoint.parse("barney@example.com")
START = 1_700_000_000_000


class Clock:
    """The fake clock (ms) every part of a test pod reads."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> int:
        return self.now


@dataclass
class Recorder:
    """Stands in for the publisher's fan-out: what would have been submitted."""

    sent: list[dict[Endpoint, RobustInfo]] = field(default_factory=list)

    async def fan_out(
        self,
        domain: str,
        topic: str,
        data: object,
        parts: object,
        recipients: Sequence[Endpoint],
        key: str,
        options: dict[Endpoint, tuple[Option, ...]] | None = None,
        *,
        counted: bool = True,
    ) -> tuple[int, str]:
        assert options is not None
        self.sent.append({r: robust_from_option(options[r][0]) for r in recipients})
        return 250, ""


async def p2_cache_topic(service: RobustService) -> Any:
    return await service._cache.topic(DOMAIN, TOPIC)


async def _nothing(*_args: object, **_kw: object) -> None:
    return None


async def _yes(*_args: object) -> bool:
    return True


@contextlib.asynccontextmanager
async def robust_pod(
    redis: Redis, keys: Keys, clock: Clock, name: str
) -> AsyncIterator[tuple[RobustService, Recorder]]:
    cache = SubscriberCache(redis, keys, clock=clock)
    await cache.start()
    recorder = Recorder()
    service = RobustService(
        domains=(DOMAIN,),
        store=PubsubStore(redis, keys, name),
        cache=cache,
        publisher=recorder,  # type: ignore[arg-type]
        submitter=None,  # type: ignore[arg-type]
        allowed=_yes,
        reply=_nothing,
        answer=_nothing,
        clock=clock,
        lease_ms=LEASE_MS,
        timeout=1.0,  # the setting under test, not a wait
    )
    service.advertise(f"{name}:0")
    try:
        yield service, recorder
    finally:
        await cache.aclose()


async def _topic(redis: Redis, keys: Keys) -> None:
    store = PubsubStore(redis, keys, "setup")
    settings = TopicSettings(robust=SETTINGS).to_json()
    changes: list[object] = [TopicCreated(TOPIC, FRED, settings)]
    for who, ends in ((WILMA, START + 60_000), (BARNEY, START + 2_500)):
        lease = Subscription(
            topic=TOPIC, subscriber=who, originator=who, trans_id=1, expires_ms=ends
        )
        changes.append(Subscribed(lease, renewed=False))
    assert await store.commit(DOMAIN, TOPIC, None, changes, [], START) is not None  # type: ignore[arg-type]


async def test_one_timer_heartbeats_links_ends_them_and_fails_over(
    redis: Redis, keys: Keys
) -> None:
    clock = Clock()
    await _topic(redis, keys)
    async with robust_pod(redis, keys, clock, "p1") as (p1, sent1):
        await p1.created(DOMAIN, TOPIC)
        await p1.step(clock.now)
        assert (DOMAIN, TOPIC) in p1.sequencers.owned
        assert sent1.sent == []  # links scheduled, nothing due yet
        assert p1.delay(clock.now) == pytest.approx(LEASE_MS // 3 / 1000)
        clock.now += HEARTBEAT_MS
        await p1.step(clock.now)
        (beat,) = sent1.sent
        assert set(beat) == {WILMA, BARNEY}
        assert all(i.heartbeat and (i.link_seq, i.link_epoch) == (0, 1) for i in beat.values())
        assert beat[WILMA].source == Endpoint.parse("apex=pubsub@example.com")
        clock.now += HEARTBEAT_MS
        await p1.step(clock.now)
        assert {i.link_seq for i in sent1.sent[1].values()} == {1}
        # Barney's subscription ended at +2.5 s: the next lease round ends his link.
        clock.now += HEARTBEAT_MS
        await p1.step(clock.now)
        assert set(sent1.sent[2]) == {WILMA}
        assert sent1.sent[2][WILMA].link_seq == 2
        assert await redis.hget(p1.store.keys.epochs(DOMAIN, TOPIC), str(BARNEY)) is None
        async with robust_pod(redis, keys, clock, "p2") as (p2, sent2):
            await p2.step(clock.now)  # p1 holds the lease: p2 waits
            assert (DOMAIN, TOPIC) not in p2.sequencers.owned
            # p1 stops (no release: as if killed) and its lease lapses (PX runs on
            # Redis's own clock, so the key is removed to stand for that).
            await redis.delete(p1.store.keys.owner(DOMAIN, TOPIC))
            clock.now += LEASE_MS + 1
            await p2.step(clock.now)
            assert (DOMAIN, TOPIC) in p2.sequencers.owned
            clock.now += HEARTBEAT_MS
            await p2.step(clock.now)
            assert sent2.sent[-1][WILMA].link_seq == 3  # the numbers go on
            assert (await p2.topics.holder(DOMAIN, TOPIC) or "").startswith("p2|")
            # p1 comes back: its renewal fails, it forgets the topic.
            await p1.step(clock.now)
            assert (DOMAIN, TOPIC) not in p1.sequencers.owned
            # The topic is deleted: the owner's next lease round forgets its robust keys.
            store = PubsubStore(redis, keys, "setup")
            deleted = TopicDeleted(TOPIC, FRED)
            assert await store.commit(DOMAIN, TOPIC, None, [deleted], [], clock.now) is not None  # type: ignore[list-item]

            async def forgotten() -> bool:
                return not (await p2_cache_topic(p2)).exists

            await wait_until(forgotten, 5, every=0.02, what="p2's cache follows the delete")
            clock.now += LEASE_MS
            await p2.step(clock.now)
            assert await p2.topics.topics(DOMAIN) == []
            assert not await redis.exists(p2.store.keys.stream(DOMAIN, TOPIC))
            assert (DOMAIN, TOPIC) not in p2.sequencers.owned
