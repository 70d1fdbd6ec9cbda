"""Moving closed ranges of the Redis event log into Parquet files, each exactly once.

Spark has no Redis connector here (no Maven access, shared/ECOSYSTEM.md section 5), so
the driver exports the log to the job's storage first. A range is *closed* once its last
id is at or below the last id the stream had generated when the export began: Redis
gives every later entry a larger id, so nothing can join a closed range afterwards.

Exactly once, whatever dies when:

- each file holds one contiguous range and is named by it
  (``events/<first>-<last>.parquet``, packed ids zero-padded so names sort as ids);
- a file is written under a temporary name and renamed into place, so a file is there
  whole or not at all (a temporary left by a dead job is removed by the next run);
- the export position is not kept anywhere else: it is the last id of the newest file.
  A job that died after a rename exports from after that file; one that died before it
  exports the range again. No range is exported twice, and none is skipped;
- the log is trimmed only after a snapshot covering the range is written and switched
  to (``spark/snapshot.py``), never by the exporter.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq
from redis.asyncio import Redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from apexmesh.pubsub.catalogue import EVENT_FIELDS_V2, pack_id, unpack_id
from apexmesh.store.keys import Keys
from spark import pause
from spark.storage import Storage

#: The directory of exported event files under the storage root.
EVENTS_DIR: Final = "events"
#: Entries read per XRANGE: a reply of a few hundred kilobytes, well inside a socket
#: timeout on a loaded machine.
READ_COUNT: Final = 2_000
#: Attempts per XRANGE that times out (a read: asking again is safe).
READ_ATTEMPTS: Final = 3

#: The exported files' schema: the packed stream id, then every v2 field as text.
EVENT_SCHEMA: Final = pa.schema(
    [pa.field("id", pa.int64(), nullable=False)]
    + [pa.field(name, pa.string(), nullable=False) for name in EVENT_FIELDS_V2]
)

_log = logging.getLogger(__name__)

_NAME: Final = re.compile(r"^(\d{20})-(\d{20})\.parquet$")


@dataclass(frozen=True, slots=True)
class ExportedRange:
    first: int
    last: int
    name: str


@dataclass(frozen=True, slots=True)
class ExportResult:
    files: tuple[str, ...]
    events: int
    position: int


def file_name(first: int, last: int) -> str:
    return f"{first:020d}-{last:020d}.parquet"


def exported(storage: Storage) -> list[ExportedRange]:
    """The exported ranges, oldest first (temporary files are not ranges)."""
    out = []
    for name in storage.list(EVENTS_DIR):
        found = _NAME.match(name)
        if found:
            out.append(ExportedRange(int(found[1]), int(found[2]), name))
    return sorted(out, key=lambda r: r.first)


def export_position(storage: Storage) -> int:
    """The last id exported (0 when nothing is)."""
    ranges = exported(storage)
    return ranges[-1].last if ranges else 0


def rows_after(storage: Storage, after: int) -> int:
    """Events in the exported ranges after the packed id ``after`` (read from the files'
    Parquet footers, not their data)."""
    return sum(
        pq.read_metadata(
            storage.path(f"{EVENTS_DIR}/{r.name}"), filesystem=storage.filesystem
        ).num_rows
        for r in exported(storage)
        if r.last > after
    )


def remove_temporaries(storage: Storage) -> int:
    """Remove what a dead run left half-written; the number removed."""
    names = [n for n in storage.list(EVENTS_DIR) if n.startswith(".tmp-")]
    for name in names:
        storage.delete(f"{EVENTS_DIR}/{name}")
    return len(names)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _table(entries: Sequence[tuple[int, dict[str, str]]]) -> pa.Table:
    columns: dict[str, list[Any]] = {"id": [packed for packed, _ in entries]}
    for name in EVENT_FIELDS_V2:
        columns[name] = [event.get(name, "") for _, event in entries]
    return pa.Table.from_pydict(columns, schema=EVENT_SCHEMA)


def write_range(storage: Storage, entries: Sequence[tuple[int, dict[str, str]]]) -> str:
    """Write one closed range as a file, visible once whole; its name."""
    name = file_name(entries[0][0], entries[-1][0])
    relative = f"{EVENTS_DIR}/{name}"
    temporary = storage.temporary(relative)
    pq.write_table(_table(entries), temporary, filesystem=storage.filesystem)
    pause.reached("export.publish")  # a test's kill point (spark/pause.py)
    storage.publish(temporary, relative)
    return name


async def read_log(
    redis: Redis, keys: Keys, after: int
) -> AsyncIterator[list[tuple[int, dict[str, str]]]]:
    """The event log's entries after the packed id ``after``, up to the last id the log
    had when this began (so every batch is of a closed range), in id order, in batches
    of at most :data:`READ_COUNT`: (packed id, fields).

    The one place the export reads the log: a log split into partitions (issue #30)
    changes this, not its callers."""
    key = keys.pubsub_events()
    newest = await redis.xrevrange(key, count=1)
    end = pack_id(_text(newest[0][0])) if newest else 0
    cursor = after
    while cursor < end:
        found: Any = None
        for attempt in range(1, READ_ATTEMPTS + 1):
            try:
                found = await redis.xrange(
                    key, min=f"({unpack_id(cursor)}", max=unpack_id(end), count=READ_COUNT
                )
                break
            except RedisTimeoutError:
                if attempt == READ_ATTEMPTS:
                    raise
                _log.warning(
                    "XRANGE after %s timed out (attempt %d): again", unpack_id(cursor), attempt
                )
        if not found:
            return
        batch = [
            (pack_id(_text(entry_id)), {_text(k): _text(v) for k, v in fields.items()})
            for entry_id, fields in found
        ]
        cursor = batch[-1][0]
        yield batch


async def export(
    redis: Redis, keys: Keys, storage: Storage, batch: int, *, start: int | None = None
) -> ExportResult:
    """Export every closed range after the export position (or after ``start``, a
    packed id at or after it: where a full rebuild restarts after a trimmed log gap,
    spark/plan.py), ``batch`` events a file."""
    remove_temporaries(storage)
    position = max(export_position(storage), start or 0)
    files: list[str] = []
    total = 0
    pending: list[tuple[int, dict[str, str]]] = []
    async for entries in read_log(redis, keys, position):
        pending += entries
        while len(pending) >= batch:
            files.append(write_range(storage, pending[:batch]))
            total += batch
            pending = pending[batch:]
    if pending:
        files.append(write_range(storage, pending))
        total += len(pending)
    return ExportResult(tuple(files), total, max(position, export_position(storage)))


__all__ = [
    "EVENTS_DIR",
    "EVENT_SCHEMA",
    "ExportResult",
    "ExportedRange",
    "export",
    "export_position",
    "exported",
    "file_name",
    "read_log",
    "remove_temporaries",
    "rows_after",
    "write_range",
]
