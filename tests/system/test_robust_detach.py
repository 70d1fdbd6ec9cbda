"""A robust subscriber detached for 30 s repairs by source seq after its link context
expired (issue #19 "Must show"; XEP-0040 2.3: "should a link be lost, timeout or other
such eventuality where the context of link sequence number be lost").

Two relay pods and two pubsub pods as processes, a real redis-server. Wilma follows a
robust topic and receives a first run of publications; then she detaches (her session
closes) for 30 s of wall time, and comes back through the other relay pod with
:meth:`RobustClient.reattach`; her stub keeps its state throughout.

**How her link context comes to expire.** A link record lives ``max(retainms, 10 *
heartbeatms)`` after the last number its link took (``retention_of`` in
services/pubsub/robust_owner.py), and while a pod sequences the topic every link is
numbered at least once a heartbeat, detached or not (docs/robust.md "Link context, as
served"). So the context lapses only when nothing sequenced the topic for that long:
here both pubsub processes are stopped right after she detaches and started again once
Redis's TTL has removed her link record (the test awaits Redis's ``expired`` keyspace
event for the key; nothing deletes it by hand). Then publications continue at full
speed (``IN_FLIGHT`` outstanding, each waiting for its ``published``) until 30 s after
she detached and at least ``AWAY_AT_LEAST`` of them: the restarted owner numbers her
link from 0 in epoch 2.

**Why those settings.** ``retainms`` bounds both the link context (at least ``retainms``)
and the stream's age (``MINID``), so the publications she can get back by source are the
ones younger than ``retainms`` when she asks: those after the restart. With ``retainms``
24 s and ``heartbeatms`` 1 s (context 24 s) the pods are down for about 25 s, and the
publications after the restart must all be younger than 24 s until her repair has read
them: at full speed the 1,500 take a few seconds, 16 s at a load average of 41 (the
slowest seen; at 18 s, the value before issue #29, that left too little margin).

On her return her stub sees epoch 2 (``Resynchronised``), asks by source from the last
source seq it delivered, and her application receives every publication that got its
``published``, in source-seq order, exactly once; the stub counts the source repair.

**Issue #29.** With about 1,650 publications away this failed every time: her
application received none of them. Her client sent its gap request on its reader and
waited there for the relay's ``ok``, which the relay sends only once the pod's
``Deliver`` returns, and the pod returned only after the whole repair; the repair's
redeliveries filled her attachment's queue (1,024) and the relay's in-flight bound
(256), the client stopped reading the channel, and the ``ok`` behind them was never
read. Now the client never waits for that ``ok`` on its reader, and the pod answers the
``Deliver`` once the request is checked and repairs in the background
(services/pubsub/robust_repairs.py); the repair is read a page at a time, however long.
Her position, about ``retainms`` old when she returns, may have been trimmed by the
stream's age bound: the first entry kept says it came right after it, so nothing is
lost and the repair is served (apexmesh/store/robust_reads.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from apexmesh.client import PubsubClient
from apexmesh.client.robust import RobustClient
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.pubsub.robust.stub import Resynchronised, StubEvent
from apexmesh.store.keys import Keys
from apexmesh.store.robust_keys import RobustKeys
from tests.support.deployment import DOMAIN, Deployment, deployment
from tests.support.polling import scaled
from tests.support.robust_clients import publish_at_full_speed, receive_all, warm_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]

#: The seed's access entries let anyone subscribe and publish to ``news`` only.
TOPIC = "news"
DETACH_SECONDS = 30.0
HEARTBEAT_MS = 1_000
RETAIN_MS = 24_000
RES = Resolution.BITS32
#: Publications before the detach, and after the return (live again).
BEFORE = AFTER = 50
#: Publications at least while she is away (after the pods came back).
AWAY_AT_LEAST = 1_500
#: Publications in flight while she is away.
IN_FLIGHT = 50


@contextlib.asynccontextmanager
async def link_expiry(running: Deployment, subscriber: str) -> AsyncIterator[asyncio.Event]:
    """An event set when Redis's TTL removes ``subscriber``'s link record: Redis's own
    ``expired`` keyspace event (the test's redis-server, so turning notifications on
    touches nobody else), listened to from before the pods stop, so it cannot be missed."""
    key = RobustKeys(Keys(prefix=running.prefix)).link(DOMAIN, TOPIC, subscriber)
    redis = Redis.from_url(running.redis.url)
    expired = asyncio.Event()
    pubsub = redis.pubsub()
    try:
        await redis.config_set("notify-keyspace-events", "Ex")
        await pubsub.subscribe("__keyevent@0__:expired")

        async def listen() -> None:
            async for message in pubsub.listen():
                if message["type"] == "message" and message["data"] == key.encode():
                    expired.set()
                    return

        listener = asyncio.create_task(listen())
        if not await redis.exists(key):
            raise AssertionError(f"no link record {key} to expire")
        try:
            yield expired
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await redis.aclose()


async def publish(fred: RobustClient, payloads: list[bytes], label: str, n: int) -> int:
    """Publish ``label n``; append it to ``payloads`` once ``published`` came back."""
    payload = f"{label} {n}".encode()
    await fred.publish(TOPIC, payload, timeout=scaled(10.0))
    payloads.append(payload)
    return n + 1


async def test_a_subscriber_detached_30_s_repairs_by_source_after_its_link_context_expired(
    tmp_path: Path,
) -> None:
    async with (
        deployment(tmp_path, relays=("a", "b"), pubsub=("p1", "p2")) as running,
        contextlib.AsyncExitStack() as stack,
    ):
        connect = functools.partial(running.connect_closed_by, stack)

        via_b = await connect("b")
        fred = RobustClient(await via_b.attach(f"fred@{DOMAIN}"))
        stack.push_async_callback(fred.aclose)
        owner = PubsubClient(await via_b.attach(f"mike@{DOMAIN}"))
        stack.push_async_callback(owner.aclose)
        wilma_session = await running.connect("a")  # closed by the test: her detach
        events: list[StubEvent] = []
        wilma = RobustClient(
            await wilma_session.attach(f"wilma@{DOMAIN}"),
            on_event=lambda _topic, event: events.append(event),
        )
        stack.push_async_callback(wilma.aclose)
        settings = RobustSettings(resolution=RES, heartbeat_ms=HEARTBEAT_MS, retain_ms=RETAIN_MS)
        assert (await owner.create_topic(TOPIC, robust=settings)).code == 250
        stub = await wilma.follow(
            TOPIC, resolution=RES, heartbeat_ms=HEARTBEAT_MS, repair_timeout_ms=2_000
        )
        await wilma.subscribe(TOPIC, duration=3600)
        await warm_up(fred, wilma, TOPIC)

        ok: list[bytes] = []
        for n in range(BEFORE):
            await publish(fred, ok, "before", n)
        before = await receive_all(wilma, ok, within=30)

        # She detaches; nothing sequences the topic until her link record has expired.
        async with link_expiry(running, f"wilma@{DOMAIN}") as expired:
            await wilma_session.close()
            detached = time.monotonic()
            await asyncio.gather(*(asyncio.to_thread(p.stop) for p in running.pubsub.values()))
            stopped = time.monotonic() - detached
            async with asyncio.timeout(scaled(RETAIN_MS / 1000 + 15)):
                await expired.wait()
            waited = time.monotonic() - detached - stopped
        started = time.monotonic()
        await asyncio.gather(*(asyncio.to_thread(p.start, 60.0) for p in running.pubsub.values()))
        start_took = time.monotonic() - started
        restarted = time.monotonic() - detached

        # Publications go on while she is away, at full speed.
        away = await publish_at_full_speed(
            fred,
            TOPIC,
            "away",
            in_flight=IN_FLIGHT,
            at_least=AWAY_AT_LEAST,
            until=detached + DETACH_SECONDS,
            timeout=scaled(10.0),
        )
        away_for = time.monotonic() - detached

        returned = time.monotonic()
        await wilma.reattach(await (await connect("b")).attach(f"wilma@{DOMAIN}"))
        back: list[bytes] = []
        for n in range(AFTER):
            await publish(fred, back, "after", n)
        after = await receive_all(wilma, away + back, within=60)
        repaired_in = time.monotonic() - returned

        got = [p for p in before + after if not p.payload.startswith(b"warm")]
        payloads = [p.payload for p in got]
        seqs = [p.source_seq for p in got]
        print(  # the figures of this run, in the test's output
            f"detached {away_for:.1f} s (pods stopped in {stopped:.1f} s, link context gone "
            f"{waited:.1f} s later, pods started in {start_took:.1f} s, "
            f"back at {restarted:.1f} s); published {len(ok)} before, "
            f"{len(away)} away, {len(back)} after; delivered {len(payloads)} "
            f"({len(payloads) - len(set(payloads))} twice); resyncs {stub.stats.resyncs}, "
            f"source repairs {stub.stats.source_repairs}, link repairs "
            f"{stub.stats.link_repairs}, refused {stub.stats.refused}; "
            f"all back {repaired_in:.1f} s after her return"
        )
        assert away_for >= DETACH_SECONDS
        assert len(away) >= AWAY_AT_LEAST
        assert payloads == ok + away + back, "every publication, in order, once"
        assert seqs == sorted(set(seqs))
        assert stub.stats.source_repairs >= 1
        assert stub.stats.refused == 0
        assert any(isinstance(e, Resynchronised) and e.epoch == 2 for e in events)
