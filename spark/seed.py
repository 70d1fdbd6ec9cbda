"""The start of a full rebuild when the log no longer reaches back to its first event:
the Redis snapshot the pods use, written by the driver as a full layer's Parquet for the
fold to read (docs/snapshot.md "Incremental runs", spark/plan.py).

The Redis snapshot is complete up to its position (it is switched to only once whole,
and the log is trimmed only up to what it covers), so it plus every event after it is
the whole catalogue, whatever became of the storage. Its rows may be the catalogue's
state rather than what lives (an incremental run changes it in place): read as the
creations that set them, they fold into the same catalogue.

This is the one step of the job that reads the whole catalogue through the driver (an
``HSCAN`` of both hashes): a full rebuild is rare, and this one is what a lost or
restored storage costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.types import BooleanType, LongType, StructType

from apexmesh.store.pubsub_snapshot import SnapshotStore
from spark.fold import SUBSCRIPTION_SCHEMA, TOPIC_SCHEMA
from spark.layers import FULL_SUBSCRIPTIONS, FULL_TOPICS
from spark.storage import Storage

#: Where a full rebuild's seed goes, under the new snapshot's directory (removed once
#: the snapshot's layer is written).
SEED_DIR: Final = ".seed"


@dataclass(frozen=True, slots=True)
class Seed:
    """What was read: the Redis snapshot's position and its rows."""

    position: int
    topics: int
    subscriptions: int


def arrow_schema(schema: StructType) -> pa.Schema:
    """A Spark schema of longs, booleans and strings as Arrow's (not nullable)."""

    def kind(field: Any) -> pa.DataType:
        if isinstance(field.dataType, LongType):
            return pa.int64()
        if isinstance(field.dataType, BooleanType):
            return pa.bool_()
        return pa.string()

    return pa.schema([pa.field(f.name, kind(f), nullable=False) for f in schema.fields])


def _write(storage: Storage, relative: str, schema: StructType, rows: list[Any]) -> None:
    arrow = arrow_schema(schema)
    columns = {name: [getattr(row, name) for row in rows] for name in arrow.names}
    storage.mkdirs(relative)
    pq.write_table(
        pa.Table.from_pydict(columns, schema=arrow),
        f"{storage.path(relative)}/part-00000.parquet",
        filesystem=storage.filesystem,
    )


async def write_seed(store: SnapshotStore, storage: Storage, relative: str) -> Seed:
    """Read the current Redis snapshot whole and write it under ``relative`` as a full
    layer (``topics/``, ``subscriptions/``). Raises when Redis has none (the plan seeds
    only when it had one)."""
    catalogue = await store.load()
    if catalogue is None:
        raise RuntimeError("the Redis snapshot to rebuild from is gone")
    _write(storage, f"{relative}/{FULL_TOPICS}", TOPIC_SCHEMA, list(catalogue.topics.values()))
    _write(
        storage,
        f"{relative}/{FULL_SUBSCRIPTIONS}",
        SUBSCRIPTION_SCHEMA,
        list(catalogue.subscriptions.values()),
    )
    return Seed(catalogue.position, len(catalogue.topics), len(catalogue.subscriptions))


__all__ = ["SEED_DIR", "Seed", "arrow_schema", "write_seed"]
