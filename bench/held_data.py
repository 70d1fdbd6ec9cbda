"""Held data (RFC 3342 hold4Endpoint): messages held and drained per second through
``apexmesh.store.held``, beside a same-run baseline of plain Redis list pipelines.

Setup: a real redis-server started on a free loopback port (AOF on, as the tests run it);
10,000 messages of 256 octets for one endpoint.

Figures (messages per second):

* ``hold``: ``HeldStore.hold`` (one Lua script per message: quota checks, id, queue,
  payload, meta, usage counters, per-domain oldest index, deadline index), DEPTH
  holds in flight as a relay with many senders would have them;
  baseline ``rpush_pipelined``: redis-py pipelines of DEPTH ``RPUSH`` of the same
  payloads (no quota, no index, no id: the floor for "put a message in Redis");
* ``hold_pipelined``: ``HeldStore.hold_many`` with DEPTH holds per round trip (the same
  script per message, pipelined like the baseline);
* ``drain``: what a drainer does on attach: ``read`` BATCH entries in order, then ``ack``
  them by id (one script each), until empty;
  baseline ``lpop_pipelined``: pipelines of DEPTH ``LPOP``.

Through the running relays (``apexmesh.ops.localmesh.LocalMesh(dev=True)``, every
service its own process, as bench/relay_throughput.py starts it; example.com's two relay
pods share one redis-server):

* ``mesh_hold``: fred, attached to pod 1 with the SDK, sends 10,000 data of 256 octets
  with ``hold=True`` to an endpoint attached nowhere, DEPTH sends in flight; counted when
  every send got ``ok`` (the relay answers ``ok`` once the data is in Redis), from the
  first send; baseline ``rpush_pipelined`` as above;
* ``mesh_drain``: the endpoint then attaches on pod 2; from the attach request until the
  10,000th data is received (in order: checked); baseline ``lpop_pipelined``.

Run: ``.venv/bin/python bench/held_data.py [--quick]`` (``--no-mesh``: the store figures
only). The last line of output is JSON:
a list of figures with name, value, unit, and baseline/ratio where one applies.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from figures import figure  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from apexmesh.aio.tasks import within  # noqa: E402
from apexmesh.apex.holding import HoldLimits  # noqa: E402
from apexmesh.client import ApexClient, Attachment, connect_endpoint  # noqa: E402
from apexmesh.ops.localmesh import LocalMesh  # noqa: E402
from apexmesh.store.held import HeldStore, HoldRequest  # noqa: E402
from apexmesh.store.keys import Keys  # noqa: E402

MESSAGES = 10_000
SIZE = 256
DEPTH = 256  # operations in flight (holds) or per pipeline (baseline)
BATCH = 256  # entries read and acknowledged at a time when draining
ENDPOINT = "barney@example.com"
DOMAIN = "example.com"
T0 = 1_700_000_000_000


async def hold_all(store: HeldStore, payloads: list[bytes], limits: HoldLimits) -> float:
    started = time.perf_counter()
    for start in range(0, len(payloads), DEPTH):
        results = await asyncio.gather(
            *(
                store.hold(ENDPOINT, DOMAIN, p, now=T0, deadline=T0 + 3_600_000, limits=limits)
                for p in payloads[start : start + DEPTH]
            )
        )
        assert all(isinstance(r, int) for r in results), results[:3]
    return len(payloads) / (time.perf_counter() - started)


async def hold_pipelined(store: HeldStore, payloads: list[bytes], limits: HoldLimits) -> float:
    started = time.perf_counter()
    for start in range(0, len(payloads), DEPTH):
        requests = [
            HoldRequest(
                endpoint=ENDPOINT, domain=DOMAIN, payload=p, now=T0, deadline=T0 + 3_600_000
            )
            for p in payloads[start : start + DEPTH]
        ]
        results = await store.hold_many(requests, limits=limits)
        assert all(isinstance(r, int) for r in results), results[:3]
    return len(payloads) / (time.perf_counter() - started)


async def drain_all(store: HeldStore, expected: int) -> float:
    started = time.perf_counter()
    drained = 0
    assert await store.claim_drain(ENDPOINT, "bench") is None
    while batch := await store.read(ENDPOINT, limit=BATCH):
        drained += len(batch)
        await store.ack(ENDPOINT, [entry.id for entry in batch])
    await store.release_drain(ENDPOINT, "bench")
    elapsed = time.perf_counter() - started
    assert drained == expected, drained
    return drained / elapsed


async def rpush_all(redis: Redis, key: str, payloads: list[bytes]) -> float:
    started = time.perf_counter()
    for start in range(0, len(payloads), DEPTH):
        async with redis.pipeline(transaction=False) as pipe:
            for payload in payloads[start : start + DEPTH]:
                pipe.rpush(key, payload)
            await pipe.execute()
    return len(payloads) / (time.perf_counter() - started)


async def lpop_all(redis: Redis, key: str, expected: int) -> float:
    started = time.perf_counter()
    popped = 0
    while True:
        async with redis.pipeline(transaction=False) as pipe:
            for _ in range(DEPTH):
                pipe.lpop(key)
            got = [item for item in await pipe.execute() if item is not None]
        popped += len(got)
        if len(got) < DEPTH:
            break
    elapsed = time.perf_counter() - started
    assert popped == expected, popped
    return popped / elapsed


async def mesh_hold(fred: Attachment, endpoint: str, payloads: list[bytes]) -> float:
    """Every payload sent with hold=True, DEPTH in flight, until every one got ok."""
    window = asyncio.Semaphore(DEPTH)

    async def one(payload: bytes) -> None:
        try:
            await fred.send(endpoint, payload, hold=True)  # raises unless ok
        finally:
            window.release()

    started = time.perf_counter()
    sends = []
    for payload in payloads:
        await window.acquire()  # a sliding window; MSGs leave in this order
        sends.append(asyncio.ensure_future(one(payload)))
    await asyncio.gather(*sends)
    return len(payloads) / (time.perf_counter() - started)


async def mesh_drain(port: int, endpoint: str, payloads: list[bytes]) -> tuple[float, ApexClient]:
    """Attach on ``port``; until the last held data is received, in order."""
    client = await connect_endpoint("127.0.0.1", port)
    started = time.perf_counter()
    attachment = await client.attach(endpoint)
    for index, payload in enumerate(payloads):
        got = await within(attachment.receive(), 60)
        assert got.content == payload, (index, got.content[:16])
    elapsed = time.perf_counter() - started
    return len(payloads) / elapsed, client


async def through_mesh(payloads: list[bytes], rounds: int) -> tuple[list[float], list[float]]:
    """Held and drained per second through the relays, one round per recipient."""
    holds: list[float] = []
    drains: list[float] = []
    mesh = LocalMesh(Path(tempfile.mkdtemp(prefix="apex-held-bench-")), dev=True)
    await mesh.start()
    clients: list[ApexClient] = []
    try:
        pod1, pod2 = mesh.relay("example.com", 0), mesh.relay("example.com", 1)
        sender = await connect_endpoint("127.0.0.1", pod1.edge_port)
        clients.append(sender)
        fred = await sender.attach("fred@example.com")
        # warm-up: connections, access decisions, Lua scripts loaded in the relays
        await mesh_hold(fred, "dino@example.com", payloads[:200])
        _, client = await mesh_drain(pod2.edge_port, "dino@example.com", payloads[:200])
        await client.close()
        for n in range(rounds):
            # a fresh endpoint each round: the last one is still attached
            endpoint = ("barney@example.com", "dino@example.com", "barney@example.com")[n]
            holds.append(await mesh_hold(fred, endpoint, payloads))
            rate, client = await mesh_drain(pod2.edge_port, endpoint, payloads)
            drains.append(rate)
            await client.close()
    finally:
        for client in clients:
            await client.close()
        await mesh.stop()
    return holds, drains


async def run(quick: bool, with_mesh: bool = True) -> list[dict[str, Any]]:
    rounds = 1 if quick else 3
    support = importlib.import_module("tests.support.redis_server")
    payloads = [(b"%08d" % i).ljust(SIZE, b".") for i in range(MESSAGES)]
    limits = HoldLimits()  # the defaults a relay starts with (quotas on)
    holds: list[float] = []
    drains: list[float] = []
    pushes: list[float] = []
    pops: list[float] = []
    piped: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = support.RedisServer(Path(tmp))
        server.start()
        redis = Redis.from_url(server.url, max_connections=DEPTH + 8)
        try:
            for n in range(rounds):
                # Alternate which goes first so neither always gets the warmer server.
                store = HeldStore(redis, Keys(f"bench{n}"))
                key = f"bench{n}:baseline"
                if n % 2 == 0:
                    pushes.append(await rpush_all(redis, key, payloads))
                    pops.append(await lpop_all(redis, key, MESSAGES))
                holds.append(await hold_all(store, payloads, limits))
                drains.append(await drain_all(store, MESSAGES))
                piped.append(await hold_pipelined(store, payloads, limits))
                drains.append(await drain_all(store, MESSAGES))
                if n % 2 == 1:
                    pushes.append(await rpush_all(redis, key, payloads))
                    pops.append(await lpop_all(redis, key, MESSAGES))
                # The drain delivered in order: nothing left behind.
                assert await store.usage(ENDPOINT) == (0, 0)
        finally:
            await redis.aclose()
            server.stop()
    best = max
    mesh_holds, mesh_drains = await through_mesh(payloads, rounds) if with_mesh else ([], [])
    rows = [
        figure("hold", best(holds), "messages/s", best(pushes)),
        figure("hold_pipelined", best(piped), "messages/s", best(pushes)),
        figure("drain", best(drains), "messages/s", best(pops)),
        *(
            [
                figure("mesh_hold", best(mesh_holds), "messages/s", best(pushes)),
                figure("mesh_drain", best(mesh_drains), "messages/s", best(pops)),
            ]
            if with_mesh
            else []
        ),
        figure("rpush_pipelined_baseline", best(pushes), "messages/s"),
        figure("lpop_pipelined_baseline", best(pops), "messages/s"),
    ]
    print(f"{MESSAGES} messages of {SIZE} octets, best of {rounds} round(s), depth {DEPTH}")
    for row in rows:
        extra = f"  (baseline {row['baseline']}, ratio {row['ratio']})" if "ratio" in row else ""
        print(f"{row['name']:>26}: {row['value']:>10} {row['unit']}{extra}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="one round instead of three")
    parser.add_argument("--no-mesh", action="store_true", help="the store figures only")
    args = parser.parse_args()
    rows = asyncio.run(run(args.quick, with_mesh=not args.no_mesh))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
