"""The Spark fold (spark/fold.py) against the reference fold of the catalogue
(apexmesh/pubsub/catalogue.py) on the same events, in a real local SparkSession."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from apexmesh.pubsub.catalogue import (
    EVENT_FIELDS_V2,
    Catalogue,
    SubscriptionRow,
    TopicRow,
    fold,
    pack_id,
)
from spark.fold import (
    BROADCAST_IDS_CONF,
    SUBSCRIPTION_SCHEMA,
    TOPIC_SCHEMA,
    fold_subscriptions_and_ids,
    fold_topics,
)
from spark.fold import fold as spark_fold
from spark.snapshot import SPARK_EVENT_SCHEMA
from tests.support.pubsub_events import (
    AT,
    BASE_MS,
    Entry,
    created_again,
    every_kind,
    random_log,
    renewed_after_expiry,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# A SparkSession starts in 5 s on a quiet machine, 40 s or more on a loaded one.
pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]


def frame(spark: SparkSession, entries: list[Entry]) -> DataFrame:
    rows = [(pack_id(i), *(e.get(name, "") for name in EVENT_FIELDS_V2)) for i, e in entries]
    return spark.createDataFrame(rows, SPARK_EVENT_SCHEMA)


def collected(
    spark_topics: DataFrame, spark_subs: DataFrame
) -> tuple[set[TopicRow], set[SubscriptionRow]]:
    topics = {TopicRow(**row.asDict()) for row in spark_topics.collect()}
    subs = {SubscriptionRow(**row.asDict()) for row in spark_subs.collect()}
    return topics, subs


def reference(catalogue: Catalogue) -> tuple[set[TopicRow], set[SubscriptionRow]]:
    return set(catalogue.topics.values()), set(catalogue.subscriptions.values())


SCENARIOS = (every_kind(), renewed_after_expiry(), created_again())


def test_each_scenario_matches_the_reference(spark: SparkSession) -> None:
    # One DataFrame per scenario, unioned in separate domains, one Spark job.
    entries: list[Entry] = []
    expected: tuple[set[TopicRow], set[SubscriptionRow]] = (set(), set())
    for index, log in enumerate(SCENARIOS):
        moved = [
            (f"{BASE_MS + 100 * index + n}-{n}", {**e, "domain": f"d{index}.example"})
            for n, (_, e) in enumerate(log)
        ]
        entries += moved
        topics, subs = reference(fold(moved, AT))
        expected[0].update(topics)
        expected[1].update(subs)
    # duplicates, out of order
    entries = entries[::-1] + entries[::3]
    folded = spark_fold(frame(spark, entries), AT)
    got = collected(folded.topics, folded.subscriptions)
    assert got == expected
    # u2 and u3; u and w renewed after expiry; new after the re-creation
    assert len(expected[1]) == 5


def test_a_random_log_matches_the_reference(spark: SparkSession) -> None:
    log = random_log(4000, seed=11)
    folded = spark_fold(frame(spark, log), AT)
    got = collected(folded.topics, folded.subscriptions)
    assert got == reference(fold(log, AT))
    assert got[1], "the log keeps some subscriptions"


def test_previous_snapshot_plus_later_events(spark: SparkSession) -> None:
    log = random_log(3000, seed=5)
    cut = 1700
    base = fold(log[:cut], AT)
    topics = spark.createDataFrame(
        [tuple(getattr(r, f.name) for f in TOPIC_SCHEMA.fields) for r in base.topics.values()],
        TOPIC_SCHEMA,
    )
    subs = spark.createDataFrame(
        [
            tuple(getattr(r, f.name) for f in SUBSCRIPTION_SCHEMA.fields)
            for r in base.subscriptions.values()
        ],
        SUBSCRIPTION_SCHEMA,
    )
    # the whole log is given; only what follows the snapshot's position counts
    folded = spark_fold(
        frame(spark, log), AT, after=base.position, topics=topics, subscriptions=subs
    )
    assert collected(folded.topics, folded.subscriptions) == reference(fold(log, AT))


def _plan(frame: DataFrame) -> str:
    """The executed physical plan (adaptive: the final one, once it ran)."""
    return str(frame._jdf.queryExecution().executedPlan().toString())


@pytest.mark.parametrize("broadcast", [True, False], ids=["broadcast", "shuffle"])
def test_winning_ids_joined_back_match_the_reference(spark: SparkSession, broadcast: bool) -> None:
    # Duplicates and out-of-order ids, joined back by broadcast (a small log) and by a
    # shuffle (the limit set to 0, as for a catalogue of 100M subscriptions).
    log = random_log(3000, seed=23)
    entries = log[::-1] + log[::4]
    events = frame(spark, entries)
    if not broadcast:
        spark.conf.set(BROADCAST_IDS_CONF, "0")
    try:
        topics = fold_topics(events)
        subs, ids = fold_subscriptions_and_ids(events, AT, topics, after=0, subscriptions=None)
        got = collected(topics, subs)
        rows = subs.count()
        winners_plan, rows_plan = _plan(ids), _plan(subs)
        ids.unpersist()
    finally:
        spark.conf.unset(BROADCAST_IDS_CONF)
    assert got == reference(fold(log, AT))
    assert got[1], "the log keeps some subscriptions"
    assert rows == len(got[1]), "an id read twice is one subscription"
    # Per identity a hash aggregate of fixed-width values, not a sort of the events.
    assert "HashAggregate(keys=[domain" in winners_plan, winners_plan
    assert "SortAggregate(key=[domain" not in winners_plan, winners_plan
    join = "BroadcastHashJoin [id" if broadcast else "ShuffledHashJoin [id"
    assert join in rows_plan, rows_plan
    assert "LeftSemi" in rows_plan, rows_plan
