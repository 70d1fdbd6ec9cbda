"""Robust pubsub benchmark, phase 2: the service serving a robust topic, beside the same
run's plain topic fan-out (issue #19 "Must show").

Starts the local mesh (apexmesh.ops.localmesh: processes, two relay pods and two pubsub
pods for example.com, development run) and runs:

* ``plain``: one plain topic, 100 subscribers (each its own BEEP session, half on each
  relay pod), publications of 256 octets, 100 in flight (the relay's ``ok`` answers
  one): deliveries/s and p99 from publication to delivery;
* ``robust``: the same on a robust topic (each delivery with its subscriber's ``robust``
  option, every publication committed to the topic's stream before its ``ok``):
  deliveries/s and p99, and their ratio to ``plain`` (the issue's target: 0.7);
* ``repair``: one more robust subscriber asks, after the run, for the whole run again
  by link range (``gap``): ms until every redelivery and the ``gapreply`` arrived.

The subscribers here read raw deliveries (the stub's own cost is bench/robust_store.py's).

``--scenario kill`` (issue #19 "Must show": kill -9 at full speed) runs instead: one
publisher keeps 100 publications in flight to a robust topic (``--publications``,
default 20,000, each with a ``publish`` option so that its ``published`` answer gives its
source seq), one :class:`RobustClient` subscriber follows it, and part-way
(``--kill-at``) a process is SIGKILLed: ``--kill relay`` the subscriber's relay pod (its
client attaches again through the other pod by itself), ``--kill pubsub`` the pubsub pod
holding the topic's sequencer lease (the other takes the topic). It prints how many
publications got ``published``, how many of those the application received in
source-seq order, duplicates, out-of-order and missing ones, and the stub's repairs.

Every scenario prints delivered / expected; the last line is JSON: a list of figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import figure
from loads import DRAIN_SECONDS, IN_FLIGHT, Tally, stamp, unstamp, windowed
from pubsub_fanout import DOMAIN, ApexSide, Result, measured
from redis.asyncio import Redis

from apexmesh.aio.tasks import within
from apexmesh.client import ApexClient, Attachment, connect_endpoint
from apexmesh.client.outgoing import XmlContent
from apexmesh.client.robust import RobustClient
from apexmesh.ops.localmesh import Child, redis_prefix
from apexmesh.pubsub.elements import CreateTopic, Subscribe
from apexmesh.pubsub.robust.elements import OPTION_NAME, robust_from_option
from apexmesh.pubsub.robust.operations import GapReply, GapRequest, parse_answer
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.pubsub.robust.stub import Publication
from apexmesh.pubsub.topic_description import TopicDescription, TopicSettings
from apexmesh.store.keys import Keys
from apexmesh.store.robust_keys import RobustKeys

PLAIN, ROBUST, KILLED = "bench.plain", "bench.robust", "bench.kill"
#: The kill scenario's topic: heartbeats every half second, so that a loss at the end of
#: the run shows within a second; repairs not complete in 2 s are asked again.
KILL_HEARTBEAT_MS = 500
KILL_REPAIR_TIMEOUT_MS = 2_000
SERVICE = f"apex=pubsub@{DOMAIN}"


def report(name: str, result: Result) -> None:
    print(
        f"  {name}: {result.rate:,.0f} deliveries/s, p99 {result.latency['p99']:.1f} ms, "
        f"delivered {result.delivered:,} / {result.expected:,}, missing {result.missing}",
        flush=True,
    )


async def run(apex: ApexSide, topic: str, subscribers: int, publications: int) -> Result:
    tally = Tally([subscribers] * publications)
    await apex.subscribe(f"{topic.split('.')[1]}-sub", [topic] * subscribers, tally)

    async def publish() -> list[int]:
        return await windowed(
            lambda i: apex.publish(topic, i, time.perf_counter()), publications, IN_FLIGHT
        )

    result = await measured(tally, publish, [subscribers] * publications)
    await apex.close_subscribers()
    return result


class Repairer:
    """A robust subscriber that records the link seqs it gets, then asks for them all
    again: every delivery after the request is a redelivery (heartbeats included)."""

    def __init__(self, attachment: Attachment) -> None:
        self.attachment = attachment
        self.links: list[int] = []
        self.repairing = False
        self.redelivered = 0
        self.count: int | None = None
        self.complete = asyncio.Event()
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            received = await self.attachment.receive()
            option = next(
                (
                    o
                    for r in received.data.recipients
                    for o in r.options
                    if o.internal == OPTION_NAME
                ),
                None,
            )
            if option is None:
                answer = parse_answer(received.content)
                if isinstance(answer, GapReply):
                    self.count = answer.count
            else:
                info = robust_from_option(option)
                if not self.repairing:
                    if info.link_seq is not None and not info.heartbeat:
                        self.links.append(info.link_seq)
                    continue
                self.redelivered += 1
            if self.count is not None and self.redelivered >= self.count:
                self.complete.set()


async def repair(repairer: Repairer) -> tuple[float, int, int]:
    """(ms, link seqs redelivered, link seqs asked for) for a gap over the whole run."""
    first, last = min(repairer.links), max(repairer.links)
    repairer.repairing = True
    started = time.perf_counter()
    gap = GapRequest(topic=ROBUST, trans_id=77, link_from=first, link_to=last)
    await repairer.attachment.send(SERVICE, XmlContent(gap.to_xml()))
    async with asyncio.timeout(600):
        await repairer.complete.wait()
    return (time.perf_counter() - started) * 1000, repairer.redelivered, last - first + 1


async def service(subscribers: int, publications: int) -> list[dict[str, Any]]:
    """The plain, robust and repair scenarios; their figures."""
    figures: list[dict[str, Any]] = []
    async with ApexSide([PLAIN, ROBUST]) as apex:
        assert apex.publisher is not None
        await apex.create_topics([PLAIN])
        robust = RobustSettings(resolution=Resolution.BITS32, heartbeat_ms=5_000)
        await create_robust(apex, ROBUST, robust)
        print(f"plain topic, {subscribers} subscribers on two relay pods", flush=True)
        plain = await run(apex, PLAIN, subscribers, publications)
        report("plain", plain)
        # On the publisher's session: the run closes every subscriber's session after it.
        attachment = await apex.clients[0].attach(f"repairer@{DOMAIN}")
        op = Subscribe(subscriber=attachment.endpoint, topic=ROBUST, trans_id=1, duration=3600)
        await apex.request(attachment, SERVICE, op.to_xml())
        repairer = Repairer(attachment)
        print(f"robust topic, {subscribers} subscribers on two relay pods", flush=True)
        result = await run(apex, ROBUST, subscribers, publications)
        report("robust", result)
        ratio = result.rate / plain.rate if plain.rate else 0.0
        print(f"  robust / plain: {ratio:.2f} (target 0.7)", flush=True)
        await asyncio.sleep(1.0)  # the repairer's last deliveries
        ms, count, asked = await repair(repairer)
        print(
            f"  repair by link range: {ms:,.0f} ms, redelivered {count:,} / expected {asked:,}",
            flush=True,
        )
        repairer.reader.cancel()
        figures += [
            figure("robust fan-out", result.rate, "deliveries/s", plain.rate),
            figure("robust p99", result.latency["p99"], "ms", plain.latency["p99"]),
            figure(f"repair of {count} link seqs", ms, "ms", None),
        ]
    return figures


async def create_robust(apex: ApexSide, topic: str, settings: RobustSettings) -> None:
    assert apex.publisher is not None
    create = CreateTopic(
        topic=topic,
        trans_id=9,
        description=TopicDescription(settings=TopicSettings(robust=settings)),
    )
    await apex.request(apex.publisher, SERVICE, create.to_xml(), (250, 553))


# --------------------------------------------------------------------------- kill -9


@dataclass
class KillRun:
    """What the publisher and the subscriber's application saw in the kill scenario."""

    #: Publication index -> the source seq of its ``published`` answer.
    published: dict[int, int] = field(default_factory=dict)
    #: Indices the application received, in the order it received them.
    received: list[int] = field(default_factory=list)
    #: Received publications whose source seq was not above every earlier one's.
    out_of_order: int = 0
    killed: str = ""
    killed_at: float = 0.0
    #: Published indices not received yet, once the publisher is done (None before).
    waiting: set[int] | None = None
    #: Set when ``waiting`` is empty: every published publication was received.
    all_in: asyncio.Event = field(default_factory=asyncio.Event)

    def published_done(self) -> None:
        """The publisher is done: from now on the reader counts down what is missing."""
        self.waiting = self.published.keys() - set(self.received)
        if not self.waiting:
            self.all_in.set()


async def sequencer(apex: ApexSide, topic: str) -> Child:
    """The pubsub pod holding ``topic``'s sequencer lease (taken by the warm-up's first
    publication; its value is ``POD|HOST:PORT``, the pod id being the child's name)."""
    redis = Redis.from_url(apex.mesh.redis_url, decode_responses=True)
    try:
        lease = await redis.get(RobustKeys(Keys(prefix=redis_prefix(DOMAIN))).owner(DOMAIN, topic))
    finally:
        await redis.aclose()
    if lease is None:
        raise SystemExit(f"kill: nobody holds the sequencer lease of {topic}")
    pod = str(lease).partition("|")[0]
    return next(c for c in apex.mesh.children if c.name == pod)


async def kill(child: Child, run: KillRun) -> None:
    """SIGKILL: no goodbye, no lease given up, nothing flushed; reaped at once, so the
    mesh's stop does not signal a pid that is gone."""
    assert child.process is not None
    child.process.kill()
    run.killed, run.killed_at = child.name, time.perf_counter()
    print(f"  SIGKILL {child.name} (pid {child.process.pid})", flush=True)
    await child.process.wait()


async def read_application(subscriber: RobustClient, run: KillRun) -> None:
    """The subscriber's application: every publication in the order ``next()`` gives."""
    last_seq = -1
    while True:
        publication: Publication = await subscriber.next()
        found = unstamp(publication.payload)
        if found is None or found[1] < 0:
            continue  # a warm-up publication
        run.received.append(found[1])
        if run.waiting is not None:
            run.waiting.discard(found[1])
            if not run.waiting:
                run.all_in.set()
        if publication.source_seq <= last_seq:
            run.out_of_order += 1
        last_seq = max(last_seq, publication.source_seq)


async def kill_scenario(what: str, publications: int, kill_at: int) -> list[dict[str, Any]]:
    """Publish at full speed to a robust topic, SIGKILL ``what`` at ``kill_at``; figures."""
    run = KillRun()
    async with ApexSide([KILLED]) as apex, contextlib.AsyncExitStack() as stack:
        settings = RobustSettings(resolution=Resolution.BITS32, heartbeat_ms=KILL_HEARTBEAT_MS)
        await create_robust(apex, KILLED, settings)
        sessions: list[ApexClient] = []

        async def session(pod: int) -> ApexClient:
            # Not in apex.clients: a session to a killed relay must not stop the exit.
            client = await connect_endpoint("127.0.0.1", apex.mesh.relay(DOMAIN, pod).edge_port)
            sessions.append(client)
            return client

        async def closed() -> None:
            for client in sessions:
                with contextlib.suppress(Exception):
                    await client.close(timeout=2)

        stack.push_async_callback(closed)

        # The subscriber on relay pod 1, attaching again through pod 0 when that dies;
        # the publisher on pod 0.
        async def reattach() -> Attachment:
            return await (await session(0)).attach(f"wilma@{DOMAIN}")

        subscriber = RobustClient(
            await (await session(1)).attach(f"wilma@{DOMAIN}"), reattach=reattach
        )
        stack.push_async_callback(subscriber.aclose)
        publisher = RobustClient(await (await session(0)).attach(f"barney@{DOMAIN}"))
        stack.push_async_callback(publisher.aclose)
        stub = await subscriber.follow(
            KILLED,
            resolution=settings.resolution,
            heartbeat_ms=settings.heartbeat_ms,
            repair_timeout_ms=KILL_REPAIR_TIMEOUT_MS,
        )
        await subscriber.subscribe(KILLED, duration=3600)
        # Until a publication reaches her: every pod's cache has her subscription then.
        for attempt in range(1, 31):
            await publisher.publish(KILLED, stamp(-attempt, 0.0))
            with contextlib.suppress(TimeoutError):
                await within(subscriber.next(), timeout=1.0)
                break
        else:
            raise SystemExit("kill: the subscriber never received a warm-up publication")
        victim = (
            next(c for c in apex.mesh.children if c.name == apex.mesh.relay(DOMAIN, 1).name)
            if what == "relay"
            else await sequencer(apex, KILLED)
        )
        reader = asyncio.ensure_future(read_application(subscriber, run))
        print(
            f"kill -9 of {what} {victim.name} at publication {kill_at:,} of {publications:,}, "
            f"{IN_FLIGHT} in flight",
            flush=True,
        )

        async def publish(index: int) -> None:
            if index == kill_at:
                await kill(victim, run)
            run.published[index] = await publisher.publish(
                KILLED, stamp(index, time.perf_counter()), timeout=30.0
            )

        started = time.perf_counter()
        await windowed(publish, publications, IN_FLIGHT)
        publish_s = time.perf_counter() - started
        # Until every published publication reached the application (or the drain ends).
        run.published_done()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN_SECONDS):
                await run.all_in.wait()
        complete_s = time.perf_counter() - run.killed_at if run.killed else 0.0
        # A duplicate would come now, after the last missing one: two heartbeat intervals
        # (a quiet window, not a wait for something expected).
        await asyncio.sleep(KILL_HEARTBEAT_MS * 2 / 1000)
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        first: set[int] = set()
        duplicates = 0
        for index in run.received:
            duplicates += index in first
            first.add(index)
        ok = len(run.published)
        delivered = len(first & run.published.keys())
        missing = ok - delivered
        # Received without a ``published`` answer: sequenced, but its answer was lost
        # (docs/robust.md "Missing": ``published`` is not journalled) or late.
        unanswered = len(first - run.published.keys())
        repairs = stub.stats.link_repairs + stub.stats.source_repairs
        stats = stub.stats
        print(
            f"  published {ok:,} / {publications:,} in {publish_s:.1f} s "
            f"({ok / publish_s:,.0f}/s); delivered in order {delivered - run.out_of_order:,} "
            f"/ expected {ok:,}; duplicates {duplicates}, out of order {run.out_of_order}, "
            f"missing {missing}, received without a published answer {unanswered}; "
            f"gaps detected {stats.gaps_detected}, link repairs "
            f"{stats.link_repairs}, source repairs {stats.source_repairs}, refused "
            f"{stats.refused}, resyncs {stats.resyncs}, reattached {subscriber.reattached}; "
            f"all delivered {complete_s:.1f} s after the kill",
            flush=True,
        )
    name = f"kill -9 {what}"
    return [
        figure(f"{name}: published", ok, "publications", publications),
        figure(f"{name}: delivered in order", delivered - run.out_of_order, "publications", ok),
        figure(f"{name}: duplicates", duplicates, "publications"),
        figure(f"{name}: missing", missing, "publications"),
        figure(f"{name}: gaps detected", stats.gaps_detected, "gaps"),
        figure(f"{name}: repair requests (link and source)", repairs, "requests"),
        figure(f"{name}: publish rate", ok / publish_s, "publications/s"),
        figure(f"{name}: all delivered after the kill", complete_s * 1000, "ms"),
    ]


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", choices=("service", "kill"), default="service")
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--publications", type=int, help="default: 5,000 (service), 20,000 (kill)")
    parser.add_argument("--kill", choices=("relay", "pubsub"), default="relay")
    parser.add_argument("--kill-at", type=int, help="publication index; default a third")
    args = parser.parse_args(argv)
    if args.scenario == "kill":
        count = args.publications or 20_000
        kill_at = count // 3 if args.kill_at is None else args.kill_at
        figures = await kill_scenario(args.kill, count, kill_at)
    else:
        figures = await service(args.subscribers, args.publications or 5_000)
    print(json.dumps(figures))


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1:]))
