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

Run: ``.venv/bin/python bench/held_data.py [--quick]``. The last line of output is JSON:
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

from redis.asyncio import Redis  # noqa: E402

from apexmesh.apex.holding import HoldLimits  # noqa: E402
from apexmesh.store.held import HeldStore, HoldRequest  # noqa: E402
from apexmesh.store.keys import Keys  # noqa: E402

MESSAGES = 10_000
SIZE = 256
DEPTH = 256  # operations in flight (holds) or per pipeline (baseline)
BATCH = 256  # entries read and acknowledged at a time when draining
ENDPOINT = "barney@example.com"
DOMAIN = "example.com"
T0 = 1_700_000_000_000


def result(name: str, value: float, unit: str, baseline: float | None = None) -> dict[str, Any]:
    figure: dict[str, Any] = {"name": name, "value": round(value, 1), "unit": unit}
    if baseline:
        figure["baseline"] = round(baseline, 1)
        figure["ratio"] = round(value / baseline, 3)
    return figure


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


async def run(quick: bool) -> list[dict[str, Any]]:
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
    rows = [
        result("hold", best(holds), "messages/s", best(pushes)),
        result("hold_pipelined", best(piped), "messages/s", best(pushes)),
        result("drain", best(drains), "messages/s", best(pops)),
        result("rpush_pipelined_baseline", best(pushes), "messages/s"),
        result("lpop_pipelined_baseline", best(pops), "messages/s"),
    ]
    print(f"{MESSAGES} messages of {SIZE} octets, best of {rounds} round(s), depth {DEPTH}")
    for row in rows:
        extra = f"  (baseline {row['baseline']}, ratio {row['ratio']})" if "ratio" in row else ""
        print(f"{row['name']:>26}: {row['value']:>10} {row['unit']}{extra}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="one round instead of three")
    args = parser.parse_args()
    rows = asyncio.run(run(args.quick))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
