"""The catalogue fold as Spark DataFrames: the rule of :mod:`apexmesh.pubsub.catalogue`
(the reference the tests compare this with), written for a cluster.

Every step is a shuffle by key, never a sort of the whole log: per (domain, topic) and
per subscription identity the row with the largest packed id wins, so the work splits
by key across executors and grows linearly with the events. Duplicates (one id
exported or read twice) are the same entry, so the winner per key is the same. A
previous snapshot enters as rows of the same shape carrying the id of the event that
set them, so "previous snapshot + events after its position" folds as the whole log
would.

How the per-key step is planned, and why (measured with bench/snapshot.py and Spark's
event log, docs/snapshot.md "Where the time goes"):

- Topics (thousands of rows): ``max_by`` over a struct of strings. It has no
  fixed-width aggregation buffer, so Spark cannot use its hash aggregate and sorts
  instead. So the topic events are first repartitioned by a 64-bit hash of the key
  (no partial aggregate before the shuffle), and the hash leads the grouping keys, so
  the sort orders by a long (radix sort on the prefix) and compares strings only on a
  hash tie. The grouping is unchanged: the hash is a function of the key.
- Subscriptions (millions of rows) are not moved whole. First, per identity, the
  largest id and whether that event left the subscription alive (``max`` and
  ``max_by`` of a boolean: fixed-width buffers, so a hash aggregate, no sort). Only the
  key's strings, the id and that boolean are shuffled, repartitioned by the key (a
  map-side partial aggregate cost more than it saved: an identity has a few events,
  spread over the files). The winners that live, in a topic that exists and is older,
  are a column of ids. They are counted (one Spark job) and cached, then joined back
  to the events to bring back their rows: by broadcast up to :data:`BROADCAST_IDS`
  ids (the events do not move), by a shuffle hash join above it (a catalogue of 100M
  subscriptions). The copies of an id read twice are equal, so one is kept per id; the
  rest of the rule needs nothing else. An id is one entry of the stream, so an id
  names one identity; that is what the duplicates rule already rests on.

The topics are small (thousands of rows against millions of events), so
:func:`fold_subscriptions` takes them as a DataFrame of their own: the job passes the
topics it has just written and read back, so the events are not scanned for topics a
second time, and Spark plans the join as a broadcast while they are small (its size
statistics of the Parquet read; no hint, so a catalogue of millions of topics still
joins by shuffle).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from apexmesh.pubsub.catalogue import (
    SUB_CREATED,
    SUB_ENDED,
    SUBSCRIPTION_EVENTS,
    TOPIC_CREATED,
    TOPIC_EVENTS,
)

TOPIC_SCHEMA: Final = StructType(
    [
        StructField("domain", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("settings", StringType(), False),
        StructField("creator", StringType(), False),
        StructField("created_ms", LongType(), False),
        StructField("id", LongType(), False),
    ]
)

SUBSCRIPTION_SCHEMA: Final = StructType(
    [
        StructField("domain", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("subscriber", StringType(), False),
        StructField("subscription_id", StringType(), False),
        StructField("selector_class", StringType(), False),
        StructField("selector", StringType(), False),
        StructField("cached", BooleanType(), False),
        StructField("originator", StringType(), False),
        StructField("trans_id", LongType(), False),
        StructField("expires_ms", LongType(), False),
        StructField("at_ms", LongType(), False),
        StructField("id", LongType(), False),
    ]
)

_TOPIC_KEY: Final = ("domain", "topic")
_SUB_KEY: Final = ("domain", "topic", "subscriber", "subscription_id")
#: The column holding a hash of a row's key (module docstring).
_KEY_HASH: Final = "key_hash"
#: Up to this many winning subscription ids are joined back to their events by
#: broadcast (about 40 bytes each in Spark's hash table, on the driver and on each
#: executor); above it, by a shuffle of the events on the id.
BROADCAST_IDS: Final = 2_000_000
#: The Spark setting that changes :data:`BROADCAST_IDS` (a ``spark.*`` key, so the
#: chart's ``snapshot.sparkConf`` can set it: spark/conf.py).
BROADCAST_IDS_CONF: Final = "spark.apexmesh.snapshot.broadcastIds"


@dataclass(frozen=True, slots=True)
class Folded:
    topics: DataFrame
    subscriptions: DataFrame


def _long(name: str) -> Column:
    # try_cast: ANSI mode (Spark 4's default) raises on "" where a v1 entry has no value.
    return F.coalesce(F.col(name).try_cast(LongType()), F.lit(0).cast(LongType()))


def _last(frame: DataFrame, key: tuple[str, ...], columns: list[str]) -> DataFrame:
    """Per key, the row with the largest id (one shuffle, one sort by a hash of the key:
    module docstring)."""
    hashed = frame.withColumn(_KEY_HASH, F.xxhash64(*[F.col(k) for k in key]))
    value = F.max_by(F.struct(*[F.col(c) for c in columns]), F.col("id")).alias("last")
    return (
        hashed.repartition(F.col(_KEY_HASH))
        .groupBy(_KEY_HASH, *key)
        .agg(value)
        .select(*key, *[F.col(f"last.{c}") for c in columns])
    )


def fold_topics(events: DataFrame, *, after: int = 0, topics: DataFrame | None = None) -> DataFrame:
    """The existing topics (:data:`TOPIC_SCHEMA`) of ``events`` (the exported schema)
    after the packed id ``after``, on top of a previous snapshot's ``topics``."""
    # No dropDuplicates: an id seen twice is the same entry of the stream, so the row a
    # key's max_by picks is the same whether it came once or twice (a shuffle saved).
    fresh = events.filter(F.col("id") > F.lit(after))
    topic_events = fresh.filter(F.col("type").isin(*sorted(TOPIC_EVENTS))).select(
        "domain",
        "topic",
        "type",
        "settings",
        F.col("originator").alias("creator"),
        _long("at_ms").alias("created_ms"),
        "id",
    )
    if topics is not None:
        topic_events = topic_events.unionByName(
            topics.withColumn("type", F.lit(TOPIC_CREATED)).select(*topic_events.columns)
        )
    last_topics = _last(
        topic_events, _TOPIC_KEY, ["type", "settings", "creator", "created_ms", "id"]
    )
    return last_topics.filter(F.col("type") == TOPIC_CREATED).select(
        *[f.name for f in TOPIC_SCHEMA.fields]
    )


def _winning_ids(sub_events: DataFrame, at_ms: int, live_topics: DataFrame) -> DataFrame:
    """The packed ids of the live subscriptions' last events (module docstring): per
    identity the largest id, kept when that event left the subscription alive at
    ``at_ms`` and its topic exists and was created before it."""
    alive = (F.col("type") != F.lit(SUB_ENDED)) & (F.col("expires_ms") >= F.lit(at_ms))
    last = (
        sub_events.select(*_SUB_KEY, "id", alive.alias("alive"))
        .repartition(*[F.col(k) for k in _SUB_KEY])
        .groupBy(*_SUB_KEY)
        .agg(F.max("id").alias("id"), F.max_by(F.col("alive"), F.col("id")).alias("alive"))
    )
    created = live_topics.select(*_TOPIC_KEY, F.col("id").alias("topic_id"))
    return (
        last.filter(F.col("alive"))
        .join(created, list(_TOPIC_KEY), "inner")
        .filter(F.col("id") > F.col("topic_id"))
        .select("id")
    )


def broadcast_ids_limit(spark: SparkSession) -> int:
    """The most winning ids joined back by broadcast (:data:`BROADCAST_IDS_CONF`)."""
    value = spark.conf.get(BROADCAST_IDS_CONF, None)
    return int(value) if value else BROADCAST_IDS


def fold_subscriptions_and_ids(
    events: DataFrame,
    at_ms: int,
    live_topics: DataFrame,
    *,
    after: int,
    subscriptions: DataFrame | None,
) -> tuple[DataFrame, DataFrame]:
    """:func:`fold_subscriptions`, and the cached winning ids it is built on (the caller
    unpersists them once the result is written)."""
    fresh = events.filter(F.col("id") > F.lit(after))
    sub_events = fresh.filter(F.col("type").isin(*sorted(SUBSCRIPTION_EVENTS))).select(
        "domain",
        "topic",
        "subscriber",
        "subscription_id",
        "type",
        "selector_class",
        "selector",
        (F.col("cached") == F.lit("1")).alias("cached"),
        "originator",
        _long("trans_id").alias("trans_id"),
        _long("expires_ms").alias("expires_ms"),
        _long("at_ms").alias("at_ms"),
        "id",
    )
    if subscriptions is not None:
        sub_events = sub_events.unionByName(
            subscriptions.withColumn("type", F.lit(SUB_CREATED)).select(*sub_events.columns)
        )
    # Counted once, here (one Spark job: the aggregate), so that the join below is
    # planned on the real number of ids, not on an estimate of the aggregate's output.
    ids = _winning_ids(sub_events, at_ms, live_topics).persist(StorageLevel.MEMORY_AND_DISK)
    count = ids.count()
    if count <= broadcast_ids_limit(events.sparkSession):
        # The events stay where they are; only the few winners move, by id, to drop
        # their copies (an id read twice is the same entry: its copies are equal).
        joined = sub_events.join(F.broadcast(ids), "id", "left_semi").repartition("id")
    else:
        # A shuffle join, hashing the ids (no sort of the events by id); its output is
        # already partitioned by id for the same step.
        joined = sub_events.join(ids.hint("shuffle_hash"), "id", "left_semi")
    rows = joined.dropDuplicates(["id"])
    return rows.select(*[f.name for f in SUBSCRIPTION_SCHEMA.fields]), ids


def fold_subscriptions(
    events: DataFrame,
    at_ms: int,
    live_topics: DataFrame,
    *,
    after: int = 0,
    subscriptions: DataFrame | None = None,
) -> DataFrame:
    """The subscriptions (:data:`SUBSCRIPTION_SCHEMA`) alive at ``at_ms`` of ``events``
    after ``after``, on top of a previous snapshot's ``subscriptions``; ``live_topics``
    is :func:`fold_topics` of the same input (or what it wrote, read back).

    Not all lazy: the winning ids are computed and cached when this is called (module
    docstring); :func:`spark.snapshot.write_folded` releases them after the write."""
    folded, _ = fold_subscriptions_and_ids(
        events, at_ms, live_topics, after=after, subscriptions=subscriptions
    )
    return folded


def fold(
    events: DataFrame,
    at_ms: int,
    *,
    after: int = 0,
    topics: DataFrame | None = None,
    subscriptions: DataFrame | None = None,
) -> Folded:
    """The catalogue at ``at_ms`` of ``events`` (the exported schema) after the packed id
    ``after``, on top of a previous snapshot's ``topics`` and ``subscriptions`` (both
    lazy: writing both scans the events for topics twice; the job avoids that)."""
    live_topics = fold_topics(events, after=after, topics=topics)
    live_subs = fold_subscriptions(
        events, at_ms, live_topics, after=after, subscriptions=subscriptions
    )
    return Folded(live_topics, live_subs)


__all__ = [
    "BROADCAST_IDS",
    "BROADCAST_IDS_CONF",
    "SUBSCRIPTION_SCHEMA",
    "TOPIC_SCHEMA",
    "Folded",
    "broadcast_ids_limit",
    "fold",
    "fold_subscriptions",
    "fold_subscriptions_and_ids",
    "fold_topics",
]
