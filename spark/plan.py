"""What one run of the snapshot job builds, decided from what it finds (sans I/O: the
storage's newest snapshot, the Redis snapshot's HASH and the export position are
passed in). docs/snapshot.md "Incremental runs" states the same rule.

An hourly run should cost what the events since the last run cost, so by default it
writes a change layer on the previous snapshot (:attr:`Kind.INCREMENTAL`) and changes
the Redis snapshot in place by as much. It cannot when the previous snapshot is not a
sound start, and then it rebuilds in full (:attr:`Kind.FULL`):

- there is no previous snapshot in the storage;
- the previous one is of another format (a manifest this job does not write);
- a layer the previous one is read from is missing;
- the log is trimmed past what the storage holds (a *gap*: the storage's exports end
  before the trim point, so events between them are in neither; a storage restored
  from an old backup, or an empty directory where the volume was lost).

A full rebuild starts from the Redis snapshot the pods use when there is one (it is
complete up to its position, and the log is never trimmed past it), else from the log's
first event (no snapshot was ever switched, so nothing was ever trimmed). With a gap,
the export starts again after the Redis snapshot's position.

Between the two, a run folds the previous snapshot's layers and the new events into a
new full layer (:attr:`Kind.COMPACTED`) when the chain of change layers has reached
``compact_after`` (reading a snapshot folds every layer of its chain; and the Redis
snapshot, changed in place, keeps subscriptions whose lease ran out until then), or
when the Redis snapshot is not the previous one (a run died between its Parquet
snapshot and its switch), so that Redis is written whole.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from apexmesh.pubsub.catalogue import SNAPSHOT_SCHEMA, unpack_id
from apexmesh.store.pubsub_snapshot import SnapshotMeta
from spark.layers import FORMAT, Kind, SnapshotInfo


class Why(enum.StrEnum):
    """Why a run is not incremental (the manifest's ``why``; empty when it is)."""

    NONE = ""
    NO_PREVIOUS = "no-previous-snapshot"
    FORMAT = "format"
    BROKEN_CHAIN = "missing-layer"
    GAP = "trimmed-log-gap"
    REDIS_BEHIND = "redis-snapshot-behind"
    LAYERS = "layers"


class PlanError(RuntimeError):
    """No sound start for a run exists; a person must look (the message says why)."""


@dataclass(frozen=True, slots=True)
class Plan:
    kind: Kind
    why: Why
    #: What the run's output and manifest say of the decision.
    reason: str
    #: Where the export starts (a packed id): the storage's export position, or the
    #: Redis snapshot's position after a gap.
    export_from: int
    #: Whether a full rebuild starts from the Redis snapshot (else from the log's start).
    seed_from_redis: bool = False


def redis_is_at(previous: SnapshotInfo, meta: SnapshotMeta | None) -> bool:
    """Whether the Redis snapshot is the one ``previous`` wrote (so that a change layer
    on ``previous`` changes it into the new one)."""
    return (
        meta is not None
        and meta.generation == previous.generation
        and meta.position == previous.position
    )


def plan_run(
    previous: SnapshotInfo | None,
    meta: SnapshotMeta | None,
    exported_to: int,
    *,
    compact_after: int,
    chain_readable: bool = True,
) -> Plan:
    """The run's plan (module docstring). ``previous`` is the storage's newest complete
    snapshot, ``meta`` the Redis snapshot's HASH, ``exported_to`` the storage's export
    position before this run's export, ``compact_after`` the most change layers a chain
    may have (0: every run writes a full layer), ``chain_readable`` whether every layer
    ``previous`` is read from is there."""
    gap = meta is not None and meta.trimmed > exported_to
    export_from = meta.position if gap and meta is not None else exported_to

    def full(why: Why, reason: str) -> Plan:
        if meta is not None and meta.schema != SNAPSHOT_SCHEMA:
            raise PlanError(
                f"a full rebuild is needed ({reason}), and the Redis snapshot it would "
                f"start from has rows of schema {meta.schema}, not {SNAPSHOT_SCHEMA}: run "
                "the job of that schema once, or remove the pubsub:snapshot HASH when the "
                "log still holds every event"
            )
        start = (
            f"from the Redis snapshot at {unpack_id(meta.position)}"
            if meta is not None
            else "from the log's first event"
        )
        return Plan(
            Kind.FULL, why, f"full rebuild {start}: {reason}", export_from, meta is not None
        )

    if previous is None:
        return full(Why.NO_PREVIOUS, "no previous snapshot in the storage")
    if previous.format != FORMAT:
        return full(
            Why.FORMAT,
            f"the previous snapshot {previous.directory} is of format {previous.format}, "
            f"this job writes format {FORMAT}",
        )
    if not chain_readable:
        return full(
            Why.BROKEN_CHAIN, f"a layer the previous snapshot {previous.directory} needs is gone"
        )
    if gap and meta is not None:
        return full(
            Why.GAP,
            f"the log is trimmed up to {unpack_id(meta.trimmed)}, but the storage's exports "
            f"end at {unpack_id(exported_to)}: the events between are in neither",
        )
    if not redis_is_at(previous, meta):
        return Plan(
            Kind.COMPACTED,
            Why.REDIS_BEHIND,
            f"compacted: the Redis snapshot is not {previous.directory}'s (a run died before "
            "its switch), so it is written whole",
            export_from,
        )
    if len(previous.layers) + 1 > compact_after:
        return Plan(
            Kind.COMPACTED,
            Why.LAYERS,
            f"compacted: {len(previous.layers)} change layers on {previous.base}, "
            f"at most {compact_after} kept (APEXMESH_SNAPSHOT_COMPACT_AFTER)",
            export_from,
        )
    return Plan(
        Kind.INCREMENTAL,
        Why.NONE,
        f"incremental on {previous.directory} (change layer {len(previous.layers) + 1} "
        f"on {previous.base})",
        export_from,
    )


__all__ = ["Plan", "PlanError", "Why", "plan_run", "redis_is_at"]
