"""The SDK's robust stub adapter against the real pubsub service over the running mesh
(real relays, real BEEP/TCP, two pubsub pods, a real redis-server).

Phase 1 had ``fred@example.com`` stand in for the service; phase 2 serves robust topics
(docs/robust.md), so these run against ``apex=pubsub``. Deliveries are lost on purpose on
the subscriber's side (:class:`tests.services.pubsub.robust_support.Lossy`): Wilma's
:class:`RobustClient`, attached to the other relay pod than the publisher, must hand her
application every publication in order, exactly once. The service-side scenarios
(heartbeats revealing a loss within two intervals, a lost link context repaired by
source, failover of the sequencer) are tests/services/pubsub/test_pubsub_robust.py."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from apexmesh.aio.tasks import within
from apexmesh.apex.endpoint import Endpoint
from apexmesh.client import PubsubClient
from apexmesh.client.errors import PubsubError
from apexmesh.client.robust import OPERATIONS_BLOCK, RobustClient
from apexmesh.pubsub.robust.elements import PublishHeader, RobustInfo
from apexmesh.pubsub.robust.publish_types import PublishType
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.pubsub.robust.stub import Delayed, StubEvent
from apexmesh.store.keys import Keys
from tests.services.pubsub.conftest import started_mesh
from tests.services.pubsub.robust_support import HeldOk, Lossy, subscribed
from tests.support.mesh import endpoint_client
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

DOMAIN, TOPIC = "example.com", "news"
RES = Resolution.BITS32


@contextlib.asynccontextmanager
async def _setup(
    redis_server: RedisServer,
    keys: Keys,
    tmp_path: Path,
    heartbeat_ms: int,
    drop: Callable[[RobustInfo | None], bool],
    events: list[tuple[float, StubEvent]],
    attachment_type: type[Lossy] = Lossy,
    reorder_ms: int | None = None,
) -> AsyncIterator[tuple[RobustClient, RobustClient, Lossy]]:
    """The robust topic, Fred publishing through relay a, Wilma following it through
    relay b on an attachment that loses what ``drop`` picks."""
    settings = RobustSettings(resolution=RES, heartbeat_ms=heartbeat_ms)
    async with (
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("p1", "p2")) as mesh,
        endpoint_client(mesh.a.edge_port) as client_a,
        endpoint_client(mesh.b.edge_port) as client_b,
    ):
        owner = PubsubClient(await client_a.attach("mike@example.com"))
        fred = RobustClient(await client_a.attach("fred@example.com"))
        lossy = attachment_type(await client_b.attach("wilma@example.com"), lambda _r, i: drop(i))
        wilma = RobustClient(
            lossy,  # type: ignore[arg-type]
            on_event=lambda _topic, event: events.append((time.monotonic(), event)),
        )
        try:
            await owner.create_topic(TOPIC, robust=settings)
            await wilma.follow(
                TOPIC,
                resolution=RES,
                heartbeat_ms=heartbeat_ms,
                repair_timeout_ms=2_000,
                reorder_ms=reorder_ms,
            )
            await wilma.subscribe(TOPIC, duration=60)
            await subscribed(mesh.pubsub.values(), DOMAIN, TOPIC, lossy.endpoint)
            yield fred, wilma, lossy
        finally:
            for client in (owner, fred, wilma):
                await client.aclose()


async def _receive(client: RobustClient, count: int, within: float = 20.0) -> list[bytes]:
    out: list[bytes] = []
    async with asyncio.timeout(scaled(within)):
        while len(out) < count:
            out.append((await client.next()).payload)
    return out


def _live(info: RobustInfo | None) -> bool:
    """A live publication (not a heartbeat, not a redelivery of a source repair)."""
    return info is not None and not info.heartbeat and info.gap is None


async def test_dropped_deliveries_are_repaired_by_link_range_in_order_once(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    dropped_seqs = {5, 6, 18, 30}  # source seqs: publications 4, 5, 17, 29
    seen: set[int] = set()

    def drop(info: RobustInfo | None) -> bool:
        if not _live(info) or info is None or info.source_seq not in dropped_seqs:
            return False
        if info.source_seq in seen:
            return False  # the repair's copy passes
        seen.add(info.source_seq)
        return True

    events: list[tuple[float, StubEvent]] = []
    async with _setup(redis_server, keys, tmp_path, 1_000, drop, events) as (fred, wilma, lossy):
        for n in range(30):
            await fred.publish(TOPIC, f"publication {n}".encode())
        got = await _receive(wilma, 30)
        assert got == [f"publication {n}".encode() for n in range(30)]
        assert seen == dropped_seqs
        stub = wilma.stub(TOPIC)
        assert stub.stats.delivered == 30
        assert stub.stats.link_repairs >= 2
        assert all(r.by_link for _, r in lossy.gaps)
        with pytest.raises(TimeoutError):
            await within(wilma.next(), timeout=scaled(0.3))


async def test_the_reader_takes_the_repair_without_waiting_for_its_gap_requests_ok(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    """Issue #29: the relay's ``ok`` to a gap request travels behind the repair's
    redeliveries on the same channel. The client used to wait for it on its reader, so
    a repair longer than the attachment's queue (and the relay's in-flight bound) was
    never read: the application got nothing after a long absence. Here the ``ok`` is
    held until the application has every publication; no reorder tolerance, so the
    stub asks on the reader, as it does at a resync."""
    lost = set(range(3, 13))  # source seqs: publications 2 .. 11
    seen: set[int] = set()

    def drop(info: RobustInfo | None) -> bool:
        if not _live(info) or info is None or info.source_seq not in lost - seen:
            return False
        seen.add(info.source_seq)
        return True

    events: list[tuple[float, StubEvent]] = []
    async with _setup(redis_server, keys, tmp_path, 1_000, drop, events, HeldOk, 0) as (
        fred,
        wilma,
        held,
    ):
        assert isinstance(held, HeldOk)
        for n in range(20):
            await fred.publish(TOPIC, f"publication {n}".encode())
        try:
            got = await _receive(wilma, 20)
        finally:
            held.release.set()
        assert got == [f"publication {n}".encode() for n in range(20)]
        assert seen == lost
        assert held.gaps


async def test_overdue_heartbeats_report_delayed_and_recover_the_lost_tail(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    """The last publication and the heartbeats after it are lost until the stub reports
    the link delayed; its open repair (``linkfrom`` without ``linkto``) brings it."""
    interval = 300
    events: list[tuple[float, StubEvent]] = []
    state = {"losing": False}

    def drop(info: RobustInfo | None) -> bool:
        delayed = any(isinstance(e, Delayed) for _, e in events)
        return state["losing"] and not delayed and info is not None

    async with _setup(redis_server, keys, tmp_path, interval, drop, events) as (fred, wilma, lossy):
        await fred.publish(TOPIC, b"publication 0")
        assert await _receive(wilma, 1) == [b"publication 0"]
        state["losing"] = True
        silent_from = time.monotonic()
        await fred.publish(TOPIC, b"publication 1")
        assert await _receive(wilma, 1, within=10) == [b"publication 1"]
        delayed = [t for t, e in events if isinstance(e, Delayed)]
        assert delayed
        assert delayed[0] - silent_from < 2 * interval / 1000 + 1.0
        assert any(r.link_to is None for _, r in lossy.gaps)


async def test_publishers_get_their_source_seq(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    events: list[tuple[float, StubEvent]] = []
    async with _setup(redis_server, keys, tmp_path, 1_000, lambda _i: False, events) as (
        fred,
        wilma,
        _lossy,
    ):
        header = PublishHeader(type=PublishType.UPDATE, item="XMPL")
        assert (await fred.publish(TOPIC, b"a", header), await fred.publish(TOPIC, b"b")) == (1, 2)
        # Wilma is a source of her own: her numbers start at 1.
        assert await wilma.publish(TOPIC, b"c") == 1
        publications = [await wilma.next() for _ in range(3)]
        assert [(p.source, p.source_seq) for p in publications] == [
            (Endpoint.parse("fred@example.com"), 1),
            (Endpoint.parse("fred@example.com"), 2),
            (Endpoint.parse("wilma@example.com"), 1),
        ]
        assert (publications[0].type, publications[0].item) == (PublishType.UPDATE, "XMPL")


async def test_a_robust_client_subscribes_by_itself_and_passes_plain_data_on(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    """Against the real pubsub service: the client (its attachment's only reader) makes
    its subscription, refusals raise with the code, and a best-effort publication (no
    robust option) goes to next_other untouched."""
    async with (
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("p1", "p2")) as mesh,
        endpoint_client(mesh.a.edge_port) as client_a,
        endpoint_client(mesh.b.edge_port) as client_b,
    ):
        mike = PubsubClient(await client_a.attach("mike@example.com"))
        fred = RobustClient(await client_b.attach("fred@example.com"))
        try:
            await mike.create_topic("sports")
            reply = await fred.subscribe("sports", duration=60)
            assert reply.code == 250
            assert reply.trans_id >= OPERATIONS_BLOCK
            with pytest.raises(PubsubError) as refused:
                await fred.subscribe("nosuch", duration=60)
            assert refused.value.code == 537  # step 1: no access entry for an unknown topic
            await mike.publish("sports", b"goal")
            received = await within(fred.next_other(), timeout=scaled(10))
            assert received.content == b"goal"
            assert (await fred.cancel("sports")).code == 250
        finally:
            await mike.aclose()
            await fred.aclose()


async def test_the_stub_reattaches_by_itself_and_its_application_misses_nothing(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    """Wilma's connection to relay b is cut (its transport closed, no BEEP goodbye) in the
    middle of a run of publications: her RobustClient attaches again through relay a by
    itself, and her application receives every publication that got its ``published``,
    in order, exactly once (what was lost meanwhile repaired)."""
    count, cut_at = 300, 100
    settings = RobustSettings(resolution=RES, heartbeat_ms=300)
    async with (
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("p1", "p2")) as mesh,
        endpoint_client(mesh.a.edge_port) as client_a,
        endpoint_client(mesh.b.edge_port) as client_b,
    ):
        owner = PubsubClient(await client_a.attach("mike@example.com"))
        fred = RobustClient(await client_a.attach("fred@example.com"))
        wilma = RobustClient(
            await client_b.attach("wilma@example.com"),
            reattach=lambda: client_a.attach("wilma@example.com"),
        )
        try:
            await owner.create_topic(TOPIC, robust=settings)
            await wilma.follow(TOPIC, resolution=RES, heartbeat_ms=300, repair_timeout_ms=1_000)
            await wilma.subscribe(TOPIC, duration=60)
            await subscribed(
                mesh.pubsub.values(), DOMAIN, TOPIC, Endpoint.parse("wilma@example.com")
            )
            ok: list[bytes] = []
            for n in range(count):
                if n == cut_at:
                    client_b.conn.abort()
                payload = f"publication {n}".encode()
                await fred.publish(TOPIC, payload)
                ok.append(payload)
            got = await _receive(wilma, len(ok), within=60)
            assert got == ok
            assert wilma.reattached == 1
            stub = wilma.stub(TOPIC)
            assert stub.stats.delivered == count
            with pytest.raises(TimeoutError):
                await within(wilma.next(), timeout=scaled(0.5))
        finally:
            for client in (owner, fred, wilma):
                await client.aclose()
