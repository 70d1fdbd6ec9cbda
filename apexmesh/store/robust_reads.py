"""The read side of a robust topic's state in Redis: what a gap repair redelivers
(XEP-0040 2.4; docs/robust.md "Gap fill").

Both kinds of repair are read **page by page** (:data:`PAGE` entries a call), so a pod
holds one page of a repair at a time, whatever its length:

- **by link range**: :meth:`RobustReads.link_seqs` says which link seqs a request
  covers (so the answer can say how many before the first is redelivered), and
  :meth:`RobustReads.link_pages` turns them into the stream entries they carried (the
  link record's ``l:<seq>`` fields, then one ``XRANGE`` each), bounded per request by
  :data:`MAX_GAP` link seqs (the stub asks in pieces);
- **by source**: :meth:`RobustReads.source_span` finds where the repair starts (the
  latest of the subscriber's named positions, scanning back from the stream's end) and
  where it ends (the stream's last entry when asked), and :meth:`RobustReads.span_pages`
  reads the entries in between forward. No bound but the topic's retention: a source
  repair is the last-ditch one (XEP 2.4 "all is not lost"), and a subscriber away for
  longer than any fixed bound must still get everything the stream kept. The span's end
  is fixed when it is found, so a repair ends even while publications go on (what comes
  after reaches the subscriber live).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from redis.asyncio import Redis

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.pubsub.robust.elements import MAX_GAP
from apexmesh.pubsub.robust.permissions import PermissionTable
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.store.robust_keys import RobustKeys

#: Entries read per XRANGE/XREVRANGE call when scanning the stream.
PAGE: Final = 1_000
#: The field of a topic's source counters holding its last publication's position
#: (``"source seq"``; not an endpoint, so no publisher's counter).
LAST_FIELD: Final = "~last"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One entry of a topic's stream."""

    id: str
    fields: Mapping[str, bytes]

    @property
    def kind(self) -> str:
        return self.fields.get("kind", b"").decode()

    @property
    def source(self) -> str:
        return self.fields.get("source", b"").decode()

    @property
    def source_seq(self) -> int:
        return int(self.fields.get("seq", b"0") or 0)

    @property
    def prev(self) -> str:
        """``"source seq"`` of the publication before this entry ("" for the first)."""
        return self.fields.get("prev", b"").decode()

    def permissions(self) -> PermissionTable | None:
        """The table a ``perm`` entry sequenced (None for a publication)."""
        if self.kind != "perm":
            return None
        return PermissionTable.from_json(json.loads(self.fields.get("table", b"{}")))

    @property
    def payload(self) -> bytes:
        return self.fields.get("payload", b"")

    def payload_text(self) -> str:
        return self.payload.decode("utf-8", "replace")


def stream_entry(raw: Sequence[object]) -> StreamEntry:
    entry_id, fields = raw[0], raw[1]
    if not isinstance(fields, Mapping):  # redis-py's XRANGE shape is (id, {field: value})
        raise TypeError(f"unexpected stream entry {raw!r:.80}")
    return StreamEntry(_text(entry_id), {_text(k): bytes(v) for k, v in fields.items()})


class LinkGone(Exception):  # noqa: N818 - a condition, answered 550 by the caller
    """The link context expired, or is in another epoch."""


class BeyondRetention(Exception):  # noqa: N818
    """The range asked for was trimmed from the link record or the stream."""


@dataclass(frozen=True, slots=True)
class StreamSpan:
    """The entries a source repair redelivers: after ``after`` (exclusive; None: from
    the stream's first entry) up to ``last`` (inclusive; None: the stream is empty)."""

    after: str | None
    last: str | None
    #: Whether a ``perm`` entry lies in the span (the repair then needs the table in
    #: force before it: docs/robust.md "Gap fill").
    changes_permissions: bool


# KEYS: link. ARGV: epoch ("" = any), link seqs... Returns {status, values...}:
# 'gone' (no context / other epoch), 'trimmed' (a seq left the record), else 'ok' + ids.
_READ_LINK: Final = """
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if not epoch or (ARGV[1] ~= '' and epoch ~= ARGV[1]) then return {'gone'} end
local out = {'ok', epoch, redis.call('HGET', KEYS[1], 'seq')}
for i = 2, #ARGV do
    local value = redis.call('HGET', KEYS[1], 'l:' .. ARGV[i])
    if not value then return {'trimmed'} end
    out[#out + 1] = value
end
return out
"""


# KEYS: stream. ARGV: upper bound ('+' or '(id'), count, wanted positions ("source seq")...
# One page of a backward scan, in the server: only ids and flags come back, never the
# payloads of a long repair's entries. Returns {'found', count, newest id, perm passed,
# found id} or {'page', count, newest id, perm passed, oldest id, oldest's prev}.
_SCAN_BACK: Final = """
local page = redis.call('XREVRANGE', KEYS[1], ARGV[1], '-', 'COUNT', ARGV[2])
local wanted = {}
for i = 3, #ARGV do wanted[ARGV[i]] = true end
local newest, oldest, prev, perm = '', '', '', 0
for _, entry in ipairs(page) do
    local fields = entry[2]
    local kind, source, seq, before = '', '', '', ''
    for j = 1, #fields, 2 do
        local name = fields[j]
        if name == 'kind' then kind = fields[j + 1]
        elseif name == 'source' then source = fields[j + 1]
        elseif name == 'seq' then seq = fields[j + 1]
        elseif name == 'prev' then before = fields[j + 1] end
    end
    if kind == 'pub' and wanted[source .. ' ' .. seq] then
        return {'found', #page, newest, perm, entry[1]}
    end
    if newest == '' then newest = entry[1] end
    if kind == 'perm' then perm = 1 end
    oldest, prev = entry[1], before
end
return {'page', #page, newest, perm, oldest, prev}
"""


class RobustReads:
    """Reads of robust topics' streams and link records (any pod; never numbers)."""

    def __init__(self, redis: Redis, keys: RobustKeys) -> None:
        self._redis = redis
        self.keys = keys
        self._read_link = redis.register_script(_READ_LINK)
        self._scan_back = redis.register_script(_SCAN_BACK)

    # ------------------------------------------------------------------ by link range

    async def link_seqs(
        self,
        domain: str,
        topic: str,
        subscriber: str,
        *,
        first: int,
        last: int | None,
        epoch: int | None,
        resolution: Resolution,
    ) -> list[int]:
        """The link seqs ``first .. last`` (None: up to the link's current seq), in
        order (wrapping at the resolution). Raises :class:`LinkGone` (no context, or
        another epoch), 553 past MAX_GAP."""
        key = self.keys.link(domain, topic, subscriber)
        head = await self._read_link(keys=[key], args=["" if epoch is None else epoch])
        if _text(head[0]) == "gone":
            raise LinkGone(subscriber)
        current = int(head[2])
        if last is None and first == resolution.next(current):
            return []  # an open range from the next number: nothing is missing yet
        end = current if last is None else last
        seqs: list[int] = []
        seq = first
        while True:
            seqs.append(seq)
            if seq == end:
                return seqs
            if len(seqs) >= MAX_GAP:
                _dtd.fail("gap: more than MAX_GAP link seqs", ApexReplyCode.PARAMETER_INVALID)
            seq = resolution.next(seq)

    async def link_pages(
        self, domain: str, topic: str, subscriber: str, seqs: Sequence[int], epoch: int | None
    ) -> AsyncIterator[list[tuple[int, StreamEntry | None]]]:
        """What ``seqs`` (:meth:`link_seqs`) of the link carried, in order, a page at a
        time: the stream entry, or None for a heartbeat. Raises :class:`LinkGone` (the
        context went meanwhile) or :class:`BeyondRetention` (a seq left the record or
        its entry the stream), both 550 to the requester."""
        key = self.keys.link(domain, topic, subscriber)
        stream = self.keys.stream(domain, topic)
        for start in range(0, len(seqs), PAGE):
            chunk = seqs[start : start + PAGE]
            raw = await self._read_link(keys=[key], args=["" if epoch is None else epoch, *chunk])
            status = _text(raw[0])
            if status == "gone":
                raise LinkGone(subscriber)
            if status == "trimmed":
                raise BeyondRetention(subscriber)
            pipe = self._redis.pipeline(transaction=False)
            ids = [_text(value) for value in raw[3:]]
            for entry_id in ids:
                if entry_id != "hb":
                    pipe.xrange(stream, entry_id, entry_id)
            found = iter(await pipe.execute())
            page: list[tuple[int, StreamEntry | None]] = []
            for link_seq, entry_id in zip(chunk, ids, strict=True):
                if entry_id == "hb":
                    page.append((link_seq, None))
                    continue
                rows = next(found)
                if not rows:
                    raise BeyondRetention(entry_id)
                page.append((link_seq, stream_entry(rows[0])))
            yield page

    async def read_link_range(
        self,
        domain: str,
        topic: str,
        subscriber: str,
        *,
        first: int,
        last: int | None,
        epoch: int | None,
        resolution: Resolution,
    ) -> list[tuple[int, StreamEntry | None]]:
        """:meth:`link_seqs` and their :meth:`link_pages` at once (a source query's one
        position, tests)."""
        seqs = await self.link_seqs(
            domain, topic, subscriber, first=first, last=last, epoch=epoch, resolution=resolution
        )
        out: list[tuple[int, StreamEntry | None]] = []
        async for page in self.link_pages(domain, topic, subscriber, seqs, epoch):
            out.extend(page)
        return out

    # ------------------------------------------------------------------ by source

    async def source_span(
        self, domain: str, topic: str, positions: Sequence[tuple[str, int]]
    ) -> StreamSpan:
        """The span after the latest of ``positions`` ((source, source seq) a subscriber
        last received) up to the stream's end now; everything retained when
        ``positions`` is empty. Scans back from the end a page at a time in the server
        (a script per page: only ids and flags come back), keeping nothing but whether
        a ``perm`` entry was passed, so the cost follows the repair's length.

        A position trimmed from the stream is still served when the first entry kept
        came right after it (its ``prev``): nothing after it was lost. That is the
        common case, not a corner: a link context lapses only after ``retainms``
        without a number (its TTL is at least that), so the position a stub names after
        a resync is about ``retainms`` old, and the age trim may just have taken it
        while keeping everything after. Raises :class:`BeyondRetention` when none of
        the positions is retained or followed by the first entry kept."""
        stream = self.keys.stream(domain, topic)
        wanted = [f"{source} {seq}" for source, seq in positions]
        last: str | None = None
        prev: str | None = None  # of the oldest entry passed (None: none passed)
        perm = False
        upper = "+"
        while True:
            raw = await self._scan_back(keys=[stream], args=[upper, PAGE, *wanted])
            status, count = _text(raw[0]), int(raw[1])
            newest, passed_perm = _text(raw[2]), bool(int(raw[3]))
            last = last or newest or None
            perm = perm or passed_perm
            if status == "found":
                return StreamSpan(after=_text(raw[4]), last=last, changes_permissions=perm)
            if count == 0:
                if wanted and await self._latest_before(domain, topic, prev) not in wanted:
                    raise BeyondRetention(topic)
                return StreamSpan(after=None, last=last, changes_permissions=perm)
            upper, prev = "(" + _text(raw[4]), _text(raw[5])

    async def _latest_before(self, domain: str, topic: str, prev: str | None) -> str:
        """``"source seq"`` of the last publication before the stream's first entry
        kept (``prev``, that entry's), or before now when none is kept (every entry
        trimmed, none published since)."""
        if prev is not None:
            return prev
        raw = await self._redis.hget(self.keys.sources(domain, topic), LAST_FIELD)
        return "" if raw is None else _text(raw)

    async def span_pages(
        self, domain: str, topic: str, span: StreamSpan
    ) -> AsyncIterator[list[StreamEntry]]:
        """The entries of ``span``, oldest first, a page at a time. An entry trimmed
        meanwhile is not there (the repair then delivers on from what is)."""
        if span.last is None:
            return
        stream = self.keys.stream(domain, topic)
        lower = "-" if span.after is None else "(" + span.after
        while True:
            page = await self._redis.xrange(stream, lower, span.last, count=PAGE)
            if not page:
                return
            yield [stream_entry(raw) for raw in page]
            if len(page) < PAGE:
                return
            lower = "(" + _text(page[-1][0])

    async def read_after(
        self, domain: str, topic: str, positions: Sequence[tuple[str, int]]
    ) -> list[StreamEntry]:
        """Every entry of :meth:`source_span` at once (tests, small topics)."""
        span = await self.source_span(domain, topic, positions)
        out: list[StreamEntry] = []
        async for page in self.span_pages(domain, topic, span):
            out.extend(page)
        return out


__all__ = [
    "LAST_FIELD",
    "PAGE",
    "BeyondRetention",
    "LinkGone",
    "RobustReads",
    "StreamEntry",
    "StreamSpan",
    "stream_entry",
]
