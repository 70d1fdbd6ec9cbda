"""What a run of the snapshot job builds (spark/plan.py), from what it finds: a change
layer by default, a full rebuild without a sound previous snapshot (and from where), a
compaction when the chain is long or Redis is behind."""

from __future__ import annotations

import pytest

from apexmesh.pubsub.catalogue import SNAPSHOT_SCHEMA
from apexmesh.store.pubsub_snapshot import SnapshotMeta
from spark.layers import FORMAT, Kind, SnapshotInfo
from spark.plan import PlanError, Why, plan_run

pytestmark = pytest.mark.unit

PREVIOUS = SnapshotInfo(
    "snapshots/0000000000200",
    snapshot_ms=200,
    position=5000,
    topics=3,
    subscriptions=40,
    kind=Kind.INCREMENTAL,
    base="snapshots/0000000000100",
    layers=("snapshots/0000000000150", "snapshots/0000000000200"),
    generation="g1",
)
#: Redis at the previous snapshot, the log trimmed up to it.
AT_PREVIOUS = SnapshotMeta("g1", 5000, 200, 3, 41, SNAPSHOT_SCHEMA, trimmed=5000)


def test_a_run_on_a_sound_previous_snapshot_is_incremental() -> None:
    found = plan_run(PREVIOUS, AT_PREVIOUS, 5000, compact_after=24)
    assert (found.kind, found.why, found.seed_from_redis) == (Kind.INCREMENTAL, Why.NONE, False)
    assert found.export_from == 5000
    assert "change layer 3" in found.reason


def test_no_previous_snapshot_rebuilds_from_the_log_or_from_redis() -> None:
    # the first run ever: nothing switched, so nothing trimmed: from the log's start
    first = plan_run(None, None, 0, compact_after=24)
    assert (first.kind, first.why, first.seed_from_redis) == (Kind.FULL, Why.NO_PREVIOUS, False)
    assert first.export_from == 0
    assert "from the log's first event" in first.reason
    # an empty storage where Redis has a snapshot and the log is trimmed (a lost
    # volume): a gap, so from the Redis snapshot, exporting after its position
    lost = plan_run(None, AT_PREVIOUS, 0, compact_after=24)
    assert (lost.kind, lost.why, lost.seed_from_redis) == (Kind.FULL, Why.NO_PREVIOUS, True)
    assert lost.export_from == 5000
    assert "from the Redis snapshot at" in lost.reason


def test_another_format_or_a_missing_layer_rebuilds_from_redis() -> None:
    old = SnapshotInfo("snapshots/0000000000200", 200, 5000, 3, 40, format=1, generation="g1")
    found = plan_run(old, AT_PREVIOUS, 5000, compact_after=24)
    assert (found.kind, found.why, found.seed_from_redis) == (Kind.FULL, Why.FORMAT, True)
    assert f"format {FORMAT}" in found.reason
    broken = plan_run(PREVIOUS, AT_PREVIOUS, 5000, compact_after=24, chain_readable=False)
    assert (broken.kind, broken.why, broken.seed_from_redis) == (Kind.FULL, Why.BROKEN_CHAIN, True)


def test_a_trimmed_log_gap_rebuilds_from_redis_and_exports_after_it() -> None:
    # a storage restored from an old backup: its exports end at 3000, the log is
    # trimmed up to 7000 by a run on the live storage, whose snapshot Redis holds
    later = SnapshotMeta("g2", 7000, 300, 3, 45, SNAPSHOT_SCHEMA, trimmed=7000)
    old = SnapshotInfo("snapshots/0000000000100", 100, 3000, 3, 40, generation="g1")
    found = plan_run(old, later, 3000, compact_after=24)
    assert (found.kind, found.why, found.seed_from_redis) == (Kind.FULL, Why.GAP, True)
    assert found.export_from == 7000
    # trimmed exactly up to what the storage holds: no gap
    held = SnapshotMeta("g1", 3000, 100, 3, 40, SNAPSHOT_SCHEMA, trimmed=3000)
    assert plan_run(old, held, 3000, compact_after=24).kind is Kind.INCREMENTAL


def test_redis_behind_the_previous_snapshot_or_a_long_chain_compacts() -> None:
    # the previous run died between its Parquet snapshot and its switch
    behind = SnapshotMeta("g1", 4000, 150, 3, 41, SNAPSHOT_SCHEMA, trimmed=4000)
    found = plan_run(PREVIOUS, behind, 5000, compact_after=24)
    assert (found.kind, found.why) == (Kind.COMPACTED, Why.REDIS_BEHIND)
    assert plan_run(PREVIOUS, None, 5000, compact_after=24).why is Why.REDIS_BEHIND
    # two change layers already: at most two kept
    found = plan_run(PREVIOUS, AT_PREVIOUS, 5000, compact_after=2)
    assert (found.kind, found.why, found.seed_from_redis) == (Kind.COMPACTED, Why.LAYERS, False)
    assert plan_run(PREVIOUS, AT_PREVIOUS, 5000, compact_after=3).kind is Kind.INCREMENTAL
    # 0: no change layers at all
    full_layer = SnapshotInfo("snapshots/0000000000200", 200, 5000, 3, 40, generation="g1")
    assert plan_run(full_layer, AT_PREVIOUS, 5000, compact_after=0).kind is Kind.COMPACTED


def test_a_full_rebuild_refuses_a_redis_snapshot_of_another_schema() -> None:
    other = SnapshotMeta("g1", 5000, 200, 3, 41, SNAPSHOT_SCHEMA + 1, trimmed=5000)
    with pytest.raises(PlanError, match="schema"):
        plan_run(None, other, 0, compact_after=24)
