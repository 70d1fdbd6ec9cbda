"""Robust pubsub benchmark, phase 1: the sequencing and repair path's own cost.

The pubsub service does not serve robust topics yet (docs/robust.md, phase 2), so the
issue's end-to-end bench (100 robust subscribers over two relay pods beside plain topic
fan-out) cannot run. What can be measured now, on a redis-server of the bench's own,
each beside a same-run baseline doing the least the same job needs:

* ``commit``: one sequencer committing publications of 256 octets for 100 subscribers
  (``RobustStore.commit_publication``: owner check, source seq, XADD with retention, 100
  link seqs and link records), 100 commits in flight; baseline: the bare ``XADD`` of the
  same payloads, 100 in flight. Figure: publications/s.
* ``stub``: 100 subscriber stubs taking those deliveries (every 50th lost, then repaired
  by link range from the store's records); baseline: the same stubs when nothing is
  lost. Figure: deliveries/s into the applications (the stub's own cost is the
  baseline's; the ratio is what 2 % loss and its repairs cost).
* ``repair``: one subscriber that missed 10,000 publications asks for them
  (``read_link_range`` + its stub); baseline: one ``XRANGE`` of the same 10,000 entries.
  Figure: ms to repair the gap.

Every scenario prints delivered / expected (each application must hold every
publication once, in order). The last line is JSON: a list of figures (name, value,
unit, baseline, ratio).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import uvloop
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import figure
from loads import IN_FLIGHT, RedisSide, stamp, windowed

from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.robust.elements import (
    RobustInfo,
)
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.stub import Deliver, SendGap, StubEvent, SubscriberStub
from apexmesh.store.keys import Keys
from apexmesh.store.robust import Committed, Retention, RobustStore

DOMAIN, TOPIC = "example.com", "bench.robust"
SOURCE = "publisher@example.com"
RES = Resolution.BITS32


def subscribers(count: int) -> list[str]:
    return [f"sub{n}@example.com" for n in range(count)]


async def commit_all(
    store: RobustStore, names: list[str], count: int, retention: Retention
) -> tuple[float, dict[int, Committed]]:
    committed: dict[int, Committed] = {}
    subs = [(name, True) for name in names]

    async def one(index: int) -> None:
        committed[index] = await store.commit_publication(
            DOMAIN,
            TOPIC,
            source=SOURCE,
            payload=stamp(index, time.perf_counter()),
            now_ms=int(time.time() * 1000),
            resolution=RES,
            retention=retention,
            subscribers=subs,
        )

    # One sequencer: commits of one topic are ordered, so they go one after the other
    # on the wire (pipelined by redis-py's pool) with IN_FLIGHT outstanding.
    started = time.perf_counter()
    await windowed(one, count, IN_FLIGHT)
    return time.perf_counter() - started, committed


async def xadd_all(redis: Redis, key: str, count: int) -> float:
    async def one(index: int) -> None:
        await redis.xadd(key, {"payload": stamp(index, time.perf_counter())})

    started = time.perf_counter()
    await windowed(one, count, IN_FLIGHT)
    return time.perf_counter() - started


async def serve(
    store: RobustStore, subscriber: str, events: list[StubEvent], stub: SubscriberStub
) -> list[int]:
    """Carry out a stub's events: deliveries to its application (their source seqs),
    gaps from the store."""
    delivered: list[int] = []
    pending = list(events)
    while pending:
        event = pending.pop(0)
        if isinstance(event, Deliver):
            delivered.append(event.publication.source_seq)
        elif isinstance(event, SendGap):
            request = event.request
            assert request.link_from is not None
            rows = await store.read_link_range(
                DOMAIN,
                TOPIC,
                subscriber,
                first=request.link_from,
                last=request.link_to,
                epoch=request.link_epoch,
                resolution=RES,
            )
            now = int(time.monotonic() * 1000)
            for seq, entry in rows:
                assert entry is not None
                info = RobustInfo(
                    link_seq=seq,
                    link_epoch=request.link_epoch,
                    source_seq=entry.source_seq,
                    source=Endpoint.parse(entry.source),
                )
                pending.extend(stub.receive(info, entry.payload, now))
    return delivered


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publications", type=int, default=5_000)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--gap", type=int, default=10_000)
    args = parser.parse_args(argv)
    figures: list[dict[str, Any]] = []
    async with RedisSide() as side:
        redis = Redis(host="127.0.0.1", port=side.port)
        keys = Keys(prefix="bench")
        store = RobustStore(redis, keys, "bench")
        assert await store.own(DOMAIN, TOPIC, 600_000)
        names = subscribers(args.subscribers)
        retention = Retention(
            count=max(args.gap, args.publications) * 2, ms=3_600_000, link_ttl_ms=600_000
        )

        # --- commit
        base_s = await xadd_all(redis, "bench:baseline:stream", args.publications)
        mine_s, committed = await commit_all(store, names, args.publications, retention)
        ok = sum(1 for c in committed.values() if all(link is not None for link in c.links))
        print(
            f"commit: {args.publications:,} publications x {args.subscribers} subscribers: "
            f"robust {args.publications / mine_s:,.0f}/s, "
            f"bare XADD {args.publications / base_s:,.0f}/s; "
            f"committed with every link numbered {ok:,}/{args.publications:,}",
            flush=True,
        )
        figures.append(
            figure(
                "robust_commit",
                args.publications / mine_s,
                "publications/s",
                args.publications / base_s,
            )
        )
        figures.append(figure("robust_commit_numbered", ok, "publications", args.publications))

        # --- stub: deliveries in link order (the order commits were numbered) into 100
        # stubs; baseline: every delivery arrives. Measured: every 50th lost on every
        # link (never the last: nothing would follow to show it) and repaired by link
        # range from the store's records.
        order = sorted(committed, key=lambda i: committed[i].links[0].seq)  # type: ignore[union-attr]
        total = args.publications * args.subscribers

        async def feed(lose: bool) -> tuple[float, int]:
            started = time.perf_counter()
            complete = 0
            for column, name in enumerate(names):
                stub = SubscriberStub(TOPIC, resolution=RES, heartbeat_ms=60_000, now_ms=0)
                got: list[int] = []
                for position, index in enumerate(order):
                    if lose and position % 50 == 49 and position < len(order) - 1:
                        continue
                    c = committed[index]
                    link = c.links[column]
                    assert link is not None
                    info = RobustInfo(
                        link_seq=link.seq,
                        link_epoch=link.epoch,
                        source_seq=c.source_seq,
                        source=Endpoint.parse(SOURCE),
                    )
                    events = stub.receive(info, b"%d" % c.source_seq, 0)
                    got += await serve(store, name, events, stub)
                complete += got == [committed[i].source_seq for i in order]
            return time.perf_counter() - started, complete

        base_stub, base_complete = await feed(lose=False)
        mine_stub, complete = await feed(lose=True)
        print(
            f"stub: {total:,} deliveries into {args.subscribers} stubs: "
            f"1 in 50 lost and repaired by link range {total / mine_stub:,.0f}/s, "
            f"none lost {total / base_stub:,.0f}/s; "
            f"applications complete, in order, once: {complete}/{args.subscribers} "
            f"(none lost: {base_complete}/{args.subscribers})",
            flush=True,
        )
        figures.append(
            figure("robust_stub_deliveries", total / mine_stub, "deliveries/s", total / base_stub)
        )
        figures.append(figure("robust_stub_complete", complete, "subscribers", args.subscribers))

        # --- repair: a subscriber that missed `gap` publications.
        late = "late@example.com"
        gap_store = RobustStore(redis, Keys(prefix="bench-gap"), "bench")
        assert await gap_store.own(DOMAIN, TOPIC, 600_000)
        _, gap_commits = await commit_all(gap_store, [late], args.gap + 1, retention)
        stream = gap_store.keys.stream(DOMAIN, TOPIC)
        started = time.perf_counter()
        floor = await redis.xrange(stream, "-", "+", count=args.gap)
        base_repair = time.perf_counter() - started
        last = max(gap_commits.values(), key=lambda c: c.source_seq)
        link = last.links[0]
        assert link is not None
        stub = SubscriberStub(TOPIC, resolution=RES, heartbeat_ms=60_000, now_ms=0)
        info = RobustInfo(
            link_seq=link.seq,
            link_epoch=link.epoch,
            source_seq=last.source_seq,
            source=Endpoint.parse(SOURCE),
        )
        started = time.perf_counter()
        repaired = await serve(gap_store, late, stub.receive(info, b"last", 0), stub)
        mine_repair = time.perf_counter() - started
        expected = args.gap + 1
        in_order = repaired == list(range(1, expected + 1))
        print(
            f"repair: a gap of {args.gap:,} publications repaired in {mine_repair * 1000:,.0f} ms "
            f"(one XRANGE of them: {base_repair * 1000:,.0f} ms, {len(floor):,} entries); "
            f"delivered {len(repaired):,}/{expected:,}, in order: {in_order}",
            flush=True,
        )
        figures.append(figure("robust_repair_gap", mine_repair * 1000, "ms", base_repair * 1000))
        figures.append(figure("robust_repair_delivered", len(repaired), "publications", expected))
        await redis.aclose()
    print(json.dumps(figures))


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1:]))
