"""The journal worker's schedule (services/pubsub/journal.py) against a real redis-server:
a sliding window of entries in flight, journal order per endpoint also across batches,
a ``start`` that does not wait for the work, and entries forgotten only once done."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import grpc
import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from apexmesh.aio.tasks import within
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.changes import Announced, TopicCreated
from apexmesh.rpc.access import AccessClient
from apexmesh.rpc.relay import SubmitOutcome, SubmitSource
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import JournalEntry, JournalKind, PubsubStore, new_entry
from services.pubsub.journal import JournalWorker
from services.pubsub.metrics import PubsubMetrics
from tests.support.polling import scaled, still_true, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

DOMAIN = "example.com"


class HeldRelay:
    """A relay stand-in that holds every submission until the test releases it, and
    records what it saw in order (the worker under test never sees the difference)."""

    def __init__(self, *, source: SubmitSource = SubmitSource.RELAY) -> None:
        self.seen: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.release = asyncio.Event()
        self._source = source

    async def submit(
        self, originator: str, payload: bytes, *, key: str | None = None, submission_id: str = ""
    ) -> SubmitOutcome:
        tag = re.search(rb"n='(\w+)'", payload)
        self.seen.append(f"{key} {tag.group(1).decode() if tag else '?'}")
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.release.wait()
        finally:
            self.in_flight -= 1
        return SubmitOutcome(ApexReplyCode.SUCCESS, "", self._source)


@pytest.fixture
async def access() -> AsyncIterator[AccessClient]:
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # never called by these entries
    try:
        yield AccessClient(channel)
    finally:
        await channel.close()


def _worker(
    store: PubsubStore, relay: HeldRelay, access: AccessClient, concurrency: int
) -> JournalWorker:
    return JournalWorker(
        store=store,
        access=access,
        relays=relay,
        presence=None,
        metrics=PubsubMetrics.create(CollectorRegistry()),
        timeout=1.0,  # the setting under test, not a wait
        concurrency=concurrency,
    )


def _sends(recipient: str, count: int, tag: str) -> list[JournalEntry]:
    return [
        new_entry(
            JournalKind.SEND,
            origin=f"apex=pubsub@{DOMAIN}",
            recipient=recipient,
            content=f"<x n='{tag}{i:03d}'/>".encode().hex(),
        )
        for i in range(count)
    ]


async def _journalled(redis: Redis, keys: Keys) -> int:
    return int(await redis.hlen(keys.pubsub_journal(DOMAIN)))


async def test_a_sliding_window_bounds_the_entries_in_flight(
    redis: Redis, keys: Keys, access: AccessClient
) -> None:
    store = PubsubStore(redis, keys, "pod-a")
    relay = HeldRelay()
    worker = _worker(store, relay, access, concurrency=4)
    entries = [e for i in range(10) for e in _sends(f"user{i}@{DOMAIN}", 1, "a")]
    await store.journal(DOMAIN, entries, 0)
    starting = asyncio.create_task(worker.start(DOMAIN, entries))
    # Four taken and in flight; the fifth waits for room (start has not returned).
    await wait_until(lambda: relay.in_flight >= 4)
    await still_true(lambda: relay.in_flight == 4, 0.05)
    assert not starting.done()
    relay.release.set()
    tasks = await within(starting, scaled(5))
    await asyncio.gather(*tasks)
    assert relay.most_in_flight == 4
    assert len(relay.seen) == 10
    assert await _journalled(redis, keys) == 0


async def test_start_returns_before_the_work_is_done(
    redis: Redis, keys: Keys, access: AccessClient
) -> None:
    """The lease loop hands cancels over and goes on claiming the next due leases."""
    store = PubsubStore(redis, keys, "pod-a")
    relay = HeldRelay()
    worker = _worker(store, relay, access, concurrency=8)
    entries = _sends(f"mike@{DOMAIN}", 3, "a")
    await store.journal(DOMAIN, entries, 0)
    tasks = await within(worker.start(DOMAIN, entries), scaled(1))
    assert len(tasks) == 3
    assert not any(task.done() for task in tasks)
    assert await _journalled(redis, keys) == 3
    relay.release.set()
    await asyncio.gather(*tasks)
    assert await _journalled(redis, keys) == 0


async def test_one_endpoints_entries_keep_journal_order_across_batches(
    redis: Redis, keys: Keys, access: AccessClient
) -> None:
    store = PubsubStore(redis, keys, "pod-a")
    relay = HeldRelay()
    worker = _worker(store, relay, access, concurrency=16)
    mike, wilma = f"mike@{DOMAIN}", f"wilma@{DOMAIN}"
    first = [*_sends(mike, 3, "a"), *_sends(wilma, 2, "a")]
    second = [*_sends(mike, 2, "b"), *_sends(wilma, 1, "b")]
    await store.journal(DOMAIN, [*first, *second], 0)
    tasks = await worker.start(DOMAIN, first)
    tasks += await worker.start(DOMAIN, second)
    # Only the head of each endpoint's chain is with the relay.
    await wait_until(lambda: relay.in_flight >= 2)
    await still_true(lambda: relay.in_flight == 2, 0.05)
    relay.release.set()
    await asyncio.gather(*tasks)
    for who in (mike, wilma):
        tags = [line.split()[1] for line in relay.seen if line.startswith(who)]
        assert tags == sorted(tags), (who, tags)
    assert [line.split()[1] for line in relay.seen if line.startswith(mike)] == [
        "a000",
        "a001",
        "a002",
        "b000",
        "b001",
    ]


async def test_a_send_no_relay_took_stays_journalled(
    redis: Redis, keys: Keys, access: AccessClient
) -> None:
    """At-least-once: only work a relay answered is forgotten; the rest is redone."""
    store = PubsubStore(redis, keys, "pod-a")
    relay = HeldRelay(source=SubmitSource.UNAVAILABLE)
    relay.release.set()
    worker = _worker(store, relay, access, concurrency=4)
    entries = _sends(f"mike@{DOMAIN}", 2, "a")
    await store.journal(DOMAIN, entries, 0)
    await worker.perform(DOMAIN, entries)
    assert len(relay.seen) == 2
    assert await _journalled(redis, keys) == 2


async def test_closing_lets_entries_in_flight_finish_for_the_grace(
    redis: Redis, keys: Keys, access: AccessClient
) -> None:
    store = PubsubStore(redis, keys, "pod-a")
    relay = HeldRelay()
    worker = _worker(store, relay, access, concurrency=4)
    entries = _sends(f"mike@{DOMAIN}", 2, "a")
    await store.journal(DOMAIN, entries, 0)
    await worker.start(DOMAIN, entries)
    await within(worker.aclose(grace=0.05), scaled(2))
    # Not finished within the grace: stopped, and still journalled for a redo.
    assert await _journalled(redis, keys) == 2


async def test_announcements_are_done_through_the_announcer_in_order_per_message(
    redis: Redis, keys: Keys, access: AccessClient
) -> None:
    """Draft-wyman 6.2.2, 6.3: an ``announce`` entry (committed with its change by
    apexmesh/store/pubsub_changes.py) is published through the announcer; the revisions
    of one message in journal order; forgotten once done, kept when the announcer could
    not publish (no relay took it) or when the worker has no announcer."""
    store = PubsubStore(redis, keys, "pod-a")
    done: list[tuple[str, bytes, str, int | None]] = []
    gate = asyncio.Event()
    publishable = {b"<first/>", b"<second/>", b"<other/>"}

    async def announce(
        domain: str, topic: str, content: bytes, key: str, retire: int | None
    ) -> bool:
        assert domain == DOMAIN
        if content == b"<first/>":
            await gate.wait()  # the next revision of that message must wait for it
        done.append((topic, content, key, retire))
        return content in publishable

    def change(content: bytes, chain: str, retire: int | None = None) -> Announced:
        return Announced(
            topic="WKT=Topics", content=content, key=content.decode(), chain=chain, retire=retire
        )

    changes = [
        TopicCreated("news", Endpoint.parse(f"fred@{DOMAIN}")),
        change(b"<first/>", "m1"),
        change(b"<second/>", "m1", retire=7),
        change(b"<other/>", "m2"),
        change(b"<refused/>", "m3"),
    ]
    entries = await store.commit(DOMAIN, "news", None, changes, [], 0)
    assert entries is not None
    assert [e.kind for e in entries] == [JournalKind.ANNOUNCE] * 4
    assert entries[1].fields["retire"] == "7"
    assert entries[0].fields["content"] == b"<first/>".hex()
    worker = JournalWorker(
        store=store,
        access=access,
        relays=HeldRelay(),
        presence=None,
        metrics=PubsubMetrics.create(CollectorRegistry()),
        timeout=1.0,  # the setting under test, not a wait
        announce=announce,
    )
    tasks = await worker.start(DOMAIN, entries)
    await wait_until(lambda: len(done) >= 2)
    assert [content for _, content, _, _ in done] == [b"<other/>", b"<refused/>"]
    gate.set()
    await asyncio.gather(*tasks)
    assert [content for _, content, _, _ in done][2:] == [b"<first/>", b"<second/>"]
    assert ("WKT=Topics", b"<second/>", "<second/>", 7) in done
    (kept,) = await store.pending(DOMAIN)  # the one the announcer could not publish
    assert kept.fields["content"] == b"<refused/>".hex()
    silent = _worker(store, HeldRelay(), access, concurrency=4)  # no announcer
    await silent.perform(DOMAIN, [kept])
    assert [e.id for e in await store.pending(DOMAIN)] == [kept.id]
