"""Relay benchmark: point-to-point data through the mesh, beside Redis in the same run.

Starts the local mesh (apexmesh.ops.localmesh) as processes in a development run (plain
BEEP, no SASL) and a redis-server of its own on a free port, attaches a sender to
example.com's pod 1 and a receiver to pod 2 (the other pod: one gRPC hop more; ``--same-
pod`` for pod 1), each its own BEEP session, and measures:

* ``p2p``: 200,000 data of 256 octets from the sender to the receiver, 100 in flight
  (the relay's ``ok`` answers one, once the copy is in custody), counted when the
  receiver has them; baseline: Redis PUBLISH to one subscriber connection, pipelines of
  100 on one publisher connection;
* ``latency``: data offered at 2,000/s for 5 s (open loop: each data's latency counts
  from when it was due); p50 / p99 / p99.9; baseline: PUBLISH at the same rate;
* CPU per data (user + system, microseconds) of the sender's relay pod, the receiver's
  pod and this process (both endpoints): on a 2-core machine they share the cores.

Both endpoints of each system run in this process (uvloop). Every scenario prints
delivered / expected and checks that every data answered ``ok`` arrived. Targets: p2p
>= 0.4 of Redis's deliveries/s, p99 at 2,000/s <= 2x Redis's. ``--echo`` adds the raw BEEP
echo of bench/beep_frames.py as a figure (the relay's earlier baseline). The last line of
output is JSON: a list of figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

from beep_frames import loopback_echo
from figures import figure
from loads import IN_FLIGHT, RedisSide, Tally, cpu_seconds, offered, stamp, windowed

from apexmesh.client import Attachment, connect_endpoint
from apexmesh.ops.localmesh import LocalMesh

CHANNEL = "p2p"


def pid_of(mesh: LocalMesh, name: str) -> int:
    """The process id of the mesh's child ``name``."""
    child = next(c for c in mesh.children if c.name == name)
    assert child.process is not None
    return child.process.pid


async def run(
    name: str,
    tally: Tally,
    publish: Callable[[], Awaitable[list[int]]],
) -> tuple[float, dict[str, float]]:
    """Publish, wait for the deliveries, print delivered / expected; (rate, latency)."""
    started = time.perf_counter()
    acknowledged = await publish()
    await tally.drained()
    elapsed = (tally.last or time.perf_counter()) - started
    rate = tally.delivered / elapsed if elapsed > 0 else 0.0
    missing = tally.missing(acknowledged)
    latency = tally.summary()
    print(
        f"  {name:>9}: {rate:>9,.0f} data/s; delivered {tally.delivered:,} / expected "
        f"{len(acknowledged):,} acknowledged ({len(missing)} missing, "
        f"{tally.duplicates()} twice); p50 {latency['p50']:.2f} ms, p99 {latency['p99']:.2f}"
        f" ms, p99.9 {latency['p999']:.2f} ms",
        flush=True,
    )
    if missing:
        raise SystemExit(f"{name}: acknowledged data were not delivered")
    return rate, latency


async def reader(attachment: Attachment, tally: Tally) -> None:
    while True:
        tally.seen((await attachment.receive()).content)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000, help="p2p: data")
    parser.add_argument("--rate", type=float, default=2_000.0, help="latency: offered rate")
    parser.add_argument("--seconds", type=float, default=5.0, help="latency: duration")
    parser.add_argument("--same-pod", action="store_true", help="receiver on the sender's pod")
    parser.add_argument("--echo", action="store_true", help="add the raw BEEP echo figure")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="APEXMESH_NAME=VALUE",
        help="a setting given to every service (repeatable), e.g. APEXMESH_RELAY_SEQ_STEP=0.5",
    )
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    offered_count = int(args.rate * args.seconds)
    figures: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ Redis
    results: dict[str, Any] = {}
    async with RedisSide() as redis:
        print(f"p2p: {args.count:,} data, {IN_FLIGHT} in flight", flush=True)
        tally = Tally([1] * args.count)
        await redis.subscribe([CHANNEL], tally)
        results["redis_p2p"] = await run(
            "Redis",
            tally,
            lambda: redis.publish_windowed(lambda _i: CHANNEL, args.count, IN_FLIGHT),
        )
        await redis.unsubscribe_all()
        tally = Tally([1] * offered_count)
        await redis.subscribe([CHANNEL], tally)
        print(f"latency: {offered_count:,} data offered at {args.rate:,.0f}/s", flush=True)
        results["redis_latency"] = await run(
            "Redis",
            tally,
            lambda: offered(
                lambda i, due: redis.publish_one(CHANNEL, i, due), offered_count, args.rate
            ),
        )

    # ------------------------------------------------------------------ apex-mesh
    mesh = LocalMesh(
        Path(tempfile.mkdtemp(prefix="apex-bench-")), dev=True, dashboard=False, settings=settings
    )
    await mesh.start()
    clients = []
    try:
        pod1 = mesh.relay("example.com", 0)
        other = pod1 if args.same_pod else mesh.relay("example.com", 1)
        sender_client = await connect_endpoint("127.0.0.1", pod1.edge_port)
        receiver_client = await connect_endpoint("127.0.0.1", other.edge_port)
        clients = [sender_client, receiver_client]
        sender = await sender_client.attach("fred@example.com")
        receiver = await receiver_client.attach("barney@example.com")
        target = str(receiver.endpoint)
        pids = {
            "sender_pod": pid_of(mesh, pod1.name),
            "receiver_pod": pid_of(mesh, other.name),
            "endpoints": os.getpid(),
        }
        warm = Tally([1] * 500)  # connections, caches
        task = asyncio.ensure_future(reader(receiver, warm))
        await windowed(lambda i: sender.submit(target, stamp(i, time.perf_counter())), 500, 100)
        await warm.drained(30)
        task.cancel()

        print(f"p2p: {args.count:,} data, {IN_FLIGHT} in flight", flush=True)
        tally = Tally([1] * args.count)
        task = asyncio.ensure_future(reader(receiver, tally))
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        results["apex_p2p"] = await run(
            "apex-mesh",
            tally,
            lambda: windowed(
                lambda i: sender.submit(target, stamp(i, time.perf_counter())),
                args.count,
                IN_FLIGHT,
            ),
        )
        cpu = {
            name: (cpu_seconds(pid) - before[name]) / args.count * 1e6 for name, pid in pids.items()
        }
        task.cancel()
        print(
            "  CPU per data: " + ", ".join(f"{name} {us:.0f} us" for name, us in cpu.items()),
            flush=True,
        )
        figures += [figure(f"relay_p2p_cpu_{name}", us, "us/data") for name, us in cpu.items()]

        print(f"latency: {offered_count:,} data offered at {args.rate:,.0f}/s", flush=True)
        tally = Tally([1] * offered_count)
        task = asyncio.ensure_future(reader(receiver, tally))
        results["apex_latency"] = await run(
            "apex-mesh",
            tally,
            lambda: offered(
                lambda i, due: sender.send(target, stamp(i, due)), offered_count, args.rate
            ),
        )
        task.cancel()
    finally:
        for client in clients:
            await client.close()
        await mesh.stop()

    label = "same_pod" if args.same_pod else "other_pod"
    apex_rate, redis_rate = results["apex_p2p"][0], results["redis_p2p"][0]
    figures.append(figure(f"relay_p2p_{label}_throughput", apex_rate, "data/s", redis_rate))
    lat, base = results["apex_latency"][1], results["redis_latency"][1]
    figures += [
        figure(f"relay_p2p_{label}_latency_{key}", lat[key], "ms", base[key])
        for key in ("p50", "p99", "p999")
    ]
    if args.echo:
        echo = await loopback_echo(2 * 5_000)
        figures.append(figure("raw_beep_echo", echo, "exchanges/s"))
    print(json.dumps(figures))


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1:]))
