"""Section 4.7.1 on one pod, against its own redis-server and scripted relay pods:
publishing costs no Redis round trip in steady state whatever the number of topics,
fan-out submission ids are the same on every pod for one delivery (so the relays relay
each chunk once), the pod bounds its Submits, and a publication no relay took is never
answered 250."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.core import Subscribed, Subscription, TopicCreated
from apexmesh.pubsub.elements import topic_endpoint
from apexmesh.pubsub.wire import element_payload
from apexmesh.rpc.relay import RelaySubmitter
from apexmesh.rpc.retry import RetryPolicy
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import PubsubStore
from apexmesh.store.pubsub_cache import SubscriberCache
from services.pubsub.metrics import PubsubMetrics
from services.pubsub.publishing import Publisher, delivery_key
from tests.support.fake_relay import ScriptedRelay, scripted_relays
from tests.support.polling import still_true, wait_until
from tests.support.redis_server import RedisServer, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DOMAIN = "example.com"
FRED = Endpoint.parse("fred@example.com")
NOW = 1_700_000_000_000


def clock() -> int:
    return NOW


async def allowed(_owner: Endpoint, _actor: Endpoint) -> bool:
    return True


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> RedisServer:
    """A redis-server of this module alone: its command counts are this test's."""
    server = RedisServer(tmp_path_factory.mktemp("redis-publishing"))
    server.start()
    yield server  # type: ignore[misc]
    server.stop()


@pytest.fixture
async def redis(own_redis: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(own_redis.url)
    try:
        yield client
    finally:
        await client.aclose()


@dataclass
class Pod:
    publisher: Publisher
    cache: SubscriberCache
    metrics: PubsubMetrics


@contextlib.asynccontextmanager
async def pod(
    redis: Redis,
    keys: Keys,
    addresses: Sequence[str],
    *,
    limit: int = 256,
    attempts: int = 4,
) -> AsyncIterator[Pod]:
    cache = SubscriberCache(redis, keys, clock=clock)
    await cache.start()
    semaphore = asyncio.Semaphore(limit)
    no_wait = RetryPolicy(attempts=attempts, first_backoff_seconds=0.0)
    options = {"timeout": 5.0, "policy": no_wait, "limit": semaphore}
    fanout = RelaySubmitter(addresses, **options)  # type: ignore[arg-type]
    direct = {a: RelaySubmitter([a], **options) for a in addresses}  # type: ignore[arg-type]
    metrics = PubsubMetrics.create(CollectorRegistry())
    publisher = Publisher(
        cache=cache,
        allowed=allowed,
        fanout=fanout,
        direct=direct,
        metrics=metrics,
        clock=clock,
        hops=8,
    )
    try:
        yield Pod(publisher, cache, metrics)
    finally:
        await cache.aclose()
        for submitter in (fanout, *direct.values()):
            await submitter.aclose()


async def topics(redis: Redis, keys: Keys, names: Sequence[str], subscribers: int) -> None:
    """Create ``names``, each with ``subscribers`` subscribers (their own per topic)."""
    store = PubsubStore(redis, keys, "setup")
    for name in names:
        changes: list[object] = [TopicCreated(name, FRED)]
        for index in range(subscribers):
            who = Endpoint.parse(f"s{index}-{name}@{DOMAIN}")
            lease = Subscription(
                topic=name, subscriber=who, originator=who, trans_id=1, expires_ms=NOW + 60_000
            )
            changes.append(Subscribed(lease, renewed=False))
        assert await store.commit(DOMAIN, name, None, changes, [], NOW) is not None  # type: ignore[arg-type]


def publication(topic: str, index: int = 0) -> bytes:
    return element_payload(FRED, topic_endpoint(topic, DOMAIN), f"<n i='{index}'/>".encode())


async def commands(redis: Redis) -> dict[str, int]:
    stats = await redis.info("commandstats")
    return {name: int(value["calls"]) for name, value in stats.items()}


def counted(before: dict[str, int], after: dict[str, int]) -> int:
    """Commands run between the two counts, but the event follower's XREAD and INFO."""
    return sum(
        calls - before.get(name, 0)
        for name, calls in after.items()
        if not name.endswith(("xread", "info"))
    )


@pytest.mark.parametrize("count", [10, 10_000])
async def test_steady_state_publishing_does_no_redis_round_trip(
    redis: Redis, keys: Keys, count: int
) -> None:
    """10 or 10,000 topics: after each topic's first publication (its load, its
    subscribers' placement), 2,000 more publications run no Redis command at all."""
    names = [f"t{index}" for index in range(count)]
    await topics(redis, keys, names, subscribers=2)
    relay = ScriptedRelay()
    async with scripted_relays(relay) as addresses, pod(redis, keys, addresses) as node:
        for start in range(0, count, 500):  # first publications: loads, coalesced
            await asyncio.gather(
                *(
                    node.publisher.publish(DOMAIN, name, FRED, publication(name))
                    for name in names[start : start + 500]
                )
            )
        loads = node.cache.loads
        before = await commands(redis)
        for index in range(2_000):
            name = names[index % min(count, 50)]
            code, _ = await node.publisher.publish(
                DOMAIN, name, FRED, publication(name, index), f"d{index}"
            )
            assert code == 250
        after = await commands(redis)
    assert counted(before, after) == 0
    assert node.cache.loads == loads == count
    assert len(relay.delivered()) == 2 * (count + 2_000)


async def test_an_unknown_topic_is_550_and_cached_too(redis: Redis, keys: Keys) -> None:
    relay = ScriptedRelay()
    async with scripted_relays(relay) as addresses, pod(redis, keys, addresses) as node:
        assert (await node.publisher.publish(DOMAIN, "nope", FRED, publication("nope")))[0] == 550
        before = await commands(redis)
        for _ in range(100):
            code, text = await node.publisher.publish(DOMAIN, "nope", FRED, publication("nope"))
            assert (code, text) == (550, "no such topic")
        assert counted(before, await commands(redis)) == 0
    assert relay.calls == []


async def test_two_pods_submit_one_delivery_with_the_same_ids(redis: Redis, keys: Keys) -> None:
    """The relay retries a publication on another pubsub pod (same delivery id): the
    second pod's chunks carry the first's ids, go to the same relay pods, and the relays
    relay each once. 2,300 subscribers, split over two relay pods and one not attached."""
    await topics(redis, keys, ["big"], subscribers=2_300)
    relays = [ScriptedRelay(), ScriptedRelay()]
    async with scripted_relays(*relays) as addresses:
        names = [f"s{index}-big@{DOMAIN}" for index in range(2_300)]
        for index, name in enumerate(names[:2_000]):
            pod_id = f"relay-{index % 2}"
            await redis.set(keys.attachment(name), pod_id)
        for index, address in enumerate(addresses):
            await redis.set(keys.relay_pod(f"relay-{index}"), address)
        async with pod(redis, keys, addresses) as first, pod(redis, keys, addresses) as second:
            for node in (first, second):
                code, _ = await node.publisher.publish(
                    DOMAIN, "big", FRED, publication("big"), "delivery-7"
                )
                assert code == 250
    calls = [call for relay in relays for call in relay.calls]
    assert len(calls) == 2 * len(set(calls))  # every chunk submitted by both pods, same id
    delivered = sorted(name for relay in relays for name in relay.delivered())
    assert delivered == sorted(names)  # once each
    for index, relay in enumerate(relays):  # the placed ones went to their own pod
        mine = {n for i, n in enumerate(names[:2_000]) if i % 2 == index}
        assert mine <= set(relay.delivered())


async def test_submits_out_at_once_are_bounded_and_publications_wait(
    redis: Redis, keys: Keys
) -> None:
    """8 publications of 1 chunk each, a limit of 3: the relay sees 3 at once; the
    others wait (their relay's call waits: back-pressure) and all end 250."""
    await topics(redis, keys, ["news"], subscribers=1)
    hold = asyncio.Event()
    relay = ScriptedRelay(hold=hold)
    async with scripted_relays(relay) as addresses, pod(redis, keys, addresses, limit=3) as node:
        publishing = [
            asyncio.ensure_future(
                node.publisher.publish(DOMAIN, "news", FRED, publication("news", i), f"d{i}")
            )
            for i in range(8)
        ]
        await wait_until(lambda: relay.inflight >= 3, 5)
        await still_true(lambda: relay.inflight == 3, 0.05)
        assert not any(p.done() for p in publishing)
        hold.set()
        codes = [code for code, _ in await asyncio.gather(*publishing)]
    assert codes == [250] * 8
    assert relay.peak == 3


async def test_a_publication_no_relay_takes_is_never_250(redis: Redis, keys: Keys) -> None:
    await topics(redis, keys, ["news"], subscribers=1)
    dead = [f"127.0.0.1:{free_port()}"]
    async with pod(redis, keys, dead, attempts=2) as node:
        code, text = await node.publisher.publish(DOMAIN, "news", FRED, publication("news"))
        assert (code, text) == (421, "forwarding failed")
        failures = node.metrics.fanout_failures.labels("unavailable")._value.get()
        assert failures == 1
    refusing = ScriptedRelay(code=550)
    async with scripted_relays(refusing) as addresses, pod(redis, keys, addresses) as node:
        assert (await node.publisher.publish(DOMAIN, "news", FRED, publication("news")))[0] == 550
        assert node.metrics.fanout_failures.labels("refused")._value.get() == 1


async def test_a_store_that_cannot_answer_is_451(keys: Keys, tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = Redis.from_url(server.url)
    try:
        async with pod(client, keys, [f"127.0.0.1:{free_port()}"]) as node:
            server.stop()
            with pytest.raises(ApexError) as caught:
                await node.publisher.publish(DOMAIN, "news", FRED, publication("news"))
            assert caught.value.code == 451
    finally:
        await client.aclose()
        server.stop()


def test_fanout_ids_follow_the_delivery_and_its_content() -> None:
    """A retry (same delivery id, same request) gets the same key; a delivery id a
    restarted relay reuses for other data does not; no id, no idempotency."""
    first = delivery_key("relay-a-7", publication("news", 1))
    assert delivery_key("relay-a-7", publication("news", 1)) == first
    assert delivery_key("relay-a-7", publication("news", 2)) != first
    assert delivery_key("", publication("news", 1)) != delivery_key("", publication("news", 1))
