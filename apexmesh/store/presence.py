"""Redis repository of the presence service (RFC 3343 section 4: "persistent storage").

Presence entries, in-progress operations and the mesh-attached set are loaded once at
start into a :class:`~apexmesh.apex.presence_core.PresenceCore` and written back after
every change, all of one change in one MULTI/EXEC, before the service sends anything:
what a subscriber was told is never lost by a restart. Keys are named in
:mod:`apexmesh.store.keys`.

An entry is stored in two parts: its head (lastUpdate, publisherInfo and the tuples an
application published, at most 256) and the mesh's own tuples, one hash field each. A
pubsub service's entry holds a tuple per topic; storing it whole on every change would
write the whole entry for each topic created (quadratic in topics).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any, Final

from redis.asyncio import Redis

from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.presence import (
    Presence,
    PresenceTuple,
    check_timestamp,
    format_time,
    parse_presence,
    parse_tuple,
)
from apexmesh.apex.presence_core import Changes, InProgress, PresenceCore, destination_key
from apexmesh.store.keys import Keys

_log = logging.getLogger(__name__)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _field(originator: Endpoint, trans_id: int) -> str:
    return f"{originator} {trans_id}"


def _encode(op: InProgress) -> str:
    return json.dumps(
        {
            "kind": op.kind,
            "subject": str(op.subject),
            "duration": op.duration,
            "expires": format_time(op.expires),
        }
    )


def _decode(field: str, value: str) -> InProgress:
    originator, _, trans_id = field.rpartition(" ")
    data = json.loads(value)
    kind = data["kind"]
    if kind not in ("subscribe", "watch"):
        raise ValueError(f"bad kind {kind!r}")
    return InProgress(
        kind="subscribe" if kind == "subscribe" else "watch",
        originator=Endpoint.parse(originator),
        subject=Endpoint.parse(str(data["subject"])),
        trans_id=int(trans_id),
        duration=int(data["duration"]),
        expires=check_timestamp(str(data["expires"]), "expires"),
    )


def _head(core: PresenceCore, entry: Presence) -> str:
    return json.dumps(
        {
            "last_update": entry.last_update,
            "publisher_info": entry.publisher_info,
            "tuples": [t.to_xml().decode() for t in core.application_tuples(entry.publisher)],
        }
    )


class PresenceStore:
    """Loads and saves the presence state of one deployment."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self._redis = redis
        self._keys = keys
        self._missing = redis.register_script(_MISSING)

    async def load(self, domains: Iterable[str]) -> PresenceCore:
        """The core with everything stored; unreadable records are logged and skipped."""
        raw_entries = await self._redis.hgetall(self._keys.presence_entries())
        raw_ops = await self._redis.hgetall(self._keys.presence_operations())
        raw_attached = await self._redis.smembers(self._keys.presence_attached())
        legacy_meta = await self._redis.hgetall(self._keys.presence_meta())
        entries: list[Presence] = []
        mesh: dict[Endpoint, set[str]] = {}
        legacy: list[Endpoint] = []
        for field, value in raw_entries.items():
            try:
                subject = Endpoint.parse(_text(field))
                entry: Presence | None
                if _text(value).lstrip().startswith("<"):
                    entry, keys = self._legacy(value, legacy_meta.get(field))
                    legacy.append(subject)
                else:
                    entry, keys = await self._entry(subject, json.loads(_text(value)))
            except (ApexError, ValueError, KeyError, TypeError) as exc:
                _log.warning("skipping stored presence entry %r: %s", field[:128], exc)
                continue
            if entry is not None:
                entries.append(entry)
                mesh[subject] = keys
        operations = []
        for field, value in raw_ops.items():
            try:
                operations.append(_decode(_text(field), _text(value)))
            except (ValueError, KeyError, ApexError) as exc:
                _log.warning("skipping stored operation %r: %s", field[:128], exc)
        attached = []
        for member in raw_attached:
            try:
                attached.append(Endpoint.parse(_text(member)))
            except ValueError as exc:
                _log.warning("skipping stored attached endpoint: %s", exc)
        core = PresenceCore(
            domains, entries=entries, mesh=mesh, operations=operations, attached=attached
        )
        if legacy or legacy_meta:
            await self._rewrite(core, legacy)
        return core

    async def _entry(
        self, subject: Endpoint, head: dict[str, Any]
    ) -> tuple[Presence | None, set[str]]:
        raw = await self._redis.hgetall(self._keys.presence_tuples(str(subject)))
        own = [parse_tuple(str(text)) for text in head["tuples"]]
        kept: list[PresenceTuple] = []
        keys: set[str] = set()
        for key, value in raw.items():
            try:
                kept.append(parse_tuple(_text(value)))
            except ApexError as exc:
                _log.warning("skipping a stored tuple of %s: %s", subject, exc)
                continue
            keys.add(_text(key))
        if not own and not kept:
            return None, keys
        entry = Presence(
            publisher=subject,
            last_update=str(head["last_update"]),
            publisher_info=str(head.get("publisher_info", "")),
            tuples=(*own, *kept),
        )
        return entry, keys

    @staticmethod
    def _legacy(value: bytes | str, meta: bytes | str | None) -> tuple[Presence, set[str]]:
        entry = parse_presence(value)
        data = json.loads(_text(meta)) if meta is not None else {}
        return entry, {destination_key(str(d)) for d in data.get("mesh", [])}

    async def _rewrite(self, core: PresenceCore, subjects: list[Endpoint]) -> None:
        """Entries of the older layout are written in the present one, once."""
        changes = Changes(
            entries=set(subjects),
            tuples={(s, key) for s in subjects for key in core.mesh.get(s, ())},
        )
        await self.save(core, changes)
        await self._redis.delete(self._keys.presence_meta())
        _log.info("rewrote %d presence entries in the present layout", len(subjects))

    async def save(self, core: PresenceCore, changes: Changes) -> None:
        """Write what ``changes`` names, as the core now has it, in one transaction."""
        if not changes:
            return
        keys = self._keys
        async with self._redis.pipeline(transaction=True) as pipe:
            for subject in changes.entries:
                entry = core.entries.get(subject)
                if entry is None:
                    pipe.hdel(keys.presence_entries(), str(subject))
                    pipe.delete(keys.presence_tuples(str(subject)))
                else:
                    pipe.hset(keys.presence_entries(), str(subject), _head(core, entry))
            for subject, key in changes.tuples:
                found = core.tuple_of(subject, key) if key in core.mesh.get(subject, ()) else None
                if found is None:
                    pipe.hdel(keys.presence_tuples(str(subject)), key)
                else:
                    pipe.hset(keys.presence_tuples(str(subject)), key, found.to_xml())
            for originator, trans_id in changes.operations:
                op = core.operations.get((originator, trans_id))
                name = _field(originator, trans_id)
                if op is None:
                    pipe.hdel(keys.presence_operations(), name)
                else:
                    pipe.hset(keys.presence_operations(), name, _encode(op))
            for endpoint in changes.attached:
                if endpoint in core.attached:
                    pipe.sadd(keys.presence_attached(), str(endpoint))
                else:
                    pipe.srem(keys.presence_attached(), str(endpoint))
            await pipe.execute()

    async def lapsed(self, endpoints: Iterable[Endpoint]) -> list[Endpoint]:
        """Those of ``endpoints`` whose attachment key is gone (lease lapsed, pod died).

        One script per :data:`LAPSED_BATCH` endpoints answers with the positions of the
        missing keys only: the check runs every lease interval over every attached
        endpoint, and one command per endpoint cost a Python round of packing and
        parsing each (0.1 core for 1,000 attachments)."""
        listed = list(endpoints)
        gone: list[Endpoint] = []
        for start in range(0, len(listed), LAPSED_BATCH):
            batch = listed[start : start + LAPSED_BATCH]
            keys = [self._keys.attachment(str(endpoint)) for endpoint in batch]
            missing = await self._missing(keys=keys)
            gone += (batch[int(index) - 1] for index in missing)
        return gone


#: Attachment keys checked by one script call (see :meth:`PresenceStore.lapsed`).
LAPSED_BATCH: Final = 1000

# KEYS: attachment keys. Returns the (1-based) positions of those that do not exist.
_MISSING: Final = """
local missing = {}
for index, key in ipairs(KEYS) do
    if redis.call('EXISTS', key) == 0 then
        missing[#missing + 1] = index
    end
end
return missing
"""


__all__ = ["PresenceStore"]
