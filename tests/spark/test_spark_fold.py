"""The Spark fold (spark/fold.py) against the reference fold of the catalogue
(apexmesh/pubsub/catalogue.py) on the same events, in a real local SparkSession; and a
snapshot read with change layers (an incremental run's, docs/snapshot.md) against the
same reference: deletes, re-subscriptions, expiries, duplicates and out-of-order events
across each boundary."""

from __future__ import annotations

import random
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
    SUBSCRIPTION_CHANGE_SCHEMA,
    SUBSCRIPTION_SCHEMA,
    TOPIC_CHANGE_SCHEMA,
    TOPIC_SCHEMA,
    History,
    changes,
    fold_subscriptions_and_ids,
    fold_topics,
    history_of_changes,
    history_of_events,
    history_of_rows,
    live_subscriptions_and_ids,
    live_topics,
)
from spark.fold import fold as spark_fold
from spark.snapshot import SPARK_EVENT_SCHEMA
from tests.support.pubsub_events import (
    AT,
    BASE_MS,
    LATER,
    Entry,
    created_again,
    ended,
    every_kind,
    numbered,
    random_log,
    renewed_after_expiry,
    subscribed,
    topic_created,
    topic_deleted,
    topic_modified,
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


#: The time of the snapshot a change layer is made on (before :data:`AT`), and a lease
#: that ends between the two.
BASE_AT = BASE_MS + 500
MID = BASE_MS + 700


def across_the_boundary() -> tuple[list[Entry], list[Entry]]:
    """Events before a snapshot's position and after it, where what comes after
    changes what came before: a topic deleted and created again (its old subscription
    gone), another deleted, a re-subscription after an end, an end, a renewal, an end
    and a re-subscription of one id, a lease that ends after the snapshot's time and one
    renewed after it; and, among the later events, copies of earlier ones (duplicates
    across the boundary) and of one later one."""
    before = numbered(
        [
            topic_created("a", BASE_MS),
            topic_created("b", BASE_MS, settings='{"v":1}'),
            topic_created("c", BASE_MS),
            topic_created("d", BASE_MS),
            subscribed("a", "u@example.com", LATER),
            subscribed("a", "v@example.com", LATER),
            subscribed("b", "w@example.com", LATER),
            subscribed("c", "x@example.com", LATER, sid="1", selector="p > 1"),
            subscribed("c", "q@example.com", LATER, sid="2", selector="p > 2"),
            subscribed("a", "y@example.com", LATER),
            ended("a", "y@example.com"),
            subscribed("a", "z@example.com", MID),
            subscribed("a", "s@example.com", MID),
            subscribed("d", "r@example.com", LATER),
            topic_modified("c", BASE_MS + 14, settings='{"c":1}'),
        ]
    )
    after = numbered(
        [
            topic_deleted("b", BASE_MS + 100),
            topic_created("b", BASE_MS + 101, settings='{"v":2}'),
            subscribed("b", "w2@example.com", LATER),
            subscribed("a", "y@example.com", LATER, at=BASE_MS + 103),
            # an end that names the lease it ended (still running): gone all the same
            ended("a", "v@example.com", expires_ms=str(LATER)),
            subscribed("a", "u@example.com", LATER + 5, kind="subscription.renewed"),
            ended("c", "x@example.com", sid="1"),
            subscribed("c", "x@example.com", LATER, sid="1", selector="p > 9"),
            topic_deleted("d", BASE_MS + 108),
            subscribed("a", "s@example.com", LATER, kind="subscription.renewed"),
            topic_created("e", BASE_MS + 110),
            subscribed("e", "t@example.com", LATER),
            # settings changed, creation and subscriptions kept: in the snapshot (a),
            # created in the layer (e, twice), and a topic that is gone (d)
            topic_modified("a", BASE_MS + 112, settings='{"a":2}'),
            topic_modified("e", BASE_MS + 113, settings='{"e":1}'),
            topic_modified("e", BASE_MS + 114, settings='{"e":2}'),
            topic_modified("d", BASE_MS + 115, settings='{"d":9}'),
        ],
        start_ms=BASE_MS + 100,
    )
    duplicates = [before[5], before[6], before[10], after[3]]
    return before, after + duplicates


def shuffled(entries: list[Entry], seed: int) -> list[Entry]:
    out = list(entries)
    random.Random(seed).shuffle(out)
    return out


def materialized(spark: SparkSession, frame: DataFrame, schema: object) -> DataFrame:
    """``frame`` collected and made again (a layer read back, without its lineage)."""
    return spark.createDataFrame(frame.collect(), schema)  # type: ignore[arg-type]


def layer(spark: SparkSession, entries: list[Entry], after: int, previous: History) -> History:
    """The change layer of ``entries`` after the position ``after`` on top of the
    snapshot ``previous`` (its topics), read back."""
    topics, subs = changes(
        history_of_events(frame(spark, entries), after=after), live_topics(previous)
    )
    return history_of_changes(
        materialized(spark, topics, TOPIC_CHANGE_SCHEMA),
        materialized(spark, subs, SUBSCRIPTION_CHANGE_SCHEMA),
    )


def snapshot_rows(spark: SparkSession, entries: list[Entry], at: int) -> History:
    """A full layer of ``entries`` at ``at`` (the reference's rows), read as a history."""
    base = fold(entries, at)
    return history_of_rows(
        spark.createDataFrame(
            [tuple(getattr(r, f.name) for f in TOPIC_SCHEMA.fields) for r in base.topics.values()],
            TOPIC_SCHEMA,
        ),
        spark.createDataFrame(
            [
                tuple(getattr(r, f.name) for f in SUBSCRIPTION_SCHEMA.fields)
                for r in base.subscriptions.values()
            ],
            SUBSCRIPTION_SCHEMA,
        ),
    )


def view(history: History, at: int) -> tuple[set[TopicRow], set[SubscriptionRow]]:
    topics = live_topics(history)
    subs, ids = live_subscriptions_and_ids(history, at, topics)
    try:
        return collected(topics, subs)
    finally:
        ids.unpersist()


def test_a_change_layer_on_a_snapshot_equals_the_full_fold(spark: SparkSession) -> None:
    before, later = across_the_boundary()
    position = max(pack_id(i) for i, _ in before)
    expected = reference(fold(before + later, AT))
    assert {(s.topic, s.subscriber) for s in expected[1]} == {
        ("a", "u@example.com"),  # renewed after
        ("a", "y@example.com"),  # subscribed again after its end
        ("a", "s@example.com"),  # renewed after, before its lease ended
        ("b", "w2@example.com"),  # in the topic created again
        ("c", "x@example.com"),  # ended and subscribed again
        ("c", "q@example.com"),
        ("e", "t@example.com"),
    }  # gone: v (ended), w (its topic created again), z (lease over), r (topic deleted)
    # a modification changes the settings only, before the snapshot or after it
    assert {t.topic: t.settings for t in expected[0]} == {
        "a": '{"a":2}',
        "b": '{"v":2}',
        "c": '{"c":1}',
        "e": '{"e":2}',
    }

    # the full rebuild, both halves out of order
    everything = shuffled(before, 1) + shuffled(later, 2)
    full = spark_fold(frame(spark, everything), AT)
    assert collected(full.topics, full.subscriptions) == expected

    # the snapshot at the boundary (z still alive then), plus a change layer of what
    # follows, delivered out of order with the duplicates
    base = snapshot_rows(spark, before, BASE_AT)
    assert ("a", "z@example.com") in {
        (r["topic"], r["subscriber"]) for r in base.subscriptions.collect()
    }
    changed = layer(spark, shuffled(later, 3), position, base)
    # the layer holds one row per key the new events touched, nothing of the rest
    fresh = [e for i, e in later if pack_id(i) > position]
    topics_touched = {e["topic"] for e in fresh if e["type"].startswith("topic.")}
    subs_touched = {
        (e["topic"], e["subscriber"], e["subscription_id"])
        for e in fresh
        if e["type"].startswith("subscription.")
    }
    assert changed.topics.count() == len(topics_touched) == 4
    assert changed.subscriptions.count() == len(subs_touched) == 7
    assert view(base.union(changed), AT) == expected


def test_a_chain_of_change_layers_equals_the_full_fold(spark: SparkSession) -> None:
    """A random log cut twice: the snapshot at the first cut, a change layer per part
    after it, each part reversed and with copies of the part before it."""
    log = random_log(3000, seed=31)
    first, second = 1200, 2100
    base = snapshot_rows(spark, log[:first], AT - 200)
    one = layer(
        spark,
        (log[first:second] + log[first - 50 : first])[::-1],
        pack_id(log[first - 1][0]),
        base,
    )
    two = layer(
        spark,
        (log[second:] + log[second - 50 : second])[::-1],
        pack_id(log[second - 1][0]),
        base.union(one),
    )
    expected = reference(fold(log, AT))
    assert expected[1], "the log keeps some subscriptions"
    assert view(base.union(one).union(two), AT) == expected
