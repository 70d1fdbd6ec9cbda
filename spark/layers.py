"""Layered snapshots (format 2): what a snapshot directory holds, how its manifest
describes it, and how a snapshot's catalogue is read back (docs/snapshot.md
"Incremental runs").

This module writes the layers (Spark) and reads them back (Spark, or the driver for the
Redis snapshot). A snapshot is ``snapshots/<snapshot_ms>/`` with ``manifest.json`` and
``_SUCCESS``, and one *layer*:

- a **full** layer (a full rebuild, or a compaction): ``topics/`` and ``subscriptions/``,
  the catalogue alive at the snapshot's time, as format 1 had it;
- a **change** layer (an incremental run): ``changes/topics/`` and
  ``changes/subscriptions/``, per key touched by the events after the previous
  snapshot, the last event's row and whether the key still exists (spark/fold.py
  ``changes``). Its size follows the new events, not the catalogue.

The manifest names the full layer a snapshot builds on (``base``, itself for a full
one) and the change layers after it, oldest first (``layers``, itself last). Its
catalogue is the fold of those layers at its time (:func:`read_view`): a full layer's
rows read as the creations that set them, a change layer's as the last events of their
keys, the latest per key winning, leases and topics judged at the snapshot's time, as
the rule of apexmesh/pubsub/catalogue.py says. So a chain of layers folds exactly as
the whole log would, and retention must keep every layer a kept snapshot names
(:func:`needed`).

Format 1 (the manifests before this one carry no ``format``) is one full layer per
snapshot. A job never builds on a snapshot of another format: it rebuilds in full
(spark/plan.py) and says so.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow.dataset as pads
from pyspark.sql import DataFrame, SparkSession

from apexmesh.pubsub.catalogue import SubscriptionRow, TopicRow
from spark.fold import (
    SUBSCRIPTION_CHANGE_SCHEMA,
    SUBSCRIPTION_SCHEMA,
    TOPIC_CHANGE_SCHEMA,
    TOPIC_SCHEMA,
    Folded,
    History,
    changes,
    history_of_changes,
    history_of_rows,
    live_subscriptions_and_ids,
    live_topics,
)
from spark.storage import Storage

#: The layout this job writes (the manifest's ``format``).
FORMAT: Final = 2
SNAPSHOTS_DIR: Final = "snapshots"
MANIFEST: Final = "manifest.json"
SUCCESS: Final = "_SUCCESS"
#: A full layer's tables, under the snapshot's directory.
FULL_TOPICS: Final = "topics"
FULL_SUBSCRIPTIONS: Final = "subscriptions"
#: A change layer's tables, under the snapshot's directory.
CHANGED_TOPICS: Final = "changes/topics"
CHANGED_SUBSCRIPTIONS: Final = "changes/subscriptions"


class Kind(enum.StrEnum):
    """What a run wrote (the manifest's ``kind``)."""

    #: A full layer folded without a previous snapshot: from the log's first event, or
    #: from the Redis snapshot the pods use and the events after it.
    FULL = "full"
    #: A change layer on the previous snapshot.
    INCREMENTAL = "incremental"
    #: A full layer folded from the previous snapshot's layers and the new events.
    COMPACTED = "compacted"


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A complete snapshot of the storage, from its manifest."""

    directory: str
    snapshot_ms: int
    position: int
    topics: int
    subscriptions: int
    format: int = FORMAT
    kind: Kind = Kind.FULL
    #: The full layer this snapshot builds on (its own directory when it is full).
    base: str = ""
    #: The change layers after ``base``, oldest first (this one last when incremental).
    layers: tuple[str, ...] = ()
    #: The Redis generation the run wrote or changed.
    generation: str = ""

    @classmethod
    def from_manifest(cls, directory: str, manifest: Mapping[str, Any]) -> SnapshotInfo:
        """Any format's manifest (format 1 has no ``format``, ``kind`` or layers: one
        full layer)."""
        return cls(
            directory=directory,
            snapshot_ms=int(manifest["snapshot_ms"]),
            position=int(manifest["position_packed"]),
            topics=int(manifest["topics"]),
            subscriptions=int(manifest["subscriptions"]),
            format=int(manifest.get("format", 1)),
            kind=Kind(manifest.get("kind", Kind.FULL)),
            base=str(manifest.get("base", directory)),
            layers=tuple(str(layer) for layer in manifest.get("layers", ())),
            generation=str(manifest.get("generation", "")),
        )

    @property
    def chain(self) -> tuple[str, ...]:
        """Every directory this snapshot's catalogue is read from, base first."""
        return (self.base, *self.layers) if self.layers else (self.base,)


def snapshots(storage: Storage) -> list[SnapshotInfo]:
    """The complete snapshots of the storage, oldest first (a directory without
    ``_SUCCESS`` is not one)."""
    out = []
    for name in storage.list(SNAPSHOTS_DIR):
        directory = f"{SNAPSHOTS_DIR}/{name}"
        if not name.isdigit() or not storage.exists(f"{directory}/{SUCCESS}"):
            continue
        out.append(
            SnapshotInfo.from_manifest(directory, storage.read_json(f"{directory}/{MANIFEST}"))
        )
    return sorted(out, key=lambda s: s.snapshot_ms)


def readable(storage: Storage, info: SnapshotInfo) -> bool:
    """Whether every layer of ``info``'s chain is there, complete."""
    return all(storage.exists(f"{directory}/{SUCCESS}") for directory in info.chain)


def chain_rows(storage: Storage, info: SnapshotInfo) -> int:
    """Rows of every layer ``info`` is read from (what folding them reads)."""
    total = 0
    for directory in info.chain:
        manifest = storage.read_json(f"{directory}/{MANIFEST}")
        total += int(manifest["topics"]) + int(manifest["subscriptions"])
    return total


def needed(kept: Iterable[SnapshotInfo]) -> set[str]:
    """The directories the ``kept`` snapshots are read from (theirs and their chains')."""
    return {directory for info in kept for directory in (info.directory, *info.chain)}


def history(spark: SparkSession, storage: Storage, info: SnapshotInfo) -> History:
    """The layers of ``info`` read as one history (module docstring); format 2 only."""
    if info.format != FORMAT:
        raise ValueError(f"{info.directory} is of format {info.format}, not {FORMAT}")

    def table(directory: str, name: str, schema: Any) -> Any:
        return spark.read.schema(schema).parquet(storage.spark_url(f"{directory}/{name}"))

    found = history_of_rows(
        table(info.base, FULL_TOPICS, TOPIC_SCHEMA),
        table(info.base, FULL_SUBSCRIPTIONS, SUBSCRIPTION_SCHEMA),
    )
    for layer in info.layers:
        found = found.union(
            history_of_changes(
                table(layer, CHANGED_TOPICS, TOPIC_CHANGE_SCHEMA),
                table(layer, CHANGED_SUBSCRIPTIONS, SUBSCRIPTION_CHANGE_SCHEMA),
            )
        )
    return found


def read_view(spark: SparkSession, storage: Storage, info: SnapshotInfo) -> Folded:
    """The catalogue of snapshot ``info`` at its time, whatever its layers: what an
    operator reads to see "what it looked like at 03:00" (unpersist its ``ids`` once
    done with it)."""
    found = history(spark, storage, info)
    topics = live_topics(found)
    subscriptions, ids = live_subscriptions_and_ids(found, info.snapshot_ms, topics)
    return Folded(topics, subscriptions, ids)


def _rows(storage: Storage, relative: str) -> Iterator[dict[str, Any]]:
    dataset = pads.dataset(storage.path(relative), format="parquet", filesystem=storage.filesystem)
    for batch in dataset.to_batches():
        yield from batch.to_pylist()


def read_topics(storage: Storage, directory: str) -> Iterator[TopicRow]:
    """A full layer's topics, read by the driver."""
    for row in _rows(storage, f"{directory}/{FULL_TOPICS}"):
        yield TopicRow(**row)


def read_subscriptions(storage: Storage, directory: str) -> Iterator[SubscriptionRow]:
    """A full layer's subscriptions, read by the driver."""
    for row in _rows(storage, f"{directory}/{FULL_SUBSCRIPTIONS}"):
        yield SubscriptionRow(**row)


def read_topic_changes(storage: Storage, directory: str) -> Iterator[tuple[TopicRow, bool]]:
    """A change layer's topics, each with whether it exists."""
    for row in _rows(storage, f"{directory}/{CHANGED_TOPICS}"):
        exists = bool(row.pop("exists"))
        row.pop("settings_id", None)  # the row's settings are already the latest
        yield TopicRow(**row), exists


def read_subscription_changes(
    storage: Storage, directory: str
) -> Iterator[tuple[SubscriptionRow, bool]]:
    """A change layer's subscriptions, each with whether it is open."""
    for row in _rows(storage, f"{directory}/{CHANGED_SUBSCRIPTIONS}"):
        is_open = bool(row.pop("open"))
        yield SubscriptionRow(**row), is_open


def write_full(spark: SparkSession, found: History, at_ms: int, url: str) -> None:
    """Fold ``found`` at ``at_ms`` into a full layer under ``url``: the topics first, then
    the subscriptions joined with the topics just written, read back (spark/fold.py: the
    history is scanned for topics once, and the small topics join by broadcast). The
    subscriptions' winning ids stay cached during their write and are released after
    it."""
    live_topics(found).write.mode("overwrite").parquet(f"{url}/{FULL_TOPICS}")
    written = spark.read.schema(TOPIC_SCHEMA).parquet(f"{url}/{FULL_TOPICS}")
    subscriptions, ids = live_subscriptions_and_ids(found, at_ms, written)
    try:
        subscriptions.write.mode("overwrite").parquet(f"{url}/{FULL_SUBSCRIPTIONS}")
    finally:
        ids.unpersist()


def write_changes(found: History, previous_topics: DataFrame, url: str) -> None:
    """The change layer of ``found`` (the events after the previous snapshot, whose
    topics are ``previous_topics``) under ``url``: per key, its last event and whether
    the key is still there."""
    topics, subscriptions = changes(found, previous_topics)
    topics.write.mode("overwrite").parquet(f"{url}/{CHANGED_TOPICS}")
    subscriptions.write.mode("overwrite").parquet(f"{url}/{CHANGED_SUBSCRIPTIONS}")


__all__ = [
    "CHANGED_SUBSCRIPTIONS",
    "CHANGED_TOPICS",
    "FORMAT",
    "FULL_SUBSCRIPTIONS",
    "FULL_TOPICS",
    "MANIFEST",
    "SNAPSHOTS_DIR",
    "SUCCESS",
    "Kind",
    "SnapshotInfo",
    "chain_rows",
    "history",
    "needed",
    "read_subscription_changes",
    "read_subscriptions",
    "read_topic_changes",
    "read_topics",
    "read_view",
    "readable",
    "snapshots",
    "write_changes",
    "write_full",
]
