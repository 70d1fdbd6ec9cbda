"""The catalogue fold as Spark DataFrames: the rule of :mod:`apexmesh.pubsub.catalogue`
(the reference the tests compare this with), written for a cluster.

Every step is a shuffle by key, never a sort of the whole log: per (domain, topic) and
per subscription identity the row with the largest packed id wins, so the work splits
by key across executors and grows linearly with the events. Duplicates (one id
exported or read twice) are the same entry, so the winner per key is the same. A
previous snapshot enters as rows of the same shape carrying the id of the event that
set them, so "previous snapshot + events after its position" folds as the whole log
would.

What the fold reads is a :class:`History`: topic and subscription events projected to
the columns the rule needs. Events of the log (:func:`history_of_events`), a full
snapshot's rows (:func:`history_of_rows`, each the creation that set it) and a change
layer's rows (:func:`history_of_changes`, each the last event of its key) all read as
such events. An incremental run (docs/snapshot.md "Incremental runs") writes only
:func:`changes` of the events after the previous snapshot: per key they touch, the last
event, so its cost follows the new events and not the catalogue; reading a layered
snapshot folds its full layer and its change layers with :func:`live_topics` and
:func:`live_subscriptions_and_ids`, as a rebuild folds the log.

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
    TOPIC_DELETED,
    TOPIC_EVENTS,
    TOPIC_MODIFIED,
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


#: A change layer's rows (docs/snapshot.md "Incremental runs"): per key touched after
#: the previous snapshot, the last event's row, and whether the topic then exists;
#: ``settings_id`` is the id of the event that set ``settings`` (a ``topic.modified``
#: after the creation ``id``; absent from layers written before it: read as ``id``).
TOPIC_CHANGE_SCHEMA: Final = StructType(
    [
        *TOPIC_SCHEMA.fields,
        StructField("exists", BooleanType(), False),
        StructField("settings_id", LongType(), True),
    ]
)
#: The same for subscriptions: ``open`` is whether the identity's last event is a
#: creation or a renewal (its lease and its topic are judged when the layers are read).
SUBSCRIPTION_CHANGE_SCHEMA: Final = StructType(
    [*SUBSCRIPTION_SCHEMA.fields, StructField("open", BooleanType(), False)]
)


@dataclass(frozen=True, slots=True)
class Folded:
    topics: DataFrame
    subscriptions: DataFrame
    #: The cached winning ids ``subscriptions`` is built on: unpersist once done.
    ids: DataFrame | None = None


@dataclass(frozen=True, slots=True)
class History:
    """What the fold reads: topic and subscription events, projected to the columns the
    rule needs (:data:`TOPIC_EVENT_COLUMNS`, :data:`SUBSCRIPTION_EVENT_COLUMNS`). Events
    of the log, a full snapshot's rows (each the creation that set it) and a change
    layer's rows (each the last event of its key) all read as such events, so one fold
    serves a rebuild from the log, a run on top of a snapshot and the reading of a
    layered snapshot."""

    topics: DataFrame
    subscriptions: DataFrame

    def union(self, other: History) -> History:
        return History(
            self.topics.unionByName(other.topics),
            self.subscriptions.unionByName(other.subscriptions),
        )


#: A history's columns: a row's key, the event type, then the rest of the row; a
#: topic's also the id of the event that set its settings (``settings_id``: its own id,
#: but for a change layer's row of a topic whose settings a ``topic.modified`` changed).
TOPIC_EVENT_COLUMNS: Final = (
    *_TOPIC_KEY,
    "type",
    *[f.name for f in TOPIC_SCHEMA.fields if f.name not in _TOPIC_KEY],
    "settings_id",
)
SUBSCRIPTION_EVENT_COLUMNS: Final = (
    *_SUB_KEY,
    "type",
    *[f.name for f in SUBSCRIPTION_SCHEMA.fields if f.name not in _SUB_KEY],
)


def _long(name: str) -> Column:
    # try_cast: ANSI mode (Spark 4's default) raises on "" where a v1 entry has no value.
    return F.coalesce(F.col(name).try_cast(LongType()), F.lit(0).cast(LongType()))


def history_of_events(events: DataFrame, *, after: int = 0) -> History:
    """The topic and subscription events of ``events`` (the exported schema) after the
    packed id ``after``: what a previous snapshot at ``after`` does not cover (an id at
    or below it is a duplicate of what it folded)."""
    # No dropDuplicates: an id seen twice is the same entry of the stream, so the row a
    # key's max_by picks is the same whether it came once or twice (a shuffle saved).
    fresh = events.filter(F.col("id") > F.lit(after))
    topics = fresh.filter(F.col("type").isin(*sorted(TOPIC_EVENTS | {TOPIC_MODIFIED}))).select(
        "domain",
        "topic",
        "type",
        "settings",
        F.col("originator").alias("creator"),
        _long("at_ms").alias("created_ms"),
        "id",
        F.col("id").alias("settings_id"),
    )
    subscriptions = fresh.filter(F.col("type").isin(*sorted(SUBSCRIPTION_EVENTS))).select(
        *_SUB_KEY,
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
    return History(topics, subscriptions)


def _topic_creations(topics: DataFrame) -> DataFrame:
    return (
        topics.withColumn("type", F.lit(TOPIC_CREATED))
        .withColumn("settings_id", F.col("id"))
        .select(*TOPIC_EVENT_COLUMNS)
    )


def _subscription_creations(subscriptions: DataFrame) -> DataFrame:
    return subscriptions.withColumn("type", F.lit(SUB_CREATED)).select(*SUBSCRIPTION_EVENT_COLUMNS)


def history_of_rows(topics: DataFrame, subscriptions: DataFrame) -> History:
    """A full snapshot's rows (:data:`TOPIC_SCHEMA`, :data:`SUBSCRIPTION_SCHEMA`), each
    read as the creation that set it (the id it carries): so "snapshot + later events"
    folds as the whole log would."""
    return History(_topic_creations(topics), _subscription_creations(subscriptions))


def history_of_changes(topics: DataFrame, subscriptions: DataFrame) -> History:
    """A change layer's rows (:data:`TOPIC_CHANGE_SCHEMA`,
    :data:`SUBSCRIPTION_CHANGE_SCHEMA`), each read as the last event of its key: a
    creation, or a deletion (an end) where the key no longer exists (is not open)."""
    topic_type = F.when(F.col("exists"), F.lit(TOPIC_CREATED)).otherwise(F.lit(TOPIC_DELETED))
    sub_type = F.when(F.col("open"), F.lit(SUB_CREATED)).otherwise(F.lit(SUB_ENDED))
    settings_id = F.coalesce(F.col("settings_id"), F.col("id"))
    return History(
        topics.withColumn("type", topic_type)
        .withColumn("settings_id", settings_id)
        .select(*TOPIC_EVENT_COLUMNS),
        subscriptions.withColumn("type", sub_type).select(*SUBSCRIPTION_EVENT_COLUMNS),
    )


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


def _topic_state(topics: DataFrame) -> DataFrame:
    """Per (domain, topic) of a history's topic events: ``last``, the last creation or
    deletion (type, creator, created_ms, id; null when the key has only
    modifications), and ``set``, the settings of its last creation or modification with
    that event's id. The catalogue's rule (apexmesh/pubsub/catalogue.py): a topic exists
    when ``last`` is a creation, with the settings of the latest creation or
    ``topic.modified`` (a modification before the creation is overridden by it, so the
    latest of both is the one that counts). ``max_by`` skips rows whose ordering is
    null, which is how each aggregate sees only its own events (module docstring: one
    shuffle, hash first)."""
    changes_existence = F.col("type") != F.lit(TOPIC_MODIFIED)
    sets_settings = F.col("type") != F.lit(TOPIC_DELETED)
    last = F.max_by(
        F.struct("type", "creator", "created_ms", "id"),
        F.when(changes_existence, F.col("id")),
    ).alias("last")
    settings = F.max_by(
        F.struct("settings", "settings_id"),
        F.when(sets_settings, F.col("settings_id")),
    ).alias("set")
    hashed = topics.withColumn(_KEY_HASH, F.xxhash64(*[F.col(k) for k in _TOPIC_KEY]))
    return (
        hashed.repartition(F.col(_KEY_HASH))
        .groupBy(_KEY_HASH, *_TOPIC_KEY)
        .agg(last, settings)
        .drop(_KEY_HASH)
    )


def live_topics(history: History) -> DataFrame:
    """The existing topics (:data:`TOPIC_SCHEMA`): per (domain, topic) the last creation
    or deletion, kept when it is a creation, with the settings a later
    ``topic.modified`` gave it (:func:`_topic_state`)."""
    state = _topic_state(history.topics)
    return state.filter(F.col("last.type") == F.lit(TOPIC_CREATED)).select(
        *_TOPIC_KEY,
        F.col("set.settings").alias("settings"),
        F.col("last.creator").alias("creator"),
        F.col("last.created_ms").alias("created_ms"),
        F.col("last.id").alias("id"),
    )


def changes(history: History, previous_topics: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The change layer of ``history`` (:data:`TOPIC_CHANGE_SCHEMA`,
    :data:`SUBSCRIPTION_CHANGE_SCHEMA`): per key its last event, with whether the key
    exists (is open) after it. No lease or topic is judged here: that is done when the
    layers are read (:func:`live_subscriptions_and_ids`), at the time asked.

    A topic whose only new events are ``topic.modified`` is written as its creation in
    ``previous_topics`` (the previous snapshot's :func:`live_topics`: its id, creator and
    time stand, and subscriptions older than the modification stay), with the new
    settings and their ``settings_id``; modified while not existing, it is written as
    not existing, which changes nothing."""
    state = _topic_state(history.topics)
    before = previous_topics.select(
        *_TOPIC_KEY,
        F.struct("creator", "created_ms", "id").alias("before"),
    )
    joined = state.join(before, list(_TOPIC_KEY), "left")
    modified_only = F.col("last").isNull()
    existed = F.col("before").isNotNull()

    def pick(new: Column, old: Column, missing: Column) -> Column:
        return F.when(~modified_only, new).when(existed, old).otherwise(missing)

    settings_id = F.col("set.settings_id")
    topics = joined.select(
        *_TOPIC_KEY,
        F.coalesce(F.col("set.settings"), F.lit("")).alias("settings"),
        pick(F.col("last.creator"), F.col("before.creator"), F.lit("")).alias("creator"),
        pick(F.col("last.created_ms"), F.col("before.created_ms"), F.lit(0).cast(LongType())).alias(
            "created_ms"
        ),
        pick(F.col("last.id"), F.col("before.id"), settings_id).alias("id"),
        pick(F.col("last.type") == F.lit(TOPIC_CREATED), F.lit(True), F.lit(False)).alias("exists"),
        F.coalesce(settings_id, F.col("last.id")).alias("settings_id"),
    )
    sub_columns = [c for c in SUBSCRIPTION_EVENT_COLUMNS if c not in _SUB_KEY]
    subscriptions = _last(history.subscriptions, _SUB_KEY, sub_columns).select(
        *[f.name for f in SUBSCRIPTION_SCHEMA.fields],
        (F.col("type") != F.lit(SUB_ENDED)).alias("open"),
    )
    return topics, subscriptions


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


def live_subscriptions_and_ids(
    history: History, at_ms: int, topics: DataFrame
) -> tuple[DataFrame, DataFrame]:
    """The subscriptions (:data:`SUBSCRIPTION_SCHEMA`) alive at ``at_ms`` of
    ``history``, ``topics`` being its :func:`live_topics` (or what was written of them,
    read back); and the cached winning ids they are built on (the caller unpersists
    them once the result is written).

    Not all lazy: the winning ids are computed and cached here (module docstring)."""
    sub_events = history.subscriptions
    # Counted once, here (one Spark job: the aggregate), so that the join below is
    # planned on the real number of ids, not on an estimate of the aggregate's output.
    ids = _winning_ids(sub_events, at_ms, topics).persist(StorageLevel.MEMORY_AND_DISK)
    count = ids.count()
    if count <= broadcast_ids_limit(sub_events.sparkSession):
        # The events stay where they are; only the few winners move, by id, to drop
        # their copies (an id read twice is the same entry: its copies are equal).
        joined = sub_events.join(F.broadcast(ids), "id", "left_semi").repartition("id")
    else:
        # A shuffle join, hashing the ids (no sort of the events by id); its output is
        # already partitioned by id for the same step.
        joined = sub_events.join(ids.hint("shuffle_hash"), "id", "left_semi")
    rows = joined.dropDuplicates(["id"])
    return rows.select(*[f.name for f in SUBSCRIPTION_SCHEMA.fields]), ids


def fold_topics(events: DataFrame, *, after: int = 0, topics: DataFrame | None = None) -> DataFrame:
    """The existing topics (:data:`TOPIC_SCHEMA`) of ``events`` (the exported schema)
    after the packed id ``after``, on top of a previous snapshot's ``topics``."""
    history = history_of_events(events, after=after)
    if topics is not None:
        history = History(
            history.topics.unionByName(_topic_creations(topics)), history.subscriptions
        )
    return live_topics(history)


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
    history = history_of_events(events, after=after)
    if subscriptions is not None:
        history = History(
            history.topics,
            history.subscriptions.unionByName(_subscription_creations(subscriptions)),
        )
    return live_subscriptions_and_ids(history, at_ms, live_topics)


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
    docstring); :func:`spark.snapshot.write_full` releases them after the write."""
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
    """The catalogue at ``at_ms`` of ``events`` (the exported schema) after the packed
    id ``after``, on top of a previous snapshot's ``topics`` and ``subscriptions`` (both
    lazy: writing both scans the events for topics twice; the job avoids that)."""
    history = history_of_events(events, after=after)
    if topics is not None:
        history = History(
            history.topics.unionByName(_topic_creations(topics)), history.subscriptions
        )
    if subscriptions is not None:
        history = History(
            history.topics,
            history.subscriptions.unionByName(_subscription_creations(subscriptions)),
        )
    topic_rows = live_topics(history)
    subs, ids = live_subscriptions_and_ids(history, at_ms, topic_rows)
    return Folded(topic_rows, subs, ids)


__all__ = [
    "BROADCAST_IDS",
    "BROADCAST_IDS_CONF",
    "SUBSCRIPTION_CHANGE_SCHEMA",
    "SUBSCRIPTION_EVENT_COLUMNS",
    "SUBSCRIPTION_SCHEMA",
    "TOPIC_CHANGE_SCHEMA",
    "TOPIC_EVENT_COLUMNS",
    "TOPIC_SCHEMA",
    "Folded",
    "History",
    "broadcast_ids_limit",
    "changes",
    "fold",
    "fold_subscriptions",
    "fold_subscriptions_and_ids",
    "fold_topics",
    "history_of_changes",
    "history_of_events",
    "history_of_rows",
    "live_subscriptions_and_ids",
    "live_topics",
]
