"""A subscriber that never reads slows only itself (issue #28), on the local mesh as
processes: topic B fans out to 100 subscribers on both relay pods while topic A is
published to a subscriber that stops reading. B's rate with the stuck subscriber is
compared with B's rate without it, measured alternately in the same run; A's copies are
shed by the stated policy (docs/relay.md "Flow control and slow consumers": a delivery
waiting longer than ``APEXMESH_RELAY_SLOW_CONSUMER_SECONDS`` makes its endpoint a slow
consumer, whose data are shed, counted and refused), and every acknowledged publication
of B reaches all 100 subscribers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apexmesh.client import ApexClient, Attachment, XmlContent, connect_endpoint
from apexmesh.client.attachment import DEFAULT_QUEUE_LIMIT
from apexmesh.client.pubsub import PubsubClient
from apexmesh.ops.localmesh import LocalMesh
from apexmesh.pubsub.elements import topic_endpoint
from tests.support.polling import eventually, scaled

pytestmark = [pytest.mark.system, pytest.mark.load, pytest.mark.timeout(600)]

DOMAIN = "example.com"
SLOW_TOPIC = "slow.a"
FAST_TOPIC = "fast.b"
SUBSCRIBERS = 100
PUBLICATIONS = 400
IN_FLIGHT = 100
#: Rounds of B alone and B beside the stuck subscriber, alternated.
ROUNDS = 2


@contextlib.asynccontextmanager
async def running_mesh(tmp_path: Path) -> AsyncIterator[LocalMesh]:
    mesh = LocalMesh(
        tmp_path,
        dev=True,
        topics=(SLOW_TOPIC, FAST_TOPIC),
        dashboard=False,
        settings={"APEXMESH_RELAY_SLOW_CONSUMER_SECONDS": "1"},
    )
    await mesh.start()
    try:
        yield mesh
    finally:
        await mesh.stop()


async def publish(publisher: Attachment, topic: str, count: int, tag: bytes) -> list[int]:
    """``count`` publications with ``IN_FLIGHT`` unanswered at most; the indices
    answered ``ok``."""
    room = asyncio.Semaphore(IN_FLIGHT)
    target = str(topic_endpoint(topic, DOMAIN))
    acknowledged: list[int] = []

    async def one(index: int) -> None:
        try:
            await publisher.submit(target, XmlContent(b"<p t='%s' i='%d'/>" % (tag, index)))
        except Exception:  # noqa: BLE001  (refused: not acknowledged, not expected)
            return
        finally:
            room.release()
        acknowledged.append(index)

    tasks = []
    for index in range(count):
        await room.acquire()
        tasks.append(asyncio.ensure_future(one(index)))
    await asyncio.gather(*tasks)
    return acknowledged


def shed_count(mesh: LocalMesh) -> float:
    """``apexmesh_relay_delivery_outcomes_total{result="shed"}`` over both pods."""
    total = 0.0
    for index in (0, 1):
        port = mesh.relay(DOMAIN, index).http_port
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/metrics", timeout=scaled(10)
        ) as answer:
            text = answer.read().decode()
        for line in text.splitlines():
            if line.startswith('apexmesh_relay_delivery_outcomes_total{result="shed"}'):
                total += float(line.rsplit(" ", 1)[1])
    return total


async def test_one_subscriber_that_never_reads_slows_only_its_own_topic(tmp_path: Path) -> None:
    async with running_mesh(tmp_path) as mesh, contextlib.AsyncExitStack() as stack:

        async def connect(pod: int, queue_limit: int = DEFAULT_QUEUE_LIMIT) -> ApexClient:
            port = mesh.relay(DOMAIN, pod).edge_port
            return await stack.enter_async_context(
                await connect_endpoint("127.0.0.1", port, queue_limit=queue_limit)
            )

        received: dict[bytes, int] = {}

        async def read(subscriber: PubsubClient) -> None:
            while True:
                _topic, data = await subscriber.next_publication()
                received[data.content] = received.get(data.content, 0) + 1

        fast_publisher = await (await connect(0)).attach(f"fastpub@{DOMAIN}")
        slow_publisher = await (await connect(0)).attach(f"slowpub@{DOMAIN}")
        await PubsubClient(fast_publisher).create_topic(FAST_TOPIC)
        await PubsubClient(slow_publisher).create_topic(SLOW_TOPIC)
        readers = []
        for index in range(SUBSCRIBERS):
            client = await connect(index % 2)
            subscriber = PubsubClient(await client.attach(f"reader{index}@{DOMAIN}"))
            stack.push_async_callback(subscriber.aclose)
            await subscriber.subscribe(FAST_TOPIC, duration=600)
            readers.append(asyncio.ensure_future(read(subscriber)))
        stack.callback(lambda: [task.cancel() for task in readers])
        # The stuck subscriber: once subscribed nothing takes its data, and its client
        # stops reading the channel after 8 (queue_limit): its relay's copies wait.
        stuck_client = await connect(1, queue_limit=8)
        stuck = await stuck_client.attach(f"stuck@{DOMAIN}")
        helper = PubsubClient(stuck)
        await helper.subscribe(SLOW_TOPIC, duration=600)
        await helper.aclose()  # nobody reads the attachment any more

        async def fan_out(tag: bytes) -> float:
            """B's deliveries per second over one round."""
            started = time.perf_counter()
            acknowledged = await publish(fast_publisher, FAST_TOPIC, PUBLICATIONS, tag)
            expected = {b"<p t='%s' i='%d'/>" % (tag, i) for i in acknowledged}
            try:
                await eventually(
                    lambda: all(received.get(c, 0) >= SUBSCRIBERS for c in expected), within=120
                )
            except TimeoutError:
                short = sorted(SUBSCRIBERS - received.get(c, 0) for c in expected)
                raise AssertionError(
                    f"round {tag!r}: {len(acknowledged)} acknowledged, copies missing of the "
                    f"last ones: {short[-5:]}, {sum(short)} in all"
                ) from None
            elapsed = time.perf_counter() - started
            assert len(acknowledged) == PUBLICATIONS
            assert all(received[c] == SUBSCRIBERS for c in expected)  # none twice
            return len(expected) * SUBSCRIBERS / elapsed

        without: list[float] = []
        beside: list[float] = []
        for round_number in range(ROUNDS):
            without.append(await fan_out(b"alone%d" % round_number))
            slow = asyncio.ensure_future(
                publish(slow_publisher, SLOW_TOPIC, 10 * PUBLICATIONS, b"slow%d" % round_number)
            )
            beside.append(await fan_out(b"beside%d" % round_number))
            slow_acknowledged = len(await slow)
        shed = shed_count(mesh)
        print(
            f"B alone {without}, beside the stuck subscriber {beside}; A shed {shed:.0f}, "
            f"A acknowledged {slow_acknowledged} of the last round's {10 * PUBLICATIONS}"
        )
        assert max(beside) >= 0.8 * max(without), (without, beside)
        assert shed > 0  # the stuck subscriber's copies were shed, and counted
