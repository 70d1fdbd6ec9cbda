"""Acknowledged data through a Redis failover under the running mesh (issue #30): what
the cluster and the Sentinel system tests share (tests/system/test_mesh_*_failover.py).

barney, on relay pod 2, creates a robust topic (XEP-0040), which he follows, and a plain
topic, which he subscribes to. fred, on relay pod 1, sends held data (hold4Endpoint) to
dino, who is not attached, publishes on the robust topic and on the plain one, one of
each after the other. Once :data:`BEFORE_KILL` holds are
acknowledged, the Redis node that keeps both (the caller's ``primary``) is SIGKILLed,
and fred goes on until :data:`AFTER_KILL` more of each are acknowledged. A hold is
acknowledged by the relay's ``ok`` (it ran the hold script first), a robust publication
by the pubsub service's ``published`` (its source seq), a plain one by the relay's
``ok`` (custody); a send that failed or timed out is not acknowledged, and may or may not
have been stored.

Then: every service's ``/readyz`` answers 200 again, and the first acknowledged hold and
robust publication after the kill came, within the issue's 15 s (scaled); dino attaches
on pod 2 and gets every acknowledged held data exactly once; barney got every
acknowledged robust publication exactly once, in source-seq order. Plain publications
are never held: one lost to the failover is within their promise (docs/redis.md), so
they are counted (acknowledged, delivered, lost, twice), and only their coming back is
asserted: barney gets plain publications acknowledged after the kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

from apexmesh.aio.tasks import within
from apexmesh.client import ApexClientError, Attachment
from apexmesh.client.pubsub import PubsubClient
from apexmesh.client.robust import RobustClient
from apexmesh.pubsub.elements import topic_endpoint
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.pubsub.topic_access import Audience
from tests.support.cluster_mesh import ClusterLocalMesh, session
from tests.support.polling import scaled, wait_until
from tests.support.redis_cluster import Node
from tests.support.robust_clients import receive_all, warm_up

DINO = "dino@example.com"
#: Holds acknowledged before the kill, and holds and robust publications after it.
BEFORE_KILL = 20
AFTER_KILL = 20
#: Seconds the issue gives the mesh to be ready again after a failover (scaled), and
#: how long the test waits for it to see by how much it missed.
READY_SECONDS = 15.0
READY_WAIT_SECONDS = 60.0
#: Seconds one send may take: a hold waits out the election (the cluster client retries
#: for up to 15 s, apexmesh/store/connection.py FAILOVER_SECONDS).
SEND_SECONDS = 30.0
#: Seconds a robust publication waits for its ``published`` before it counts as failed.
ROBUST_SECONDS = 5.0


async def ready_again(mesh: ClusterLocalMesh, since: float) -> float:
    """Seconds from ``since`` until every service's ``/readyz`` answers 200 at once
    (within a minute, scaled)."""
    urls = [f"http://127.0.0.1:{child.info['http_port']}/readyz" for child in mesh.children]
    async with httpx.AsyncClient(timeout=scaled(2.0)) as client:

        async def every_one_ready() -> bool:
            for url in urls:
                try:
                    if (await client.get(url)).status_code != 200:
                        return False
                except httpx.HTTPError:
                    return False
            return True

        await wait_until(every_one_ready, READY_WAIT_SECONDS, every=0.1, what="every /readyz 200")
    return time.monotonic() - since


@dataclass
class Acknowledged:
    """What one kind of fred's sends got: the acknowledged payloads in order, the
    failures, and seconds from the kill to the first acknowledged one after it."""

    payloads: list[bytes] = field(default_factory=list)
    failed: int = 0
    after_kill: int = 0
    first_after: float | None = None

    def took(self, payload: bytes, killed_at: float) -> None:
        self.payloads.append(payload)
        if killed_at:
            self.after_kill += 1
            if self.first_after is None:
                self.first_after = time.monotonic() - killed_at


@dataclass
class Sends:
    """What fred's sends got, and when the primary was killed (monotonic)."""

    held: Acknowledged = field(default_factory=Acknowledged)
    robust: Acknowledged = field(default_factory=Acknowledged)
    plain: Acknowledged = field(default_factory=Acknowledged)
    killed_at: float = 0.0


async def send_each(
    fred: Attachment,
    publisher: RobustClient,
    topics: tuple[str, str],
    kill: Callable[[], Awaitable[None]],
) -> Sends:
    """Held data to dino, each followed by a publication on the plain topic, and beside
    them publications on the robust topic (``topics``), each one after the other (a
    publication waiting out its deadline holds up no hold); ``kill()`` once
    :data:`BEFORE_KILL` holds are acknowledged, then on until :data:`AFTER_KILL` more
    holds and robust publications are."""
    robust_topic, plain_topic = topics
    plain_endpoint = topic_endpoint(plain_topic, "example.com")
    sends = Sends()

    async def attempt(kind: Acknowledged, payload: bytes, send: Awaitable[object]) -> None:
        try:
            await within(send, scaled(SEND_SECONDS))
            kind.took(payload, sends.killed_at)
        except (ApexClientError, TimeoutError):
            kind.failed += 1

    async def holds_and_plain() -> None:
        n = 0
        while sends.held.after_kill < AFTER_KILL or sends.robust.after_kill < AFTER_KILL:
            if len(sends.held.payloads) >= BEFORE_KILL and not sends.killed_at:
                await kill()
                sends.killed_at = time.monotonic()
            n += 1
            if sends.held.after_kill < AFTER_KILL:
                held = f"held {n}".encode()
                hold = fred.send(DINO, held, content_type="text/plain", hold=True)
                await attempt(sends.held, held, hold)
            plain = f"plain {n}".encode()
            await attempt(sends.plain, plain, fred.send(plain_endpoint, plain))

    async def robust() -> None:
        n = 0
        while sends.robust.after_kill < AFTER_KILL:
            n += 1
            payload = f"robust {n}".encode()
            # A publication the service could not sequence gets no ``published``: it
            # counts as failed after ROBUST_SECONDS (it may still come, once, in order).
            published = publisher.publish(robust_topic, payload, timeout=scaled(ROBUST_SECONDS))
            await attempt(sends.robust, payload, published)

    await asyncio.gather(holds_and_plain(), robust())
    return sends


async def plain_received(subscriber: RobustClient) -> Counter[bytes]:
    """The plain publications ``subscriber`` got so far and within half a second more."""
    got: Counter[bytes] = Counter()
    with contextlib.suppress(TimeoutError):
        while True:
            content = (await within(subscriber.next_other(), scaled(0.5))).content
            if content.startswith(b"plain "):  # not the service's other messages
                got[content] += 1
    return got


async def receive_held(dino: Attachment, wanted: set[bytes]) -> Counter[bytes]:
    """Everything dino receives until every one of ``wanted`` came, then whatever else
    comes within half a second (a second copy would come then)."""
    got: Counter[bytes] = Counter()
    async with asyncio.timeout(scaled(30)):
        while not wanted <= got.keys():
            got[(await dino.receive()).content] += 1
    with contextlib.suppress(TimeoutError):
        while True:
            got[(await within(dino.receive(), scaled(0.5))).content] += 1
    return got


async def acknowledged_data_survives_the_kill(
    mesh: ClusterLocalMesh, primary: Node, label: str, robust_topic: str
) -> None:
    """The scenario of the module docstring, ``primary`` the node killed (it must keep
    the held data and ``robust_topic``'s keys); its figures printed (in the test's
    output) under ``label``."""
    plain_topic = f"{robust_topic}.plain"
    async with contextlib.AsyncExitStack() as stack:
        pod1, pod2 = mesh.relay("example.com", 0), mesh.relay("example.com", 1)
        barney_client = await session(stack, mesh, pod2, "barney@example.com")
        barney_attachment = await barney_client.attach("barney@example.com")
        settings = RobustSettings(resolution=Resolution.BITS32, heartbeat_ms=300)
        owner = PubsubClient(barney_attachment)
        # Both open to every publisher of the domain (by default only their creator).
        for topic, shape in ((robust_topic, settings), (plain_topic, None)):
            created = await owner.create_topic(topic, robust=shape, publishers=Audience.DOMAIN)
            assert created.code == 250
        await owner.aclose()
        barney = RobustClient(barney_attachment)
        stack.push_async_callback(barney.aclose)
        await barney.follow(robust_topic, resolution=Resolution.BITS32, heartbeat_ms=300)
        assert (await barney.subscribe(robust_topic, duration=600)).code == 250
        assert (await barney.subscribe(plain_topic, duration=600)).code == 250
        fred_client = await session(stack, mesh, pod1, "fred@example.com")
        fred = await fred_client.attach("fred@example.com")
        publisher = RobustClient(fred)
        stack.push_async_callback(publisher.aclose)
        await warm_up(publisher, barney, robust_topic)
        readiness: list[asyncio.Task[float]] = []

        async def kill() -> None:
            port = primary.port
            await asyncio.to_thread(primary.kill)  # SIGKILL: no goodbye
            readiness.append(asyncio.create_task(ready_again(mesh, time.monotonic())))
            print(f"{label} 127.0.0.1:{port} killed after {BEFORE_KILL} holds")

        sends = await send_each(fred, publisher, (robust_topic, plain_topic), kill)
        ready_after = await readiness[0]
        dino_client = await session(stack, mesh, pod2, DINO)
        dino = await dino_client.attach(DINO)
        got = await receive_held(dino, set(sends.held.payloads))
        published = await receive_all(barney, sends.robust.payloads, within=30)
        robust = [p for p in published if not p.payload.startswith(b"warm")]
        plain = await plain_received(barney)
        kinds = (("holds", sends.held), ("robust", sends.robust), ("plain", sends.plain))
        for kind, acked in kinds:
            first = "never" if acked.first_after is None else f"{acked.first_after:.1f} s"
            print(  # the figures of this run, in the test's output
                f"{kind}: {len(acked.payloads)} acknowledged ({acked.after_kill} after the "
                f"kill, the first {first} after it), {acked.failed} failed"
            )
        lost = [p for p in sends.plain.payloads if not plain[p]]
        twice = [p for p, count in plain.items() if count > 1]
        print(
            f"every /readyz 200 {ready_after:.1f} s after the kill; dino got "
            f"{sum(got.values())} held data, barney {len(robust)} robust publications and "
            f"{sum(plain.values())} plain ones: {len(lost)} acknowledged plain ones lost, "
            f"{len(twice)} delivered twice"
        )
        assert ready_after < scaled(READY_SECONDS)
        for acked in (sends.held, sends.robust):
            assert acked.first_after is not None
            assert acked.first_after < scaled(READY_SECONDS)
        not_once = {p: got[p] for p in sends.held.payloads if got[p] != 1}
        assert not_once == {}, "every acknowledged held data exactly once"
        # A publication whose ``published`` did not come in time may still have been
        # sequenced: it may come too, once, in its place.
        seqs = [p.source_seq for p in published]
        assert seqs == sorted(set(seqs)), "in source-seq order, each once"
        received = Counter(p.payload for p in robust)
        not_once = {p: received[p] for p in sends.robust.payloads if received[p] != 1}
        assert not_once == {}, "every acknowledged robust publication exactly once"
        after = sends.plain.payloads[-sends.plain.after_kill :] if sends.plain.after_kill else []
        assert any(plain[p] for p in after), "plain publications flow again after the kill"
