"""Pubsub fan-out benchmark: one publisher, 1,000 subscribers, beside Redis PUBLISH.

Starts the local mesh (apexmesh.ops.localmesh) as processes in a development run (plain
BEEP, no SASL; one pubsub pod behind each relay pod), attaches 1,000 subscribers to
``apex=pubsub/demo.news@example.com``, half on each of example.com's two relay pods, and
one publisher on pod 1, then publishes 256-octet messages (draft-schwartz-apex-pubsub
section 3: one data element per publication; the pubsub service sends one data element
back naming every subscriber and the relays replicate it, one data element per BEEP
session naming the subscribers attached over it: RFC 3340 4.4.4.1 grouping, which
``--per-session 1`` leaves nothing to do). It measures:

* deliveries per second: publications x subscribers, counted when every subscriber has
  every publication, from the first publish, with at most 4 publications not yet
  delivered everywhere (closed loop: the publisher's ``ok`` comes before the deliveries,
  so an open loop would only measure how fast queues grow);
* p99 publish-to-delivery latency over every delivery of that run (the content carries
  the send time);
* baseline, same run: Redis PUBLISH of the same messages on one channel to 1,000
  redis-py (asyncio) subscribers, each its own connection, same measurements.

The subscribers of both runs live in this process (one event loop, uvloop), so each
side pays the same client-side cost per delivery. Target of the pubsub issue: apex-mesh
delivers at least as many messages per second as the Redis baseline. The last line of
output is JSON: a list of figures (name, value, unit, and baseline and ratio where there
is one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop
from redis.asyncio import Redis

from apexmesh.apex.elements import Reply
from apexmesh.client import ApexClient, Attachment, connect_endpoint
from apexmesh.client.outgoing import XmlContent
from apexmesh.client.pubsub import pubsub_message
from apexmesh.ops.localmesh import DEMO_TOPIC, LocalMesh, free_port
from apexmesh.pubsub.elements import Subscribe, topic_endpoint

CONTENT_OCTETS = 256
#: Publications not yet delivered to every subscriber (each is 1,000 deliveries).
DEPTH = 4
#: Attachments per BEEP session of the subscribers (an application process serving many
#: users attaches them over one session; ``--per-session 1`` gives each its own session,
#: which the relay cannot group: RFC 3340 4.4.4.1 groups recipients per channel).
PER_SESSION = 10


def result(name: str, value: float, unit: str, baseline: float | None = None) -> dict[str, Any]:
    figure: dict[str, Any] = {"name": name, "value": round(value, 2), "unit": unit}
    if baseline:
        figure["baseline"] = round(baseline, 2)
        figure["ratio"] = round(value / baseline, 3)
    return figure


def message(index: int) -> bytes:
    stamp = f"{time.perf_counter():<24.9f}{index:<8}".encode()
    return stamp + b"x" * (CONTENT_OCTETS - len(stamp))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def p99(samples: list[float]) -> float:
    samples.sort()
    return samples[max(0, int(len(samples) * 0.99) - 1)] * 1000


class LostDeliveriesError(RuntimeError):
    """Not every delivery arrived in time."""


async def measure(
    publish: Callable[[bytes], Awaitable[object]],
    receivers: list[Callable[[], Awaitable[bytes]]],
    count: int,
    *,
    deadline: float = 120.0,
) -> tuple[float, float]:
    """(deliveries per second, p99 latency in ms) of ``count`` publications; raises
    LostDeliveriesError when some have not arrived ``deadline`` seconds after the first
    publish.

    Closed loop: at most :data:`DEPTH` publications are out that have not reached every
    subscriber yet (the publisher's ``ok`` comes long before the deliveries, so an open
    loop would only measure how fast queues grow)."""
    latencies: list[float] = []
    remaining = [len(receivers)] * count
    window = asyncio.Semaphore(DEPTH)

    async def drain(receive: Callable[[], Awaitable[bytes]]) -> None:
        for _ in range(count):
            content = await receive()
            try:
                sent, index = float(content[:24]), int(content[24:32])
            except ValueError:
                continue  # not a publication (a late reply): not counted
            latencies.append(time.perf_counter() - sent)
            remaining[index] -= 1
            if remaining[index] == 0:
                window.release()

    draining = [asyncio.ensure_future(drain(r)) for r in receivers]
    started = time.perf_counter()
    sends = []
    for index in range(count):
        await asyncio.wait_for(window.acquire(), deadline)
        sends.append(asyncio.ensure_future(publish(message(index))))
    await asyncio.gather(*sends)
    _done, pending = await asyncio.wait(draining, timeout=deadline)
    for task in pending:
        task.cancel()
    if pending:
        expected = count * len(receivers)
        raise LostDeliveriesError(f"{expected - len(latencies)} of {expected} deliveries missing")
    elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, p99(latencies)


# --------------------------------------------------------------------------- apex-mesh


async def subscribe(attachment: Attachment, trans_id: int) -> None:
    op = Subscribe(
        subscriber=attachment.endpoint, topic=DEMO_TOPIC, trans_id=trans_id, duration=3600
    )
    await attachment.send("apex=pubsub@example.com", XmlContent(op.to_xml()))
    while True:
        answer = pubsub_message(await attachment.receive())
        if isinstance(answer, Reply):
            if answer.code != 250:
                raise RuntimeError(f"{attachment.endpoint}: subscribe answered {answer.code}")
            return


async def apex_run(
    subscribers: int, count: int, warmup: int, per_session: int = PER_SESSION
) -> tuple[float, float]:
    mesh = LocalMesh(Path(tempfile.mkdtemp(prefix="apex-bench-pubsub-")), dev=True)
    await mesh.start()
    clients: list[ApexClient] = []
    try:
        pods = [mesh.relay("example.com", 0), mesh.relay("example.com", 1)]
        publisher_client = await connect_endpoint("127.0.0.1", pods[0].edge_port)
        clients.append(publisher_client)
        fred = await publisher_client.attach("fred@example.com")
        await fred.send(
            "apex=pubsub@example.com", XmlContent(b"<createtopic topic='demo.news' transID='1' />")
        )
        attachments: list[Attachment] = []
        for session in range((subscribers + per_session - 1) // per_session):
            pod = pods[session % 2]
            client = await connect_endpoint("127.0.0.1", pod.edge_port)
            clients.append(client)
            size = min(per_session, subscribers - session * per_session)
            attachments += await asyncio.gather(
                *(client.attach(f"sub{session}-{i}@example.com") for i in range(size))
            )
        for start in range(0, len(attachments), 100):
            await asyncio.gather(*(subscribe(a, 1) for a in attachments[start : start + 100]))
        print(
            f"apex-mesh: {len(attachments)} subscribers on two relay pods, "
            f"{per_session} per BEEP session",
            flush=True,
        )
        topic = str(topic_endpoint(DEMO_TOPIC, "example.com"))

        async def publish(content: bytes) -> object:
            return await fred.send(topic, content)

        def receiver(attachment: Attachment) -> Callable[[], Awaitable[bytes]]:
            async def receive() -> bytes:
                return (await attachment.receive()).content

            return receive

        receivers = [receiver(a) for a in attachments]
        await measure(publish, receivers, warmup)
        pids = {c.name: c.process.pid for c in mesh.children if c.process is not None}
        pids["subscribers+publisher"] = os.getpid()
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        started = time.perf_counter()
        rate, latency = await measure(publish, receivers, count)
        elapsed = time.perf_counter() - started
        busy = {name: (cpu_seconds(pid) - before[name]) / elapsed for name, pid in pids.items()}
        print(
            "apex-mesh CPU (cores busy during the run): "
            + ", ".join(f"{name} {load:.2f}" for name, load in busy.items() if load >= 0.01),
            flush=True,
        )
        return rate, latency
    finally:
        for client in clients:
            await client.close()
        await mesh.stop()


# --------------------------------------------------------------------------- redis


async def redis_run(subscribers: int, count: int, warmup: int) -> tuple[float, float]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (scripts/install installs it)")
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        binary,
        *("--bind", "127.0.0.1", "--port", str(port), "--save", "", "--maxclients", "4096"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    connections: list[Redis] = []
    try:
        publisher = Redis(host="127.0.0.1", port=port)
        connections.append(publisher)
        for _ in range(200):
            try:
                await publisher.ping()
                break
            except OSError:
                await asyncio.sleep(0.05)
        channels = []
        for _ in range(subscribers):
            connection = Redis(host="127.0.0.1", port=port)
            connections.append(connection)
            pubsub = connection.pubsub(ignore_subscribe_messages=True)
            await pubsub.subscribe("demo.news")
            channels.append(pubsub)
        while await publisher.pubsub_numsub("demo.news") != [(b"demo.news", subscribers)]:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        print(f"redis: {subscribers} redis-py subscribers", flush=True)

        async def publish(content: bytes) -> object:
            return await publisher.publish("demo.news", content)

        def receiver(channel: Any) -> Callable[[], Awaitable[bytes]]:
            async def receive() -> bytes:
                while True:
                    item = await channel.get_message(timeout=None)
                    if item is not None and item["type"] == "message":
                        return bytes(item["data"])

            return receive

        receivers = [receiver(c) for c in channels]
        await measure(publish, receivers, warmup)
        rate = await measure(publish, receivers, count)
        for channel in channels:
            await channel.aclose()
        return rate
    finally:
        for connection in connections:
            await connection.aclose()
        server.terminate()
        await server.wait()


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--count", type=int, default=100, help="publications measured")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument(
        "--per-session", type=int, default=PER_SESSION, help="subscribers per BEEP session"
    )
    args = parser.parse_args(argv)
    redis_rate, redis_p99 = await redis_run(args.subscribers, args.count, args.warmup)
    print(f"redis PUBLISH: {redis_rate:,.0f} deliveries/s, p99 {redis_p99:.1f} ms", flush=True)
    apex_rate, apex_p99 = await apex_run(
        args.subscribers, args.count, args.warmup, args.per_session
    )
    print(
        f"apex-mesh pubsub: {apex_rate:,.0f} deliveries/s ({apex_rate / redis_rate:.0%} of "
        f"Redis), p99 {apex_p99:.1f} ms",
        flush=True,
    )
    print(
        json.dumps(
            [
                result("pubsub_fanout_deliveries", apex_rate, "deliveries/s", redis_rate),
                result("pubsub_fanout_latency_p99", apex_p99, "ms", redis_p99),
                result("redis_publish_deliveries", redis_rate, "deliveries/s"),
                result("redis_publish_latency_p99", redis_p99, "ms"),
            ]
        )
    )


async def run(argv: list[str]) -> None:
    """``main`` with SIGTERM turned into cancellation, so the mesh is always stopped."""
    task = asyncio.ensure_future(main(argv))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    await task


if __name__ == "__main__":
    uvloop.run(run(sys.argv[1:]))
