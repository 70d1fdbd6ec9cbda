"""Pubsub benchmark: the scenarios of issue #16, each beside Redis PUBLISH in the same run.

Starts the local mesh (apexmesh.ops.localmesh) as processes in a development run (plain
BEEP, no SASL; two relay pods and two pubsub pods for example.com) and a redis-server of
its own on a free port, and runs, each on both systems:

* ``fanout``: one topic, 100 subscribers, each its own BEEP session (Redis: its own
  connection), half on each relay pod; 5,000 publications of 256 octets;
* ``topics``: 10,000 topics with one subscriber each, over 100 subscriber sessions of
  100 topics each (Redis: 100 connections of 100 channels; ``--topic-sessions 0``: one
  session per topic); 100,000 publications spread over the topics;
* ``latency``: one topic, one subscriber, publications offered at 2,000/s for 5 s
  (open loop); p50 / p99 / p99.9 from when each was due to its delivery;
* ``content`` (issue #18): one content-based topic, 1,000 subscribers on two relay pods,
  each with a JMS selector ``g = k`` (k = its index mod 100), publications of
  ``<m g='...'/>`` each matching 1 % (10 subscribers): deliveries/s beside, as the
  baseline, the same run's topic fan-out to 10 plain subscribers of another topic
  (the same deliveries per publication without selection). Redis has no selection, so
  no Redis figure here.

The publisher keeps 100 publications in flight (apex-mesh: one session, the relay's
``ok`` answers one, and comes once every subscriber's copy is in a relay's custody;
Redis: one connection, pipelines of 100 PUBLISH); ``--open-loop RATE`` offers the
fan-out and topics publications at a fixed rate instead. Subscribers of both systems run
in this process (uvloop), so each side pays the same client cost per delivery.

``--redis cluster`` (issue #30) runs the ``fanout`` and ``topics`` scenarios a third
time, after the single-Redis mesh has stopped: on a mesh of the same services whose state
sits on a Redis Cluster of three primaries and three replicas (Debian's redis-server on
loopback, as the cluster tests start it: tests/support/redis_cluster.py, AOF on like the
mesh's own Redis). It prints the commands each primary ran while the publications were
delivered (the point of a cluster is that this work spreads) and the cluster mesh's
deliveries/s as a ratio to the single-Redis mesh's in the same run (target >= 0.8 on two
cores). Every Redis process's CPU counts among the servers', on every side.

Every scenario prints delivered / expected and checks that every publication answered
``ok`` (Redis: that PUBLISH counted a receiver for) reached all its subscribers. Targets,
as ratios to Redis in the same run: fan-out and 10k topics deliveries/s >= 0.5, p99 at
2,000/s <= 2x Redis's. The last line of output is JSON: a list of figures (name, value,
unit, baseline and ratio). A scenario that fails (an error, or acknowledged publications
not delivered) prints FAILED with the error and is a figure, ``<scenario>_failed`` with
its system and error; the other scenarios still run, the JSON line is still printed,
and the bench then exits 1. The apex-mesh side (mesh, publisher, subscribers) is
bench/apex_side.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support's cluster

from apex_side import CLIENTS, CONTENT_GROUPS, DOMAIN, ApexSide
from figures import figure
from loads import IN_FLIGHT, RedisSide, Tally, cpu_seconds, offered, windowed

from apexmesh.pubsub.elements import CreateTopic
from tests.support.redis_cluster import RedisClusterNodes

T = TypeVar("T")


@dataclass
class Result:
    """One system's figures in one scenario."""

    rate: float
    latency: dict[str, float]
    delivered: int
    expected: int
    missing: int
    #: CPU time of the servers (every process but the bench's) and of the bench's
    #: endpoints per delivery, in microseconds (set by :func:`with_cpu`).
    server_us: float = 0.0
    client_us: float = 0.0
    #: Commands each Redis Cluster primary ran while it was measured, by port (set by
    #: :func:`run_apex` on a cluster mesh).
    node_commands: dict[int, int] | None = None


class UndeliveredError(Exception):
    """Publications a system acknowledged did not reach all their subscribers."""


def report(name: str, system: str, result: Result) -> None:
    """Print one system's figures; :class:`UndeliveredError` when an acknowledged publication
    missed a subscriber (after the figures are printed)."""
    lat = result.latency
    print(
        f"  {system:>9}: {result.rate:>10,.0f} deliveries/s; delivered {result.delivered:,} / "
        f"expected {result.expected:,} ({result.missing} acknowledged publications not "
        f"delivered everywhere); latency p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms, "
        f"p99.9 {lat['p999']:.1f} ms",
        flush=True,
    )
    if result.missing:
        missed = f"{result.missing} acknowledged publications were not delivered"
        raise UndeliveredError(f"{name}/{system}: {missed}")


@dataclass
class Failures:
    """The scenarios that failed: each printed when it happens and kept as a figure, so
    the bench still runs the others and still ends with its JSON line (then exits 1)."""

    figures: list[dict[str, Any]]
    names: list[str] = field(default_factory=list)

    async def attempt(
        self, name: str, system: str, run: Awaitable[T], cleanup: ApexSide | None = None
    ) -> T | None:
        """``run``, or None when it failed (then ``cleanup``'s subscribers are closed, for
        the next scenario on the same mesh)."""
        try:
            return await run
        except Exception as error:  # noqa: BLE001 - a failed scenario is a figure, not an exit
            why = f"{type(error).__name__}: {error}"
            print(f"  {system:>9}: FAILED: {why}", flush=True)
            failed = figure(f"{name}_failed", 1, "failed scenario")
            self.figures.append({**failed, "system": system, "error": why[:300]})
            self.names.append(f"{name}/{system}")
            if cleanup is not None:
                await cleanup.close_subscribers()
            return None

    async def scenario(
        self,
        name: str,
        scenario: str,
        system: str,
        run: Awaitable[Result],
        cleanup: ApexSide | None = None,
    ) -> Result | None:
        """:meth:`attempt` of one system's run of ``scenario``, its result reported
        (:func:`report`: acknowledged publications missed are a failure too)."""
        return await self.attempt(name, system, reported(scenario, system, run), cleanup)


async def reported(name: str, system: str, run: Awaitable[Result]) -> Result:
    """``run``'s result, reported (:func:`report`)."""
    result = await run
    report(name, system, result)
    return result


async def measured(
    tally: Tally, publish: Callable[[], Awaitable[list[int]]], subscribers_of: Sequence[int]
) -> Result:
    """Publish, wait for the deliveries; figures over first publish to last delivery."""
    started = time.perf_counter()
    acknowledged = await publish()
    expected = sum(subscribers_of[i] for i in acknowledged)
    await tally.drained()
    elapsed = (tally.last or time.perf_counter()) - started
    return Result(
        rate=tally.delivered / elapsed if elapsed > 0 else 0.0,
        latency=tally.summary(),
        delivered=tally.delivered,
        expected=expected,
        missing=len(tally.missing(acknowledged)),
    )


# --------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    name: str
    topics: int
    subscribers_per_topic: int
    publications: int
    rate: float | None
    #: Subscriber sessions, each subscribed to topics/sessions topics (0: one per
    #: subscriber).
    sessions: int = 0

    def topic(self, index: int) -> str:
        if self.topics == 1:
            return f"bench.{self.name}"
        return f"t{index % self.topics}"  # short: 10,000 access entries fit the seed

    @property
    def names(self) -> list[str]:
        return [self.topic(i) for i in range(self.topics)]

    def subscriber_topics(self) -> list[str]:
        return [t for t in self.names for _ in range(self.subscribers_per_topic)]

    def subscriber_groups(self) -> list[str | list[str]]:
        """What each subscriber session subscribes to: one topic each, or with
        ``sessions`` the topics dealt round-robin over that many sessions."""
        topics = self.subscriber_topics()
        if not self.sessions:
            return list(topics)
        return [topics[start :: self.sessions] for start in range(self.sessions)]

    @property
    def shape(self) -> str:
        if not self.sessions:
            return "one per session"
        each = len(self.subscriber_topics()) // self.sessions
        return f"{self.sessions:,} sessions of {each:,} topics"


async def run_redis(scenario: Scenario) -> Result:
    fanout = [scenario.subscribers_per_topic] * scenario.publications
    tally = Tally(fanout)
    async with RedisSide() as redis:
        await redis.subscribe(scenario.subscriber_groups(), tally)
        if scenario.rate is None:

            async def publish() -> list[int]:
                return await redis.publish_windowed(
                    scenario.topic, scenario.publications, IN_FLIGHT
                )
        else:
            rate = scenario.rate

            async def publish() -> list[int]:
                return await offered(
                    lambda i, due: redis.publish_one(scenario.topic(i), i, due),
                    scenario.publications,
                    rate,
                )

        pids = {"redis-server": redis.pid, CLIENTS: os.getpid()}
        return await with_cpu(pids, measured(tally, publish, fanout))


async def run_apex(apex: ApexSide, scenario: Scenario) -> Result:
    fanout = [scenario.subscribers_per_topic] * scenario.publications
    started = time.perf_counter()
    await apex.create_topics(scenario.names)
    print(
        f"  apex-mesh: {scenario.topics:,} topic(s) created in "
        f"{time.perf_counter() - started:.1f} s",
        flush=True,
    )
    tally = Tally(fanout)
    started = time.perf_counter()
    await apex.subscribe(f"{scenario.name}-sub", scenario.subscriber_groups(), tally)
    print(
        f"  apex-mesh: {len(scenario.subscriber_topics()):,} subscriptions, {scenario.shape}, "
        f"on two relay pods, subscribed in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    if scenario.rate is None:

        async def publish() -> list[int]:
            return await windowed(
                lambda i: apex.publish(scenario.topic(i), i, time.perf_counter()),
                scenario.publications,
                IN_FLIGHT,
            )
    else:
        rate = scenario.rate

        async def publish() -> list[int]:
            return await offered(
                lambda i, due: apex.send(scenario.topic(i), i, due), scenario.publications, rate
            )

    collected = await apex.gc_seconds()
    pids = apex.pids()
    cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
    commands = await apex.command_counts()
    result = await with_cpu(pids, measured(tally, publish, fanout))
    if commands:
        result.node_commands = spread(commands, await apex.command_counts())
    collected_after = await apex.gc_seconds()
    print(
        "    garbage collector, share of each process's CPU: "
        + ", ".join(
            f"{name} {(collected_after[name] - collected[name]) / spent:.1%}"
            for name in collected
            if name in pids and (spent := cpu_seconds(pids[name]) - cpu[name]) > 0.1
        ),
        flush=True,
    )
    await apex.close_subscribers()
    return result


def spread(before: dict[int, int], after: dict[int, int]) -> dict[int, int]:
    """The commands each primary ran between two counts, printed with its share. A node
    failed over in between is left out (its replica's count starts elsewhere)."""
    ran = {port: after[port] - before[port] for port in after if port in before}
    total = sum(ran.values()) or 1
    print(
        "    Redis Cluster commands per primary: "
        + ", ".join(f":{port} {n:,} ({n / total:.0%})" for port, n in sorted(ran.items())),
        flush=True,
    )
    return ran


async def with_cpu(pids: dict[str, int], run: Awaitable[Result]) -> Result:
    """``run``, printing how many cores each process kept busy meanwhile and its CPU time
    per delivery (from /proc), with the servers' sum (every process but this one, whose
    subscribers and publisher are the same code cost on both sides)."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    clock = time.perf_counter()
    result = await run
    elapsed = time.perf_counter() - clock
    spent = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    per = max(result.delivered, 1)
    servers = sum(cpu for name, cpu in spent.items() if name != CLIENTS)
    result.server_us = servers / per * 1e6
    result.client_us = spent.get(CLIENTS, 0.0) / per * 1e6
    print(
        "    CPU per delivery: servers "
        f"{result.server_us:.1f} us ("
        + ", ".join(
            f"{name} {cpu / per * 1e6:.1f} us, {cpu / elapsed:.2f} cores"
            for name, cpu in spent.items()
            if name != CLIENTS and cpu / elapsed >= 0.005
        )
        + f"); {CLIENTS} {result.client_us:.1f} us",
        flush=True,
    )
    return result


SCENARIOS = ("fanout", "topics", "latency", "content")

CONTENT_TOPIC = "bench.content"
PLAIN_TOPIC = "bench.plain"


async def run_content(apex: ApexSide, subscribers: int, publications: int) -> tuple[Result, Result]:
    """(content-based, topic fan-out baseline) on the same mesh, in this order: the
    baseline first, 10 plain subscribers of another topic, then 1,000 selectors; both
    reported (:func:`report`)."""
    assert apex.publisher is not None
    for index, name in enumerate((CONTENT_TOPIC, PLAIN_TOPIC), start=1):
        op = CreateTopic(topic=name, trans_id=index)  # by the publisher's own session
        await apex.request(apex.publisher, f"apex=pubsub@{DOMAIN}", op.to_xml(), (250, 553))
    per_publication = subscribers // CONTENT_GROUPS
    fanout = [per_publication] * publications
    tally = Tally(fanout)
    await apex.subscribe("plain-sub", [PLAIN_TOPIC] * per_publication, tally)
    base = await measured(
        tally,
        lambda: windowed(
            lambda i: apex.publish(PLAIN_TOPIC, i, time.perf_counter()), publications, IN_FLIGHT
        ),
        fanout,
    )
    report("content-baseline", "topic fan-out", base)
    await apex.close_subscribers()
    tally = Tally(fanout)
    started = time.perf_counter()
    await apex.subscribe(
        "content-sub",
        [CONTENT_TOPIC] * subscribers,
        tally,
        selector_of=lambda i: f"g = {i % CONTENT_GROUPS}",
    )
    print(
        f"  apex-mesh: {subscribers:,} content subscribers (JMS selectors) subscribed in "
        f"{time.perf_counter() - started:.1f} s",
        flush=True,
    )
    mine = await with_cpu(
        apex.pids(),
        measured(
            tally,
            lambda: windowed(
                lambda i: apex.publish_content(CONTENT_TOPIC, i, time.perf_counter()),
                publications,
                IN_FLIGHT,
            ),
            fanout,
        ),
    )
    await apex.close_subscribers()
    report("content", "apex-mesh", mine)
    return mine, base


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    out = []
    for name in args.scenario:
        if name == "fanout":
            out.append(Scenario("fanout", 1, args.subscribers, args.publications, args.open_loop))
        elif name == "topics":
            out.append(
                Scenario(
                    "topics",
                    args.topics,
                    1,
                    args.topic_publications,
                    args.open_loop,
                    sessions=args.topic_sessions,
                )
            )
        elif name == "latency":
            count = int(args.rate * args.seconds)
            out.append(Scenario("latency", 1, 1, count, args.rate))
    return out


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--subscribers", type=int, default=100, help="fanout: subscribers")
    parser.add_argument("--publications", type=int, default=5_000, help="fanout: publications")
    parser.add_argument("--topics", type=int, default=10_000, help="topics: topic count")
    parser.add_argument("--topic-publications", type=int, default=100_000)
    parser.add_argument(
        "--topic-sessions",
        type=int,
        default=100,
        help="topics: subscriber sessions, each subscribed to topics/sessions topics (0: one each)",
    )
    parser.add_argument(
        "--dashboard",
        action="store_true",
        help="run the dashboard beside the mesh (it polls every pod's admin API)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="APEXMESH_NAME=VALUE",
        help="a setting given to every service (repeatable), e.g. APEXMESH_GC_THRESHOLDS=700,10,10",
    )
    parser.add_argument("--rate", type=float, default=2_000.0, help="latency: offered rate")
    parser.add_argument("--seconds", type=float, default=5.0, help="latency: duration")
    parser.add_argument("--content-subscribers", type=int, default=1_000)
    parser.add_argument("--content-publications", type=int, default=5_000)
    parser.add_argument(
        "--open-loop",
        type=float,
        default=None,
        metavar="RATE",
        help="offer fanout and topics publications at RATE/s instead of 100 in flight",
    )
    parser.add_argument(
        "--redis",
        choices=("single", "cluster"),
        default="single",
        help="cluster: run fanout and topics again on a mesh over a six-node Redis Cluster",
    )
    args = parser.parse_args(argv)
    if args.content_subscribers <= 0 or args.content_subscribers % CONTENT_GROUPS:
        # Each publication matches one group of subscribers (g = index mod 100); with
        # groups of unequal size no single expected count per publication would hold.
        parser.error(f"--content-subscribers must be a positive multiple of {CONTENT_GROUPS}")
    chosen = scenarios(args)
    topics = sorted({t for s in chosen for t in s.names})
    if "content" in args.scenario:
        topics += [CONTENT_TOPIC, PLAIN_TOPIC]
    figures: list[dict[str, Any]] = []
    failures = Failures(figures)
    #: The single-Redis mesh's result of each scenario (the cluster's baseline).
    single: dict[str, Result] = {}
    # A development run has no endpoint directory: the generated subscribers are valid
    # addresses (apexmesh/ops/localmesh.py).
    settings = dict(item.split("=", 1) for item in args.set)
    if settings:
        print("settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()), flush=True)
    async with ApexSide(topics, dashboard=args.dashboard, settings=settings) as apex:
        if "content" in args.scenario:
            print(
                f"content: 1 topic x {args.content_subscribers:,} selectors (1 % each), "
                f"{args.content_publications:,} publications, {IN_FLIGHT} in flight",
                flush=True,
            )
            both = await failures.attempt(
                "pubsub_content",
                "apex-mesh",
                run_content(apex, args.content_subscribers, args.content_publications),
                cleanup=apex,
            )
            if both is not None:
                content, base = both
                figures.append(
                    figure("pubsub_content_deliveries", content.rate, "deliveries/s", base.rate)
                )
                figures.append(
                    figure(
                        "pubsub_content_delivered",
                        content.delivered,
                        "deliveries",
                        content.expected,
                    )
                )
        for scenario in chosen:
            print(
                f"{scenario.name}: {scenario.topics:,} topic(s) x "
                f"{scenario.subscribers_per_topic} subscriber(s), "
                f"{scenario.publications:,} publications, "
                + (
                    f"offered at {scenario.rate:,.0f}/s"
                    if scenario.rate
                    else f"{IN_FLIGHT} in flight"
                ),
                flush=True,
            )
            name = f"pubsub_{scenario.name}"
            redis = await failures.scenario(name, scenario.name, "Redis", run_redis(scenario))
            mine = await failures.scenario(
                name, scenario.name, "apex-mesh", run_apex(apex, scenario), cleanup=apex
            )
            if mine is None:
                continue
            single[scenario.name] = mine
            figures.append(figure(f"{name}_delivered", mine.delivered, "deliveries", mine.expected))
            if redis is None:
                continue
            if scenario.name == "latency":
                figures.extend(
                    figure(f"{name}_{key}", mine.latency[key], "ms", redis.latency[key])
                    for key in ("p50", "p99", "p999")
                )
            else:
                figures.append(figure(f"{name}_deliveries", mine.rate, "deliveries/s", redis.rate))
                figures.append(
                    figure(f"{name}_latency_p99", mine.latency["p99"], "ms", redis.latency["p99"])
                )
            figures.append(
                figure(f"{name}_server_cpu", mine.server_us, "us/delivery", redis.server_us)
            )
    if args.redis == "cluster":
        on = [s for s in chosen if s.name in CLUSTER_SCENARIOS]
        await run_on_cluster(on, topics, settings, single, failures)
    print(json.dumps(figures))
    if failures.names:
        raise SystemExit(f"failed: {', '.join(failures.names)}")


#: The scenarios ``--redis cluster`` runs again on the cluster mesh (issue #30).
CLUSTER_SCENARIOS = ("fanout", "topics")


async def run_on_cluster(
    chosen: Sequence[Scenario],
    topics: Sequence[str],
    settings: dict[str, str],
    single: dict[str, Result],
    failures: Failures,
) -> None:
    """``chosen`` on a mesh over a Redis Cluster started here: figures (into
    ``failures.figures``) against the single-Redis mesh's results of the same scenarios,
    where those did not fail."""
    if not chosen:
        return
    cluster = RedisClusterNodes(Path(tempfile.mkdtemp(prefix="apex-bench-cluster-")))
    started = time.perf_counter()
    await asyncio.to_thread(cluster.start)
    print(
        f"Redis Cluster: 3 primaries, 3 replicas, started in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    figures = failures.figures
    try:
        async with ApexSide(topics, settings=settings, cluster=cluster) as apex:
            for scenario in chosen:
                print(f"{scenario.name} on the cluster mesh:", flush=True)
                name = f"pubsub_{scenario.name}_cluster"
                mine = await failures.scenario(
                    name, scenario.name, "cluster", run_apex(apex, scenario), cleanup=apex
                )
                if mine is None:
                    continue
                figures.append(
                    figure(f"{name}_delivered", mine.delivered, "deliveries", mine.expected)
                )
                if ran := mine.node_commands:
                    busiest = max(ran.values()) / (sum(ran.values()) or 1)
                    share = figure(f"{name}_busiest_primary", busiest * 100, "% of commands")
                    figures.append(share)
                if (base := single.get(scenario.name)) is None:
                    continue
                figures += [
                    figure(f"{name}_deliveries", mine.rate, "deliveries/s", base.rate),
                    figure(f"{name}_latency_p99", mine.latency["p99"], "ms", base.latency["p99"]),
                    figure(f"{name}_server_cpu", mine.server_us, "us/delivery", base.server_us),
                ]
    finally:
        await asyncio.to_thread(cluster.stop)


async def run(argv: list[str]) -> None:
    """``main`` with SIGTERM turned into cancellation, so the mesh is always stopped."""
    task = asyncio.ensure_future(main(argv))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    await task


if __name__ == "__main__":
    uvloop.run(run(sys.argv[1:]))
