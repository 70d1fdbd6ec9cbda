"""The snapshot job at 1, 3 and 10 million events, incremental runs, and a pod's start.

1. Events: ``N`` generated log entries (schema v2: topic creations, subscriptions
   created, renewed and ended, some leases already over, a few topics deleted and
   created again; about N/3 subscription identities) written by duckdb as the files the
   exporter writes (``spark/export.py``: ``events/<first>-<last>.parquet``, a million
   events a file), in the job's storage.
2. Full rebuild: the job itself (``spark/snapshot.py``: plan, fold, Parquet, the Redis
   snapshot written whole, switch) on ``local[2]``, on the bench's SparkSession (started
   once, printed apart) and a redis-server of its own. Its steps' seconds are printed;
   the run's cost is their sum. Baseline of the fold, same run, same files: the same
   rule as one duckdb SQL statement (``arg_max`` per key), writing the same two
   Parquet outputs. Both row counts are printed: they must be equal (delivered vs
   expected). The seconds per million events at each size show whether the cost grows
   linearly (within 20 %: the largest over the smallest at most 1.2).
3. ``--incremental``: ``--new`` events (100,000) after the largest size's catalogue,
   touching its identities and topics (renewals, ends, re-subscriptions, deletions and
   re-creations). The job runs on the largest size's snapshot: a change layer, the
   Redis snapshot changed in place. Baseline, same run, same time: a full rebuild of
   the same events in a storage and a Redis prefix of their own. The incremental
   snapshot, read with its layers, must hold the rebuild's rows exactly, and duckdb's
   counts. Target: under a tenth of the rebuild's cost.
4. ``--pod N``: a pod's catalogue start with N subscriptions
   (``apexmesh/store/pubsub_snapshot.py``): loaded from a compact Redis snapshot versus
   replayed from a log of the same N subscription events.

    .venv/bin/python bench/snapshot.py --incremental          # 1M, 3M, 10M; 10M + 100k
    .venv/bin/python bench/snapshot.py --sizes 100000,300000,1000000 --incremental --new 10000
    .venv/bin/python bench/snapshot.py --event-log /tmp/ev    # + where Spark's time goes

With ``--event-log DIR`` Spark writes its event log there and the bench ends with each
run's stages (bench/spark_stages.py): wall, task CPU, GC, shuffle, spill. Every line of
a size also gives the machine's load average (the machine is shared).

Last line: one JSON list of figures (name, value, unit; baseline and ratio where there
is one).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import duckdb  # noqa: E402
from figures import figure  # noqa: E402
from redis.asyncio import Redis  # noqa: E402
from spark_stages import event_log_conf, report  # noqa: E402

from apexmesh.pubsub.catalogue import SEQ_BITS, SNAPSHOT_SCHEMA, SubscriptionRow, TopicRow  # noqa: E402
from apexmesh.store.connection import RedisPoolSettings  # noqa: E402
from apexmesh.store.keys import Keys  # noqa: E402
from apexmesh.store.pubsub_snapshot import SnapshotMeta, SnapshotStore  # noqa: E402
from spark.export import EVENTS_DIR, file_name  # noqa: E402

BASE_MS = 1_700_000_000_000
#: The fold's time: about half of the leases generated are over by then.
AT_MS = BASE_MS + 9_000_000
FILE_EVENTS = 1_000_000

#: Generated events, row ``i`` of ``range(lo, hi)``: the first ``topics`` create the
#: topics; then per identity k = hash(i) mod (n/3): created / renewed / ended mixes,
#: and one event in 5,000 deletes a topic (created again 100 events later).
_GENERATE = """
COPY (
  WITH r AS (SELECT i, (i * 2654435761) % {ids} AS k FROM range({lo}, {hi}) t(i)),
  e AS (
    SELECT i, k,
      CASE
        WHEN i < {topics} THEN 'topic.created'
        WHEN i % 5000 = 4999 THEN 'topic.deleted'
        WHEN i % 5000 = 99 THEN 'topic.created'
        WHEN i % 10 < 6 THEN 'subscription.created'
        WHEN i % 10 < 8 THEN 'subscription.renewed'
        ELSE 'subscription.ended'
      END AS type,
      CASE WHEN i < {topics} THEN i ELSE k % {topics} END AS t
    FROM r
  )
  SELECT
    ((({base} + i // 4) << {bits}) | (i % 4))::BIGINT AS id,
    '2' AS v, type, 'example.com' AS domain, 't' || t AS topic,
    CASE WHEN type = 'topic.created' THEN '{{"n":' || i || '}}' ELSE '' END AS settings,
    CASE WHEN type LIKE 'subscription.%' THEN 'u' || (k // 7) || '@example.com' ELSE '' END
      AS subscriber,
    CASE WHEN type LIKE 'subscription.%' AND k % 3 = 1 THEN (k % 5)::VARCHAR ELSE '' END
      AS subscription_id,
    CASE WHEN k % 3 = 1 THEN 'JMS' ELSE '' END AS selector_class,
    CASE WHEN k % 3 = 1 THEN 'price > ' || (k % 100) ELSE '' END AS selector,
    CASE WHEN k % 3 = 1 THEN '1' ELSE '' END AS cached,
    'u' || (k // 7) || '@example.com' AS originator,
    (i % 100000)::VARCHAR AS trans_id,
    CASE WHEN type LIKE 'subscription.%'
      THEN ({base} + (k % 10) * 2000000 + i // 4)::VARCHAR ELSE '' END AS expires_ms,
    CASE WHEN type = 'subscription.ended' THEN 'cancel' ELSE '' END AS reason,
    ({base} + i // 4)::VARCHAR AS at_ms,
    'p1' AS pod
  FROM e
) TO '{path}' (FORMAT parquet, COMPRESSION snappy)
"""

#: The catalogue rule (apexmesh/pubsub/catalogue.py) in one duckdb statement.
_FOLD = """
CREATE OR REPLACE TEMP VIEW ev AS
  SELECT * FROM read_parquet('{events}/*.parquet');
COPY (
  WITH last AS (
    SELECT domain, topic, arg_max({{'type': type, 'settings': settings, 'creator': originator,
      'created_ms': coalesce(TRY_CAST(at_ms AS BIGINT), 0), 'id': id}}, id) AS r
    FROM ev WHERE type IN ('topic.created', 'topic.deleted') GROUP BY domain, topic)
  SELECT domain, topic, r.settings, r.creator, r.created_ms, r.id
  FROM last WHERE r.type = 'topic.created'
) TO '{out}/topics.parquet' (FORMAT parquet);
COPY (
  WITH last AS (
    SELECT domain, topic, subscriber, subscription_id,
      arg_max({{'type': type, 'selector_class': selector_class, 'selector': selector,
        'cached': cached = '1', 'originator': originator,
        'trans_id': coalesce(TRY_CAST(trans_id AS BIGINT), 0),
        'expires_ms': coalesce(TRY_CAST(expires_ms AS BIGINT), 0),
        'at_ms': coalesce(TRY_CAST(at_ms AS BIGINT), 0), 'id': id}}, id) AS r
    FROM ev WHERE type LIKE 'subscription.%'
    GROUP BY domain, topic, subscriber, subscription_id),
  topics AS (SELECT * FROM read_parquet('{out}/topics.parquet'))
  SELECT l.domain, l.topic, l.subscriber, l.subscription_id, r.selector_class, r.selector,
    r.cached, r.originator, r.trans_id, r.expires_ms, r.at_ms, r.id
  FROM last l JOIN topics t ON l.domain = t.domain AND l.topic = t.topic AND l.r.id > t.id
  WHERE r.type <> 'subscription.ended' AND r.expires_ms >= {at}
) TO '{out}/subscriptions.parquet' (FORMAT parquet);
"""


def generate(directory: Path, start: int, stop: int, *, identities: int, topics: int) -> None:
    """Rows ``start`` to ``stop`` of the generator as exported ranges in ``directory``,
    named as the exporter names them (spark/export.py: first and last packed id), a
    million events a file: what the job finds in its storage's ``events/``."""
    directory.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    for lo in range(start, stop, FILE_EVENTS):
        hi = min(stop, lo + FILE_EVENTS)
        first, last = packed(lo), packed(hi - 1)
        con.execute(
            _GENERATE.format(
                ids=identities,
                lo=lo,
                hi=hi,
                topics=topics,
                base=BASE_MS,
                bits=SEQ_BITS,
                path=directory / file_name(first, last),
            )
        )
    con.close()


def packed(i: int) -> int:
    """The packed stream id of generated row ``i`` (as ``_GENERATE`` computes it)."""
    return ((BASE_MS + i // 4) << SEQ_BITS) | (i % 4)


def duckdb_fold(events: Path, out: Path, at_ms: int = AT_MS) -> tuple[float, int, int]:
    out.mkdir(parents=True)
    con = duckdb.connect()
    con.execute("SET threads = 2")  # the same two cores as Spark's local[2]
    started = time.perf_counter()
    con.execute(_FOLD.format(events=events, out=out, at=at_ms))
    seconds = time.perf_counter() - started
    # the bench's own temporary paths, not input
    topics = con.execute(f"SELECT count(*) FROM '{out}/topics.parquet'").fetchone()  # noqa: S608
    subs = con.execute(f"SELECT count(*) FROM '{out}/subscriptions.parquet'").fetchone()  # noqa: S608
    con.close()
    return seconds, int(topics[0]) if topics else -1, int(subs[0]) if subs else -1


@dataclass(frozen=True, slots=True)
class Run:
    """One run of the job: what it built, its steps' seconds, the rows it left."""

    kind: str
    seconds: dict[str, float]
    topics: int
    subscriptions: int
    directory: str

    @property
    def total(self) -> float:
        """The run's cost: every step (export, fold, writes, switch; the session is the
        bench's, started once)."""
        return sum(self.seconds.values())


async def run_job(spark: Any, redis: Redis, storage: Path, prefix: str, at_ms: int) -> Run:
    """The snapshot job (spark/snapshot.py) on ``storage`` with Redis prefix ``prefix``
    at ``at_ms``, on the bench's session, as the CronJob runs it."""
    from spark.settings import SnapshotSettings
    from spark.snapshot import SnapshotJob

    settings = SnapshotSettings(
        storage=str(storage),
        retention=24,
        master="local[2]",
        driver_memory="2g",
        shuffle_partitions=32,
        export_batch=200_000,
        trim=True,
        grace_ms=0,
        redis_url="redis://127.0.0.1:0/0",
        redis_prefix=prefix,
        redis_pool=RedisPoolSettings(max_connections=8, timeout=60.0),
    )
    spark.sparkContext.setJobDescription(f"{prefix}: job at {at_ms}")
    result = await SnapshotJob(settings, spark, redis, clock=lambda: at_ms).run()
    return Run(result.kind, result.seconds, result.topics, result.subscriptions, result.directory)


def view_counts(spark: Any, storage: Path) -> tuple[int, int]:
    """The newest snapshot's topics and subscriptions, read with its layers."""
    from spark.layers import read_view, snapshots
    from spark.storage import Storage

    found = Storage(str(storage))
    folded = read_view(spark, found, snapshots(found)[-1])
    try:
        return int(folded.topics.count()), int(folded.subscriptions.count())
    finally:
        if folded.ids is not None:
            folded.ids.unpersist()


def same_rows(spark: Any, one: Path, other: Path) -> bool:
    """Whether the newest snapshots of two storages hold the same rows (read with their
    layers), both ways round."""
    from spark.layers import read_view, snapshots
    from spark.storage import Storage

    frames = []
    for path in (one, other):
        found = Storage(str(path))
        frames.append(read_view(spark, found, snapshots(found)[-1]))
    try:
        return all(
            a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0
            for a, b in (
                (frames[0].topics, frames[1].topics),
                (frames[0].subscriptions, frames[1].subscriptions),
            )
        )
    finally:
        for folded in frames:
            if folded.ids is not None:
                folded.ids.unpersist()


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def verdict(equal: bool) -> str:
    """A delivered-vs-expected check, as printed."""
    return "equal" if equal else "DIFFERENT"


def _subscription(i: int) -> SubscriptionRow:
    return SubscriptionRow(
        "example.com",
        f"t{i % 1000}",
        f"u{i}@example.com",
        str(i % 3) if i % 2 else "",
        "JMS" if i % 2 else "",
        "price > 3" if i % 2 else "",
        bool(i % 2),
        f"u{i}@example.com",
        i,
        AT_MS + 3_600_000,
        BASE_MS,
        ((BASE_MS + 1 + i) << SEQ_BITS),
    )


async def pod_start(subscriptions: int) -> tuple[float, float, int, int]:
    """(seconds from the snapshot, seconds replaying the log, subscriptions each saw)."""
    support = importlib.import_module("tests.support.redis_server")
    with tempfile.TemporaryDirectory() as tmp:
        server = support.RedisServer(Path(tmp))
        server.start()
        # a long socket timeout: a pipeline of 10,000 XADDs on a loaded machine
        redis = Redis.from_url(server.url, socket_timeout=600)
        try:
            # the bench measures reads: no AOF rewrite of a gigabyte in the middle of them
            await redis.config_set("appendonly", "no")
            topics = [
                TopicRow("example.com", f"t{t}", "", "o@example.com", BASE_MS, BASE_MS << SEQ_BITS)
                for t in range(1000)
            ]
            # the log: 1,000 topic creations, then one creation per subscription
            replay = Keys("replay")
            key = replay.pubsub_events()
            async with redis.pipeline(transaction=False) as pipe:
                for t in topics:
                    pipe.xadd(
                        key,
                        {
                            "v": "2",
                            "type": "topic.created",
                            "domain": t.domain,
                            "topic": t.topic,
                            "at_ms": str(BASE_MS),
                        },
                        id=f"{BASE_MS}-{t.created_ms % 1000 + int(t.topic[1:])}",
                    )
                await pipe.execute()
            batch = 10_000
            for lo in range(0, subscriptions, batch):
                async with redis.pipeline(transaction=False) as pipe:
                    for i in range(lo, min(subscriptions, lo + batch)):
                        s = _subscription(i)
                        pipe.xadd(
                            key,
                            {
                                "v": "2",
                                "type": "subscription.created",
                                "domain": s.domain,
                                "topic": s.topic,
                                "subscriber": s.subscriber,
                                "subscription_id": s.subscription_id,
                                "selector_class": s.selector_class,
                                "selector": s.selector,
                                "cached": "1" if s.cached else "",
                                "originator": s.originator,
                                "trans_id": str(s.trans_id),
                                "expires_ms": str(s.expires_ms),
                                "reason": "",
                                "at_ms": str(s.at_ms),
                                "pod": "p1",
                            },
                            id=f"{BASE_MS + 1 + i}-0",
                        )
                    await pipe.execute()
            # the snapshot of the same catalogue
            snap = Keys("snap")
            store = SnapshotStore(redis, snap)
            written = await store.write(
                "g1", topics, (_subscription(i) for i in range(subscriptions))
            )
            await store.switch(
                SnapshotMeta(
                    "g1",
                    (BASE_MS + subscriptions) << SEQ_BITS,
                    AT_MS,
                    written[0],
                    written[1],
                    SNAPSHOT_SCHEMA,
                )
            )
            started = time.perf_counter()
            from_snapshot, used = await store.catalogue()
            snapshot_seconds = time.perf_counter() - started
            assert used
            started = time.perf_counter()
            replayed, used = await SnapshotStore(redis, replay).catalogue()
            replay_seconds = time.perf_counter() - started
            assert not used
            return (
                snapshot_seconds,
                replay_seconds,
                len(from_snapshot.subscriptions),
                len(replayed.subscriptions),
            )
        finally:
            await redis.aclose()
            server.stop()


def label(count: int) -> str:
    if count >= 1_000_000:
        return f"{count / 1_000_000:g}M"
    return f"{count // 1000}k"


async def series(
    args: argparse.Namespace, spark: Any, redis: Redis, root: Path
) -> list[dict[str, Any]]:
    """The full rebuilds at each size, each beside duckdb on the same files, and with
    ``--incremental``, the largest size plus new events, incremental and in full."""
    figures: list[dict[str, Any]] = []
    sizes = sorted(int(s) for s in args.sizes.split(",") if s)
    largest = max(sizes)
    identities, topics = largest // 3, max(100, largest // 1000)
    # one small run first: the JVM's first queries (class loading, code generation)
    # are a one-off of every job run, printed, not counted per size
    generate(root / "warm" / "events", 0, 10_000, identities=3_333, topics=100)
    warm = await run_job(spark, redis, root / "warm", "warm", AT_MS)
    print(f"first job run (10,000 events, JVM warm-up): {warm.total:.1f} s", flush=True)
    per_million: dict[int, float] = {}
    fold_per_million: dict[int, float] = {}
    for count in sizes:
        storage = root / f"full-{count}"
        started = time.perf_counter()
        # every size from the same generator, so that the largest size's catalogue is
        # what the incremental run builds on
        generate(
            storage / EVENTS_DIR, 0, count, identities=count // 3, topics=max(100, count // 1000)
        )
        print(f"{count:>10} events generated in {time.perf_counter() - started:.1f} s", flush=True)
        if args.incremental and count == largest:
            # the same files for the full rebuild beside the incremental run (the job's
            # retention drops the ones its snapshots cover)
            (root / "whole" / EVENTS_DIR).mkdir(parents=True)
            for path in (storage / EVENTS_DIR).iterdir():
                os.link(path, root / "whole" / EVENTS_DIR / path.name)
        duck, duck_topics, duck_subs = duckdb_fold(storage / EVENTS_DIR, root / f"duck-{count}")
        run = await run_job(spark, redis, storage, f"full-{count}", AT_MS)
        per_million[count] = run.total / (count / 1e6)
        fold_per_million[count] = run.seconds["fold"] / (count / 1e6)
        print(
            f"{count:>10} events, full rebuild ({run.kind}): {run.total:.1f} s "
            f"({per_million[count]:.2f} s per million): fold {run.seconds['fold']:.1f} s, "
            f"redis write {run.seconds['redis_write']:.1f} s, "
            f"switch {run.seconds['switch']:.1f} s; "
            f"duckdb fold {duck:.1f} s, spark fold / duckdb {run.seconds['fold'] / duck:.2f}; "
            f"topics {run.topics} vs {duck_topics}, subscriptions {run.subscriptions} vs "
            f"{duck_subs} (delivered vs expected: "
            f"{verdict((run.topics, run.subscriptions) == (duck_topics, duck_subs))}); "
            f"load {load()}",
            flush=True,
        )
        figures.append(figure(f"snapshot_full_{label(count)}_events", run.total, "s"))
        figures.append(
            figure(f"snapshot_fold_{label(count)}_events", run.seconds["fold"], "s", duck)
        )
        figures.append(
            figure(
                f"snapshot_full_{label(count)}_subscriptions", run.subscriptions, "rows", duck_subs
            )
        )
        if count != largest:
            await redis.flushdb()  # the largest size's Redis snapshot is the incremental's start
    if len(sizes) > 1:
        smallest = min(sizes)
        for what, found in (("full rebuild", per_million), ("its fold", fold_per_million)):
            spread = max(found.values()) / min(found.values())
            print(
                f"{what}, seconds per million events by size: "
                + ", ".join(f"{label(c)}: {p:.2f}" for c, p in found.items())
                + f"; largest / smallest {spread:.2f} "
                + ("(linear within 20%)" if spread <= 1.2 else "(NOT linear within 20%)"),
                flush=True,
            )
        figures.append(
            figure(
                f"snapshot_full_{label(largest)}_s_per_million",
                per_million[largest],
                "s",
                per_million[smallest],
            )
        )
    if args.incremental:
        figures += await incremental(args, spark, redis, root, largest, identities, topics)
    return figures


async def incremental(
    args: argparse.Namespace,
    spark: Any,
    redis: Redis,
    root: Path,
    largest: int,
    identities: int,
    topics: int,
) -> list[dict[str, Any]]:
    """``--new`` events after the largest size's catalogue: the job run on its snapshot
    (a change layer), then a full rebuild of the same events, same run, same time."""
    base = root / f"full-{largest}"
    new_file = root / "new-events"
    generate(new_file, largest, largest + args.new, identities=identities, topics=topics)
    (added,) = new_file.iterdir()
    # the same events whole, in a storage and a Redis prefix of their own (series()
    # linked the largest size's files there)
    whole = root / "whole"
    for directory in (base, whole):
        shutil.copy(added, directory / EVENTS_DIR / added.name)
    at = AT_MS + 1
    step = await run_job(spark, redis, base, f"full-{largest}", at)
    duck, duck_topics, duck_subs = duckdb_fold(whole / EVENTS_DIR, root / "duck-whole", at)
    rebuilt = await run_job(spark, redis, whole, "whole", at)
    view = view_counts(spark, base)
    same = same_rows(spark, base, whole)
    ratio = step.total / rebuilt.total
    print(
        f"{label(largest)} events + {args.new} new: incremental ({step.kind}) {step.total:.1f} s "
        f"(fold {step.seconds['fold']:.1f} s, redis stage {step.seconds['redis_write']:.1f} s, "
        f"apply {step.seconds['switch']:.1f} s; a change layer of {step.topics} topics and "
        f"{step.subscriptions} subscriptions), full rebuild ({rebuilt.kind}) "
        f"{rebuilt.total:.1f} s: ratio {ratio:.3f} ({'under' if ratio < 0.1 else 'NOT under'} "
        f"a tenth); the incremental snapshot's catalogue {view[0]} topics, {view[1]} "
        f"subscriptions, the rebuild's {rebuilt.topics} / {rebuilt.subscriptions}, duckdb's "
        f"{duck_topics} / {duck_subs} in {duck:.1f} s (delivered vs expected: "
        f"{verdict(view == (rebuilt.topics, rebuilt.subscriptions) == (duck_topics, duck_subs))}"
        f"; same rows: {same}); load {load()}",
        flush=True,
    )
    name = f"snapshot_incremental_{label(largest)}_plus_{label(args.new)}"
    return [
        figure(name, step.total, "s", rebuilt.total),
        figure(f"{name}_subscriptions", view[1], "rows", duck_subs),
        figure(f"{name}_fold", step.seconds["fold"], "s", rebuilt.seconds["fold"]),
    ]


async def snapshot_runs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The job's runs, on one SparkSession and a redis-server of the bench's own."""
    from spark.session import spark_session
    from spark.settings import DEFAULT_SHUFFLE_PARTITIONS

    support = importlib.import_module("tests.support.redis_server")
    started = time.perf_counter()
    conf = event_log_conf(args.event_log) if args.event_log else {}
    spark = spark_session(
        "local[2]",
        driver_memory="2g",
        shuffle_partitions=DEFAULT_SHUFFLE_PARTITIONS,
        conf=sorted(conf.items()),
    )
    print(f"SparkSession local[2] started in {time.perf_counter() - started:.1f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-snapshot-") as tmp:
        root = Path(tmp)
        server = support.RedisServer(root / "redis")
        (root / "redis").mkdir()
        server.start()
        redis = Redis.from_url(server.url, socket_timeout=600)
        try:
            # the bench measures the job: no AOF rewrite of a gigabyte in the middle of it
            await redis.config_set("appendonly", "no")
            return await series(args, spark, redis, root)
        finally:
            await redis.aclose()
            server.stop()
            spark.stop()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,3000000,10000000")
    parser.add_argument(
        "--incremental",
        action="store_true",
        help="then --new events on the largest size: incremental, and in full",
    )
    parser.add_argument("--new", type=int, default=100_000, help="new events (--incremental)")
    parser.add_argument("--pod", type=int, default=0, help="pod start with so many subscriptions")
    parser.add_argument("--event-log", type=Path, help="write Spark's event log here; print stages")
    args = parser.parse_args(argv)
    print(f"load average at the start: {load()}", flush=True)
    figures: list[dict[str, Any]] = []
    if args.pod:
        snap, replay, seen_snap, seen_replay = asyncio.run(pod_start(args.pod))
        print(
            f"pod catalogue with {args.pod} subscriptions: from snapshot {snap:.1f} s "
            f"({seen_snap} subscriptions), full replay {replay:.1f} s ({seen_replay}); "
            f"ratio {snap / replay:.2f}",
            flush=True,
        )
        figures.append(figure("snapshot_pod_start", snap, "s", replay))
        figures.append(figure("snapshot_pod_start_subscriptions", seen_snap, "rows", seen_replay))
    figures += asyncio.run(snapshot_runs(args))
    if args.event_log:
        for line in report(args.event_log):
            print(line, flush=True)
    print(f"load average at the end: {load()}", flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main(sys.argv[1:])
