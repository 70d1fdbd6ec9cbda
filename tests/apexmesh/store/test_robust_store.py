"""Robust pubsub state in Redis (real redis-server): durable commits with source seqs,
link seqs per recipient (permission skips, wrap, resync in a new epoch), heartbeats,
retention, gap reads by link range and by source, images, the sequencer lease."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from apexmesh.pubsub.robust.elements import MAX_GAP
from apexmesh.pubsub.robust.permissions import (
    ChangeKind,
    PermissionChange,
    PermissionTable,
    actor_of,
)
from apexmesh.pubsub.robust.publish_types import Image
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.store.keys import Keys
from apexmesh.store.robust import (
    BeyondRetention,
    LinkGone,
    LinkSeq,
    NotOwner,
    Retention,
    RobustStore,
)
from apexmesh.store.robust_reads import PAGE

pytestmark = pytest.mark.integration

D, T = "example.com", "data.topics"
A, B = "publisher@fromaplace.net", "publisher@elsewhere.net"
ALICE, BOB = "alice@example.com", "bob@example.com"
KEEP = Retention(count=1_000, ms=3_600_000, link_ttl_ms=60_000)


async def _store(redis: Redis, keys: Keys, pod: str = "pod-a") -> RobustStore:
    store = RobustStore(redis, keys, pod)
    assert await store.own(D, T, 10_000)
    return store


async def _publish(
    store: RobustStore, source: str, n: int, subs: list[tuple[str, bool]], **kw: object
):  # type: ignore[no-untyped-def]
    return await store.commit_publication(
        D,
        T,
        source=source,
        payload=f"{source} {n}".encode(),
        now_ms=1_000_000 + n,
        resolution=kw.pop("resolution", Resolution.BITS32),  # type: ignore[arg-type]
        retention=kw.pop("retention", KEEP),  # type: ignore[arg-type]
        subscribers=subs,
        **kw,  # type: ignore[arg-type]
    )


async def test_source_seqs_per_publisher_and_link_seqs_per_subscriber(
    redis: Redis, keys: Keys
) -> None:
    store = await _store(redis, keys)
    subs = [(ALICE, True), (BOB, True)]
    first = await _publish(store, A, 1, subs)
    assert first.source_seq == 1
    assert first.links == (LinkSeq(0, 1), LinkSeq(0, 1))
    second = await _publish(store, B, 2, subs)
    assert second.source_seq == 1
    third = await _publish(store, A, 3, [(ALICE, True), (BOB, False)])
    assert third.source_seq == 2
    assert third.links == (LinkSeq(2, 1), None)
    fourth = await _publish(store, A, 4, subs)
    # Bob's skipped publication took no number.
    assert fourth.links == (LinkSeq(3, 1), LinkSeq(2, 1))
    assert await store.source_seq(D, T, A) == 3


async def test_a_pod_without_the_lease_cannot_number(redis: Redis, keys: Keys) -> None:
    await _store(redis, keys, "pod-a")
    other = RobustStore(redis, keys, "pod-b")
    assert not await other.own(D, T, 10_000)
    with pytest.raises(NotOwner):
        await _publish(other, A, 1, [(ALICE, True)])
    with pytest.raises(NotOwner):
        await other.commit_heartbeats(D, T, [ALICE], resolution=Resolution.BITS32, retention=KEEP)
    first = RobustStore(redis, keys, "pod-a")
    await first.release(D, T)
    assert await other.own(D, T, 10_000)
    assert (await _publish(other, A, 1, [(ALICE, True)])).source_seq == 1


async def test_heartbeats_advance_links_and_gap_by_link_range_returns_both(
    redis: Redis, keys: Keys
) -> None:
    store = await _store(redis, keys)
    await _publish(store, A, 1, [(ALICE, True)])
    beats = await store.commit_heartbeats(
        D, T, [ALICE], resolution=Resolution.BITS32, retention=KEEP
    )
    assert beats == (LinkSeq(1, 1),)
    await _publish(store, A, 2, [(ALICE, True)])
    rows = await store.read_link_range(
        D, T, ALICE, first=0, last=2, epoch=1, resolution=Resolution.BITS32
    )
    assert [(seq, None if e is None else e.payload_text()) for seq, e in rows] == [
        (0, f"{A} 1"),
        (1, None),
        (2, f"{A} 2"),
    ]


async def test_open_range_and_wrong_epoch_and_expired_context(redis: Redis, keys: Keys) -> None:
    store = await _store(redis, keys)
    for n in range(3):
        await _publish(store, A, n, [(ALICE, True)])
    rows = await store.read_link_range(
        D, T, ALICE, first=1, last=None, epoch=None, resolution=Resolution.BITS32
    )
    assert [seq for seq, _ in rows] == [1, 2]
    with pytest.raises(LinkGone):
        await store.read_link_range(
            D, T, ALICE, first=1, last=2, epoch=7, resolution=Resolution.BITS32
        )
    await redis.delete(store.keys.link(D, T, ALICE))  # the context expired
    with pytest.raises(LinkGone):
        await store.read_link_range(
            D, T, ALICE, first=1, last=2, epoch=1, resolution=Resolution.BITS32
        )
    # The next delivery restarts the link at 0 in a new epoch (never mistaken for epoch 1).
    again = await _publish(store, A, 9, [(ALICE, True)])
    assert again.links == (LinkSeq(0, 2),)
    await store.end_link(D, T, ALICE)
    fresh = await _publish(store, A, 10, [(ALICE, True)])
    assert fresh.links == (LinkSeq(0, 1),)


async def test_link_seqs_wrap_to_one_at_the_resolution(redis: Redis, keys: Keys) -> None:
    store = await _store(redis, keys)
    await _publish(store, A, 0, [(ALICE, True)], resolution=Resolution.BITS16)
    await redis.hset(store.keys.link(D, T, ALICE), "seq", 65534)
    seqs = [
        (await _publish(store, A, n, [(ALICE, True)], resolution=Resolution.BITS16)).links[0]
        for n in range(1, 4)
    ]
    assert [s.seq for s in seqs if s is not None] == [65535, 1, 2]
    rows = await store.read_link_range(
        D, T, ALICE, first=65535, last=2, epoch=1, resolution=Resolution.BITS16
    )
    assert [seq for seq, _ in rows] == [65535, 1, 2]


async def test_retention_bounds_the_stream_and_the_link_record(redis: Redis, keys: Keys) -> None:
    store = await _store(redis, keys)
    small = Retention(count=10, ms=3_600_000, link_ttl_ms=60_000)
    for n in range(300):
        await _publish(store, A, n, [(ALICE, True)], retention=small)
    assert await redis.xlen(store.keys.stream(D, T)) < 300
    with pytest.raises(BeyondRetention):
        await store.read_link_range(
            D, T, ALICE, first=1, last=5, epoch=1, resolution=Resolution.BITS32
        )
    rows = await store.read_link_range(
        D, T, ALICE, first=295, last=299, epoch=1, resolution=Resolution.BITS32
    )
    assert len(rows) == 5
    assert await redis.hlen(store.keys.link(D, T, ALICE)) <= 10 + 3


async def test_gap_by_source_resumes_after_the_latest_named_position_for_every_source(
    redis: Redis, keys: Keys
) -> None:
    store = await _store(redis, keys)
    order = [A, B, A, B, B, A]
    for n, source in enumerate(order):
        await _publish(store, source, n, [(ALICE, True)])
    # Alice last got A:2 (n=2) and B:1 (n=1): the latest named is A:2, so B:2, B:3, A:3 follow.
    rows = await store.read_after(D, T, [(A, 2), (B, 1)])
    assert [(e.source, e.source_seq) for e in rows] == [(B, 2), (B, 3), (A, 3)]
    everything = await store.read_after(D, T, [])
    assert len(everything) == 6
    with pytest.raises(BeyondRetention):
        await store.read_after(D, T, [(A, 99)])


async def test_images_are_written_with_the_publication_and_dropped(
    redis: Redis, keys: Keys
) -> None:
    store = await _store(redis, keys)
    image = Image(item="XMPL", fields={"bid": b"<bid>1</bid>"}, source=A, source_seq=1)
    await _publish(store, A, 1, [], item="XMPL", type_="image", image=image)
    assert await store.images(D, T) == {"XMPL": image}
    assert await store.image(D, T, "XMPL") == image
    await _publish(store, A, 2, [], item="XMPL", type_="drop", drop=True)
    assert await store.image(D, T, "XMPL") is None


async def test_permission_changes_are_sequenced_between_publications(
    redis: Redis, keys: Keys
) -> None:
    store = await _store(redis, keys)
    await _publish(store, A, 1, [(ALICE, True)])
    table = PermissionTable().changed(
        [PermissionChange(ChangeKind.GRANT, "6747", actor_of("*@example.com"))]
    )
    await store.commit_permissions(D, T, table, now_ms=1_000_010, retention=KEEP)
    await _publish(store, A, 2, [(ALICE, True)], permtoken="6747")
    entries = await store.read_after(D, T, [])
    assert [e.kind for e in entries] == ["pub", "perm", "pub"]
    assert entries[1].permissions() == table
    assert entries[0].permissions() is None
    assert entries[2].fields["permtoken"] == b"6747"
    other = RobustStore(redis, keys, "pod-b")
    with pytest.raises(NotOwner):
        await other.commit_permissions(D, T, table, now_ms=1, retention=KEEP)


async def test_a_delivery_committed_twice_is_sequenced_once(redis: Redis, keys: Keys) -> None:
    """A relay's retry of one delivery (its delivery key), on this pod or the next
    owner: the first commit's numbers, no second entry, no link number taken."""
    store = await _store(redis, keys)
    subs = [(ALICE, True)]
    first = await _publish(store, A, 1, subs, delivery="d-1", delivery_ttl_ms=60_000)
    again = await _publish(store, A, 1, subs, delivery="d-1", delivery_ttl_ms=60_000)
    assert (again.source_seq, again.stream_id, again.repeated) == (
        first.source_seq,
        first.stream_id,
        True,
    )
    assert again.links == ()
    other = await _publish(store, A, 2, subs, delivery="d-2", delivery_ttl_ms=60_000)
    assert (other.source_seq, other.repeated, other.links) == (2, False, (LinkSeq(1, 1),))
    # Without a delivery key nothing is remembered.
    assert (await _publish(store, A, 3, subs)).source_seq == 3
    assert (await _publish(store, A, 3, subs)).source_seq == 4
    assert await redis.xlen(store.keys.stream(D, T)) == 4


async def test_a_source_span_longer_than_any_page_or_request_bound_is_found_and_read_by_pages(
    redis: Redis, keys: Keys
) -> None:
    """Issue #29: a source repair has no bound but retention (before, more than MAX_GAP
    entries after the position were refused as beyond retention: 550)."""
    store = await _store(redis, keys)
    await _publish(store, A, 0, [(ALICE, True)])
    stream = store.keys.stream(D, T)
    count = MAX_GAP + PAGE + 7
    await redis.eval(  # written in the server: the commit script's speed is not the point
        "for i = 1, tonumber(ARGV[1]) do redis.call('XADD', KEYS[1], '*', 'kind', 'pub',"
        " 'source', ARGV[2], 'seq', i, 'payload', 'x') end",
        1,
        stream,
        count,
        B,
    )
    span = await store.reads.source_span(D, T, [(A, 1)])
    ids = [entry_id for entry_id, _ in await redis.xrange(stream, count=2)]
    ((last_id, _),) = await redis.xrevrange(stream, count=1)
    assert (span.after, span.last) == (ids[0].decode(), last_id.decode())
    pages = store.reads.span_pages(D, T, span)
    first = await anext(pages)
    assert len(first) == PAGE
    assert first[0].id == ids[1].decode()
    await pages.aclose()  # type: ignore[attr-defined]
    assert not span.changes_permissions


async def test_a_trimmed_position_is_served_when_the_first_entry_kept_came_right_after_it(
    redis: Redis, keys: Keys
) -> None:
    """A link context lapses only after ``retainms`` without a number, so the position a
    resynchronised stub names is about that old: the age trim may have taken it and
    nothing after it. The first entry kept records the publication before it (``prev``)."""
    store = await _store(redis, keys)
    for n in range(1, 4):
        await _publish(store, A, n, [(ALICE, True)])
    stream = store.keys.stream(D, T)
    first_three = [entry_id for entry_id, _ in await redis.xrange(stream)]
    await _publish(store, B, 4, [(ALICE, True)])
    await _publish(store, A, 5, [(ALICE, True)])
    await redis.xtrim(stream, minid=first_three[-1], approximate=False)  # A:1, A:2 gone
    await redis.xdel(stream, first_three[-1])  # and A:3: the trim took it too
    rows = await store.read_after(D, T, [(A, 3)])
    assert [(e.source, e.source_seq) for e in rows] == [(B, 1), (A, 4)]
    with pytest.raises(BeyondRetention):  # A:3 was after A:2: lost, said so
        await store.read_after(D, T, [(A, 2)])
    await redis.delete(stream)  # everything trimmed, nothing published since
    assert await store.read_after(D, T, [(A, 4)]) == []
    with pytest.raises(BeyondRetention):
        await store.read_after(D, T, [(A, 3)])
