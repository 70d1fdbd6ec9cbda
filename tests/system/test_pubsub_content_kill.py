"""Kill -9 a pubsub pod during 10,000 publishes to a content topic: every publication
answered ``ok`` reaches exactly the subscribers whose selectors match, each once per
endpoint, with the ids of every subscription it matched (draft-wyman 5.10.1).

Two relay pods and two pubsub pods as processes (each relay knows both pubsub pods),
the report service. Ten subscribers ``s0``..``s9`` on relay ``a``, each selecting the
last digit ``d`` of the publication number (``d = i``); ``s0`` also selects ``n < 1000``
and ``s1`` also ``d = 1 OR d = 2``, so some publications match two subscriptions of one
endpoint (one delivery, both ids) and some reach two endpoints. The publisher on relay
``b`` keeps 100 publications in flight; a third of the way through, pubsub pod ``p1``
is killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path

import pytest

from apexmesh.client import ApexClientError, ApexRequestError
from apexmesh.client.outgoing import XmlContent
from apexmesh.client.pubsub import PubsubClient
from tests.support.deployment import DOMAIN, Deployment, deployment
from tests.support.polling import scaled, still_true, wait_until
from tests.support.processes import ServiceProcess

pytestmark = [pytest.mark.system, pytest.mark.load]

SUBSCRIBERS = 10
PUBLICATIONS = 10_000
IN_FLIGHT = 100
KILL_AT = 3_000


def body(n: int) -> bytes:
    return f"<q n='{n}' d='{n % 10}'/>".encode()


def expected(n: int) -> dict[int, int]:
    """Subscriber index -> how many of its subscriptions publication ``n`` matches."""
    found: Counter[int] = Counter({n % 10: 1})
    if n < 1_000:
        found[0] += 1
    if n % 10 in (1, 2):
        found[1] += 1
    return dict(found)


def kill(process: ServiceProcess) -> None:
    process.process.send_signal(signal.SIGKILL)
    process.process.wait(10)


async def subscribe_all(
    running: Deployment, stack: contextlib.AsyncExitStack
) -> list[tuple[PubsubClient, dict[int, str]]]:
    async def one(index: int) -> tuple[PubsubClient, dict[int, str]]:
        client = await running.connect("a")
        stack.push_async_callback(client.close)
        helper = PubsubClient(await client.attach(f"s{index}@{DOMAIN}"))
        stack.push_async_callback(helper.aclose)
        selectors = [f"d = '{index}'"]
        if index == 0:
            selectors.append("n < 1000")
        if index == 1:
            selectors.append("d = '1' OR d = '2'")
        ids = {}
        for text in selectors:
            ids[await helper.select("news", duration=3600, selector=text)] = text
        return helper, ids

    return list(await asyncio.gather(*(one(i) for i in range(SUBSCRIBERS))))


@pytest.mark.timeout(600)
async def test_kill_a_pubsub_pod_during_10k_content_publishes(tmp_path: Path) -> None:
    async with (
        deployment(tmp_path, relays=("a", "b"), pubsub=("p1", "p2"), report=True) as running,
        contextlib.AsyncExitStack() as stack,
    ):
        publisher_client = await running.connect("b")
        stack.push_async_callback(publisher_client.close)
        publisher = PubsubClient(await publisher_client.attach(f"fred@{DOMAIN}"))
        stack.push_async_callback(publisher.aclose)
        assert (await publisher.create_topic("news")).code == 250
        subscribers = await subscribe_all(running, stack)
        received: list[Counter[int]] = [Counter() for _ in range(SUBSCRIBERS)]
        wrong_ids: list[tuple[int, int, tuple[int, ...]]] = []

        async def collect(index: int, helper: PubsubClient, ids: dict[int, str]) -> None:
            while True:
                _, matched, data = await helper.next_match()
                n = int(data.content.split(b"'")[1])
                received[index][n] += 1
                if n >= 0 and len(matched) != expected(n).get(index, 0):
                    wrong_ids.append((index, n, matched))
                if not set(matched) <= set(ids):
                    wrong_ids.append((index, n, matched))

        readers = [
            asyncio.ensure_future(collect(i, h, ids)) for i, (h, ids) in enumerate(subscribers)
        ]
        # Warm every pod's cache and index: -10 (d = 0 and n < 1000) reaches s0.
        await publisher.publish("news", XmlContent(b"<q n='-10' d='0'/>"))
        await wait_until(lambda: received[0][-10] > 0, 30, what="the warm-up publication")

        acknowledged: set[int] = set()
        refused: dict[int, int] = {}
        unanswered: set[int] = set()
        window = asyncio.Semaphore(IN_FLIGHT)

        async def one(n: int) -> None:
            try:
                await publisher.publish("news", XmlContent(body(n)), timeout=scaled(60))
            except ApexRequestError as exc:
                refused[n] = exc.code
            except (ApexClientError, TimeoutError):
                unanswered.add(n)
            else:
                acknowledged.add(n)
            finally:
                window.release()

        sends: list[Awaitable[None]] = []
        for n in range(PUBLICATIONS):
            if n == KILL_AT:
                await asyncio.to_thread(kill, running.pubsub["p1"])
            await window.acquire()
            sends.append(asyncio.ensure_future(one(n)))
        await asyncio.gather(*sends)

        def missing() -> list[int]:
            return [n for n in acknowledged if any(received[i][n] == 0 for i in expected(n))]

        with contextlib.suppress(TimeoutError):
            await wait_until(lambda: not missing(), 60, every=0.1)

        def once_each() -> bool:
            return all(times == 1 for r in received for times in r.values())

        # Late duplicates, if any, would arrive within 0.5 s (the asserts below say which).
        with contextlib.suppress(AssertionError):
            await still_true(once_each, 0.5)
        for task in readers:
            task.cancel()
    vanished = sorted(missing())
    twice = sorted({n for r in received for n, times in r.items() if times > 1})
    stray = sorted(n for i, r in enumerate(received) for n in r if n >= 0 and i not in expected(n))
    deliveries = sum(sum(r.values()) for r in received)
    print(
        f"published {PUBLICATIONS}: {len(acknowledged)} acknowledged, "
        f"{len(refused)} refused {dict(Counter(refused.values()))}, {len(unanswered)} "
        f"unanswered; {deliveries} deliveries; {len(vanished)} acknowledged but missing, "
        f"{len(twice)} delivered twice to an endpoint, {len(stray)} to a non-matching one, "
        f"{len(wrong_ids)} with wrong InRe ids"
    )
    assert len(acknowledged) > PUBLICATIONS // 2
    assert set(refused.values()) <= {421, 450, 451}
    assert vanished == [], vanished[:20]
    assert twice == [], twice[:20]
    assert stray == [], stray[:20]
    assert wrong_ids == [], wrong_ids[:20]
