"""Kill -9 during the fan-out scenario of issue #16: nothing answered ``ok`` vanishes.

Two relay pods and two pubsub pods as processes (each relay knows both pubsub pods,
each pubsub pod both relays) and the report service. 100 subscribers of ``news``, one
per BEEP session, all attached to relay ``a``; one publisher on relay ``b`` (the pod
that holds no subscriber) keeps about 100 publications in flight, each with a
statusRequest. A third of the way through, pubsub pod ``p1`` is killed with SIGKILL;
two thirds of the way, relay ``b``.

For every publication the publisher got ``ok`` for, either every subscriber receives it
or the publisher got a statusResponse saying it failed; the test counts both and
requires that none is in neither set. While only the pubsub pod has been killed, no
subscriber receives a publication twice (the relay retries a cut-off delivery with its
delivery id on the other pubsub pod, which submits the same fan-out ids, which the relay
pods relay once).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path

import pytest

from apexmesh.client import ApexClient, ApexClientError, ApexRequestError
from apexmesh.client.pubsub import PubsubClient
from apexmesh.client.reports import SendResult
from tests.support.deployment import DOMAIN, Deployment, deployment
from tests.support.polling import scaled, wait_until
from tests.support.processes import ServiceProcess

pytestmark = [pytest.mark.system, pytest.mark.load]

SUBSCRIBERS = 100
PUBLICATIONS = 600
IN_FLIGHT = 100
KILL_PUBSUB_AT = 200
KILL_RELAY_AT = 400


def kill(process: ServiceProcess) -> None:
    process.process.send_signal(signal.SIGKILL)
    process.process.wait(10)


class Run:
    """What the publisher and the subscribers saw."""

    def __init__(self) -> None:
        #: Publications answered ok, and (later) their statusResponse code.
        self.acknowledged: set[int] = set()
        self.reported: dict[int, int] = {}
        #: Publications refused with an error code, or never answered (session gone).
        self.refused: dict[int, int] = {}
        self.unanswered: set[int] = set()
        #: Per subscriber, how many times each publication arrived.
        self.received: list[Counter[int]] = [Counter() for _ in range(SUBSCRIBERS)]
        #: The dataHopping transID of each copy subscriber s0 got: two copies with one
        #: transID are one fan-out chunk relayed twice (a relay's dedup missed), two
        #: with different ones a publication fanned out twice (two delivery ids).
        self.copies: dict[int, list[int]] = {}
        #: The publication index at which the relay was killed.
        self.relay_killed_at: int | None = None

    def complete(self) -> set[int]:
        return {n for n in self.acknowledged if all(r[n] for r in self.received)}


async def subscribe_all(
    running: Deployment, stack: contextlib.AsyncExitStack
) -> list[PubsubClient]:
    async def one(index: int) -> PubsubClient:
        client: ApexClient = await running.connect("a")
        stack.push_async_callback(client.close)
        helper = PubsubClient(await client.attach(f"s{index}@{DOMAIN}"))
        stack.push_async_callback(helper.aclose)
        reply = await helper.subscribe("news", duration=3600)
        assert reply.code == 250, reply
        return helper

    return list(await asyncio.gather(*(one(i) for i in range(SUBSCRIBERS))))


async def publish_all(run: Run, running: Deployment, publisher: PubsubClient) -> None:
    window = asyncio.Semaphore(IN_FLIGHT)
    reports: list[asyncio.Task[None]] = []

    async def report(n: int, result: SendResult) -> None:
        with contextlib.suppress(ApexClientError, TimeoutError):
            found = await result.reports(1, timeout=scaled(60))
            run.reported[n] = found[0].destinations[0].reply.code

    async def one(n: int) -> None:
        try:
            result = await publisher.publish("news", str(n).encode(), status_request=True)
        except ApexRequestError as exc:
            run.refused[n] = exc.code
        except ApexClientError:
            run.unanswered.add(n)
        else:
            run.acknowledged.add(n)
            reports.append(asyncio.ensure_future(report(n, result)))
        finally:
            window.release()

    sends: list[Awaitable[None]] = []
    for n in range(PUBLICATIONS):
        if n == KILL_PUBSUB_AT:
            await asyncio.to_thread(kill, running.pubsub["p1"])
        if n == KILL_RELAY_AT:
            await asyncio.to_thread(kill, running.relays["b"])
            run.relay_killed_at = n
            break  # the publisher's session went with its relay
        await window.acquire()
        sends.append(asyncio.ensure_future(one(n)))
    await asyncio.gather(*sends)
    if reports:
        await asyncio.wait(reports, timeout=scaled(60))


@pytest.mark.timeout(300)
async def test_kill_a_pubsub_pod_then_a_relay_pod_nothing_acknowledged_vanishes(
    tmp_path: Path,
) -> None:
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
        run = Run()

        async def collect(index: int, helper: PubsubClient) -> None:
            while True:
                _, received = await helper.next_publication()
                n = int(received.content)
                run.received[index][n] += 1
                if index == 0:
                    run.copies.setdefault(n, []).extend(o.trans_id for o in received.options)

        # Every pod's cache and placement warm: one publication reaches everybody.
        await publisher.publish("news", b"-1")
        readers = [asyncio.ensure_future(collect(i, h)) for i, h in enumerate(subscribers)]
        await wait_until(lambda: all(r[-1] for r in run.received), 30, what="the warm-up")

        await publish_all(run, running, publisher)

        # Every acknowledged publication reaches every subscriber, unless reported.
        def all_arrived() -> bool:
            refused = {n for n, code in run.reported.items() if code != 250}
            return run.acknowledged - run.complete() <= refused

        with contextlib.suppress(TimeoutError):
            await wait_until(all_arrived, 60, every=0.1)
        for task in readers:
            task.cancel()
    complete = run.complete()
    reported = {n for n in run.acknowledged - complete if run.reported.get(n, 250) != 250}
    vanished = sorted(run.acknowledged - complete - reported)
    duplicated = sorted({n for r in run.received for n, times in r.items() if times > 1 and n >= 0})
    print(
        f"published {KILL_RELAY_AT}: {len(run.acknowledged)} acknowledged "
        f"({len(complete)} delivered to all {SUBSCRIBERS}, {len(reported)} reported failed, "
        f"{len(vanished)} vanished), {len(run.refused)} refused "
        f"{dict(Counter(run.refused.values()))}, {len(run.unanswered)} unanswered; "
        f"{len(duplicated)} delivered twice to someone"
    )
    if vanished:
        reached = {n: sum(1 for r in run.received if r[n]) for n in vanished}
        print(
            f"vanished: {vanished[0]}..{vanished[-1]}, reaching "
            f"{sorted(Counter(reached.values()).items())} (subscribers: publications); "
            f"reports for them: {dict(Counter(run.reported.get(n, 0) for n in vanished))}"
        )
    for n in duplicated[:5]:
        twice = [i for i, r in enumerate(run.received) if r[n] > 1]
        print(f"publication {n}: {len(twice)} subscribers got it more than once, e.g. s{twice[0]}")
        print(f"  dataHopping transIDs of the copies s0 got: {run.copies.get(n)}")
    assert len(run.acknowledged) > KILL_PUBSUB_AT // 2
    assert vanished == [], vanished[:20]
    assert duplicated == [], duplicated[:20]
