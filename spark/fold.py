"""The catalogue fold as Spark DataFrames: the rule of :mod:`apexmesh.pubsub.catalogue`
(the reference the tests compare this with), written for a cluster.

Every step is a shuffle by key, never a sort of the whole log: per (domain, topic) and
per subscription identity the row with the largest packed id wins (``max_by``), so the
work splits by key across executors and grows linearly with the events. Duplicates
(one id exported or read twice) need no pass of their own: they are the same entry, so
the winner per key is the same. A previous snapshot enters as rows of the same shape
carrying the id of the event that set them, so "previous snapshot + events after its
position" folds as the whole log would.

How the per-key step is planned, and why (measured with bench/snapshot.py and Spark's
event log, docs/snapshot.md "Where the time goes"): ``max_by`` over a struct of strings
has no fixed-width aggregation buffer, so Spark cannot use its hash aggregate and sorts
instead. Sorted by the key's strings, every comparison walks them (the domain, the first
key, is the same on every row, so the sort's 8-byte prefix decides nothing), and a
map-side partial aggregate sorted every event once more to save little (an identity has
a few events, spread over the files). So the events are first repartitioned by a 64-bit
hash of the key, which leaves no partial aggregate before the shuffle, and the hash
leads the grouping keys, so the one remaining sort orders by a long (radix sort on the
prefix) and compares strings only on a hash tie. The grouping is unchanged: the hash is
a function of the key.

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

from pyspark.sql import Column, DataFrame
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
    is :func:`fold_topics` of the same input (or what it wrote, read back)."""
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
    sub_cols = [c for c in sub_events.columns if c not in _SUB_KEY]
    last_subs = _last(sub_events, _SUB_KEY, sub_cols)
    alive = last_subs.filter(
        (F.col("type") != F.lit(SUB_ENDED)) & (F.col("expires_ms") >= F.lit(at_ms))
    )
    created = live_topics.select("domain", "topic", F.col("id").alias("topic_id"))
    return (
        alive.join(created, list(_TOPIC_KEY), "inner")
        .filter(F.col("id") > F.col("topic_id"))
        .select(*[f.name for f in SUBSCRIPTION_SCHEMA.fields])
    )


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
    "SUBSCRIPTION_SCHEMA",
    "TOPIC_SCHEMA",
    "Folded",
    "fold",
    "fold_subscriptions",
    "fold_topics",
]
