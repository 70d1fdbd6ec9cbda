"""Content-based publishing on one pod, against a real redis-server and a scripted relay:
one data element to the relay names every matched endpoint once, each with its own InRe
(draft-wyman 5.10.1: many recipients in one data, the same fan-out as topic pubsub), and
a publication in steady state runs no Redis command (the index lives in the pod's cache,
kept current by the event log, never re-read per publication)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from apexmesh.apex.content import parse_payload
from apexmesh.apex.data import Data
from apexmesh.apex.elements import parse_message
from apexmesh.apex.endpoint import Endpoint
from apexmesh.contracts.relay.v1 import relay_pb2
from apexmesh.pubsub.core import Subscribed, Subscription, TopicCreated
from apexmesh.pubsub.elements import topic_endpoint
from apexmesh.pubsub.inre import subscription_ids_of
from apexmesh.pubsub.schema import LocalSchemas, SchemaCache
from apexmesh.pubsub.selection.registry import default_classes
from apexmesh.pubsub.topic_index import SelectorCompiler
from apexmesh.pubsub.wire import element_payload
from apexmesh.rpc.relay import RelaySubmitter
from apexmesh.rpc.retry import RetryPolicy
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import PubsubStore
from apexmesh.store.pubsub_cache import SubscriberCache
from apexmesh.store.pubsub_messages import MessageStore
from services.pubsub.content import ContentSelection
from services.pubsub.metrics import PubsubMetrics
from services.pubsub.publishing import Publisher
from tests.support.fake_relay import ScriptedRelay, scripted_relays
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

DOMAIN = "example.com"
TOPIC = "equity.quote.service"
FRED = Endpoint.parse("fred@example.com")
NOW = 1_700_000_000_000


def command_calls(stats: dict[str, Any]) -> dict[str, int]:
    """Calls per Redis command, but the follower's XREAD and the INFO that reads them."""
    return {
        name: int(entry["calls"])
        for name, entry in stats.items()
        if not name.endswith(("xread", "info"))
    }


async def quiet_commandstats(redis: Redis) -> dict[str, Any]:
    """INFO commandstats once two readings in a row show the same calls: the commands a
    publication set off in the background have run (a condition, not a settle sleep)."""
    previous: dict[str, int] | None = None

    async def settled() -> dict[str, Any] | None:
        nonlocal previous
        stats = await redis.info("commandstats")
        calls = command_calls(stats)
        same, previous = calls == previous, calls
        return stats if same else None

    return await wait_until(settled, 10, every=0.02, what="Redis commands to settle")


class CapturingRelay(ScriptedRelay):
    """A scripted relay that keeps every payload it was submitted."""

    def __init__(self) -> None:
        super().__init__()
        self.payloads: list[bytes] = []

    async def Submit(  # noqa: N802
        self, request: relay_pb2.SubmitRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.SubmitResponse:
        self.payloads.append(bytes(request.payload))
        return await super().Submit(request, context)


def content(who: str, sid: int, selector: str) -> Subscribed:
    endpoint = Endpoint.parse(who)
    sub = Subscription(
        topic=TOPIC,
        subscriber=endpoint,
        originator=endpoint,
        trans_id=1,
        expires_ms=NOW + 60_000,
        subscription_id=sid,
        selector_class="JMS",
        selector=selector,
    )
    return Subscribed(sub, renewed=False)


async def allowed(_owner: Endpoint, _actor: Endpoint) -> bool:
    return True


async def test_one_data_many_recipients_each_with_its_inre(redis: Redis, keys: Keys) -> None:
    store = PubsubStore(redis, keys, "setup")
    changes = [
        TopicCreated(TOPIC, FRED),
        content("jade@example.com", 1, "symbol = 'XMPL'"),
        content("jade@example.com", 2, "pct > 5"),
        content("user2@example.com", 1, "symbol IN ('XMPL', 'TEST')"),
        content("user3@example.com", 1, "symbol = 'TEST'"),
    ]
    assert await store.commit(DOMAIN, TOPIC, None, changes, [], NOW) is not None  # type: ignore[arg-type]
    relay = CapturingRelay()
    metrics = PubsubMetrics.create(CollectorRegistry())
    cache = SubscriberCache(redis, keys, clock=lambda: NOW)
    await cache.start()
    try:
        async with scripted_relays(relay) as addresses:
            fanout = RelaySubmitter(addresses, timeout=5.0, policy=RetryPolicy(attempts=1))
            compiler = SelectorCompiler(default_classes(), SchemaCache(LocalSchemas()))
            publisher = Publisher(
                cache=cache,
                allowed=allowed,
                fanout=fanout,
                direct={},
                metrics=metrics,
                clock=lambda: NOW,
                hops=8,
                selection=ContentSelection(
                    compiler=compiler,
                    messages=MessageStore(redis, keys),
                    metrics=metrics,
                    clock=lambda: NOW,
                ),
            )
            owner = topic_endpoint(TOPIC, DOMAIN)
            body = b"<q symbol='XMPL'><pct>7</pct></q>"
            code, _ = await publisher.publish(
                DOMAIN, TOPIC, FRED, element_payload(FRED, owner, body), "d-1"
            )
            assert code == 250
            (payload,) = relay.payloads  # one data element for every recipient
            data = parse_message(parse_payload(payload).control)
            assert isinstance(data, Data)
            inre = {str(r.identity): subscription_ids_of(r.options[0]) for r in data.recipients}
            assert inre == {"jade@example.com": (1, 2), "user2@example.com": (1,)}
            assert compiler.compilations == 4
            # Steady state: no Redis command per publication (XREAD is the follower's).
            # What the first publication started is over once two readings agree.
            before = await quiet_commandstats(redis)
            for index in range(20):
                code, _ = await publisher.publish(
                    DOMAIN, TOPIC, FRED, element_payload(FRED, owner, body), f"d-{index + 2}"
                )
                assert code == 250
            after = await redis.info("commandstats")
            assert command_calls(after) == command_calls(before)
            assert len(relay.payloads) == 21
            assert compiler.compilations == 4  # the index was not rebuilt
            await fanout.aclose()
    finally:
        await cache.aclose()
