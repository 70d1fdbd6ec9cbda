"""The snapshot job's fold at 1, 3 and 10 million events, and a pod's catalogue start.

1. Events: ``N`` generated log entries (schema v2: topic creations, subscriptions
   created, renewed and ended, some leases already over, a few topics deleted; about
   N/3 subscription identities) written by duckdb as Parquet files in the exporter's
   format (``spark/export.py``), 1,000,000 events a file.
2. Spark: the job's fold (``spark/fold.py``, through ``spark.snapshot.write_folded`` as
   the job runs it) on ``local[2]``: read the files, fold, write the topics and
   subscriptions as Parquet. Session start is printed apart.
3. Baseline, same run, same files: the same rule as one duckdb SQL statement in this
   process (``arg_max`` per key), writing the same two Parquet outputs. Both results'
   row counts are printed: they must be equal (delivered vs expected).
4. Pod start with 1,000,000 subscriptions (``apexmesh/store/pubsub_snapshot.py``): the
   catalogue loaded from a compact Redis snapshot versus replayed from a log of the
   same 1,000,000 subscription events, in a redis-server of the bench's own.

    .venv/bin/python bench/snapshot.py                # 1M, 3M, 10M events
    .venv/bin/python bench/snapshot.py --sizes 200000 --pod 100000   # quick
    .venv/bin/python bench/snapshot.py --pod 0 --event-log /tmp/ev   # + where Spark's time goes

With ``--event-log DIR`` Spark writes its event log there and the bench ends with each
fold's stages (bench/spark_stages.py): wall, task CPU, GC, shuffle, spill. Every line of
a size also gives the machine's load average (the machine is shared).

Last line: one JSON list of figures (seconds; baseline = duckdb or the replay).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
import tempfile
import time
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
from apexmesh.store.keys import Keys  # noqa: E402
from apexmesh.store.pubsub_snapshot import SnapshotMeta, SnapshotStore  # noqa: E402

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


def generate(directory: Path, count: int) -> None:
    directory.mkdir(parents=True)
    topics = max(100, count // 1000)
    con = duckdb.connect()
    for number, lo in enumerate(range(0, count, FILE_EVENTS)):
        hi = min(count, lo + FILE_EVENTS)
        con.execute(
            _GENERATE.format(
                ids=count // 3,
                lo=lo,
                hi=hi,
                topics=topics,
                base=BASE_MS,
                bits=SEQ_BITS,
                path=directory / f"{number:05d}.parquet",
            )
        )
    con.close()


def duckdb_fold(events: Path, out: Path) -> tuple[float, int, int]:
    out.mkdir(parents=True)
    con = duckdb.connect()
    con.execute("SET threads = 2")  # the same two cores as Spark's local[2]
    started = time.perf_counter()
    con.execute(_FOLD.format(events=events, out=out, at=AT_MS))
    seconds = time.perf_counter() - started
    # the bench's own temporary paths, not input
    topics = con.execute(f"SELECT count(*) FROM '{out}/topics.parquet'").fetchone()  # noqa: S608
    subs = con.execute(f"SELECT count(*) FROM '{out}/subscriptions.parquet'").fetchone()  # noqa: S608
    con.close()
    return seconds, int(topics[0]) if topics else -1, int(subs[0]) if subs else -1


def spark_fold(spark: Any, events: Path, out: Path, label: str) -> tuple[float, int, int]:
    from spark.snapshot import SPARK_EVENT_SCHEMA, write_folded

    spark.sparkContext.setJobDescription(label)
    started = time.perf_counter()
    frame = spark.read.schema(SPARK_EVENT_SCHEMA).parquet(f"file://{events}")
    write_folded(spark, frame, AT_MS, f"file://{out}/topics", f"file://{out}/subscriptions")
    seconds = time.perf_counter() - started
    spark.sparkContext.setJobDescription(f"{label}: counting")
    topics = spark.read.parquet(f"file://{out}/topics").count()
    subs = spark.read.parquet(f"file://{out}/subscriptions").count()
    return seconds, int(topics), int(subs)


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


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,3000000,10000000")
    parser.add_argument("--pod", type=int, default=1_000_000, help="subscriptions (0: skip)")
    parser.add_argument("--event-log", type=Path, help="write Spark's event log here; print stages")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
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
    from spark.session import spark_session
    from spark.settings import DEFAULT_SHUFFLE_PARTITIONS

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
        # One fold of 10,000 events first: the JVM's first query (class loading, code
        # generation) is a one-off of every job run, printed, not counted per size.
        generate(root / "warm", 10_000)
        warm, _, _ = spark_fold(spark, root / "warm", root / "warm-out", "warm-up fold")
        print(f"first Spark fold (10,000 events, JVM warm-up): {warm:.1f} s", flush=True)
        per_million: list[float] = []
        for count in sizes:
            events = root / f"events-{count}"
            started = time.perf_counter()
            generate(events, count)
            print(
                f"{count:>10} events generated in {time.perf_counter() - started:.1f} s", flush=True
            )
            base, base_topics, base_subs = duckdb_fold(events, root / f"duck-{count}")
            mine, topics, subs = spark_fold(
                spark, events, root / f"spark-{count}", f"fold of {count} events"
            )
            per_million.append(mine / (count / 1e6))
            print(
                f"{count:>10} events: spark local[2] {mine:.1f} s "
                f"({mine / (count / 1e6):.2f} s per million), duckdb {base:.1f} s, "
                f"ratio {mine / base:.2f}; topics {topics} vs {base_topics}, "
                f"subscriptions {subs} vs {base_subs} (spark vs duckdb); load average "
                + " ".join(f"{x:.1f}" for x in os.getloadavg()),
                flush=True,
            )
            label = f"{count // 1_000_000}M" if count >= 1_000_000 else f"{count // 1000}k"
            figures.append(figure(f"snapshot_fold_{label}_events", mine, "s", base))
            figures.append(figure(f"snapshot_fold_{label}_subscriptions", subs, "rows", base_subs))
        if len(per_million) > 1:
            print(
                "seconds per million events by size: "
                + ", ".join(f"{c}: {p:.2f}" for c, p in zip(sizes, per_million, strict=True)),
                flush=True,
            )
    spark.stop()
    if args.event_log:
        for line in report(args.event_log):
            print(line, flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main(sys.argv[1:])
