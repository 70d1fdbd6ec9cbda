"""The SDK's robust stub adapter over the running mesh (real relays, real BEEP/TCP, real
redis-server).

The pubsub service does not serve robust topics yet (phase 2, docs/robust.md), so
``fred@example.com`` plays its part here with the phase-1 pieces it will be built from:
:class:`RobustStore` numbers and keeps every publication, the elements carry them as
per-recipient ``robust`` options, and gap requests are answered from the store. Fred
drops deliveries on purpose; ``wilma@example.com``, attached to the other relay pod,
runs :class:`RobustClient` and must hand her application every publication in order,
exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from redis.asyncio import Redis

from apexmesh.apex.data import Recipient
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.client import PubsubClient
from apexmesh.client.attachment import Attachment
from apexmesh.client.errors import PubsubError
from apexmesh.client.outgoing import XmlContent
from apexmesh.client.robust import OPERATIONS_BLOCK, RobustClient
from apexmesh.pubsub.robust.elements import (
    PublishHeader,
    RobustInfo,
    publish_from_option,
    robust_option,
)
from apexmesh.pubsub.robust.operations import (
    GapReply,
    GapRequest,
    Published,
    parse_request,
)
from apexmesh.pubsub.robust.publish_types import PublishType
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.stub import Delayed, StubEvent
from apexmesh.store.keys import Keys
from apexmesh.store.robust import (
    BeyondRetention,
    LinkGone,
    Retention,
    RobustStore,
    StreamEntry,
)
from tests.services.pubsub.conftest import started_mesh
from tests.support.mesh import endpoint_client, running_mesh
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

DOMAIN, TOPIC = "example.com", "data.topics"
FRED = Endpoint.parse("fred@example.com")
WILMA = Endpoint.parse("wilma@example.com")
KEEP = Retention(count=10_000, ms=3_600_000, link_ttl_ms=60_000)
RES = Resolution.BITS32


@dataclass
class StandIn:
    """Fred as the robust service of one topic with one subscriber, Wilma."""

    attachment: Attachment
    store: RobustStore
    heartbeat_ms: int
    gap_requests: list[tuple[float, GapRequest]] = field(default_factory=list)
    option_ids: int = 0

    def _option(self, info: RobustInfo):  # type: ignore[no-untyped-def]
        self.option_ids += 1
        return robust_option(info, self.option_ids)

    async def _send(self, info: RobustInfo, payload: bytes) -> None:
        recipient = Recipient(identity=WILMA, options=(self._option(info),))
        await self.attachment.send(recipient, payload)

    def _info(
        self,
        entry: StreamEntry,
        link: int | None,
        epoch: int | None,
        gap: tuple[int, int] | None = None,
    ) -> RobustInfo:
        return RobustInfo(
            link_seq=link,
            link_epoch=epoch,
            source_seq=entry.source_seq,
            source=Endpoint.parse(entry.source),
            gap=None if gap is None else gap[0],
            gap_seq=None if gap is None else gap[1],
        )

    async def publish(
        self, n: int, *, drop: bool = False, source: str = "publisher@fromaplace.net"
    ) -> None:
        payload = f"publication {n}".encode()
        done = await self.store.commit_publication(
            DOMAIN,
            TOPIC,
            source=source,
            payload=payload,
            now_ms=int(time.time() * 1000),
            resolution=RES,
            retention=KEEP,
            subscribers=[(str(WILMA), True)],
        )
        (link,) = done.links
        assert link is not None
        if not drop:
            info = RobustInfo(
                link_seq=link.seq,
                link_epoch=link.epoch,
                source_seq=done.source_seq,
                source=Endpoint.parse(source),
            )
            await self._send(info, payload)

    async def heartbeat(self, *, drop: bool = False) -> None:
        (link,) = await self.store.commit_heartbeats(
            DOMAIN, TOPIC, [str(WILMA)], resolution=RES, retention=KEEP
        )
        if not drop:
            info = RobustInfo(
                link_seq=link.seq,
                link_epoch=link.epoch,
                source=Endpoint.parse("apex=pubsub@example.com"),
                heartbeat=True,
            )
            await self._send(info, b"")

    async def serve(self) -> None:
        while True:
            received = await self.attachment.receive()
            if received.options:
                await self._published(received)
                continue
            request = parse_request(received.content)
            assert isinstance(request, GapRequest)
            self.gap_requests.append((time.monotonic(), request))
            try:
                count = await self._answer(request)
            except (LinkGone, BeyondRetention) as exc:
                reply = Reply(code=550, trans_id=request.trans_id, text=type(exc).__name__)
                await self.attachment.send(WILMA, XmlContent(reply.to_xml()))
                continue
            answer = GapReply(topic=TOPIC, trans_id=request.trans_id, count=count)
            await self.attachment.send(WILMA, XmlContent(answer.to_xml()))

    async def _answer(self, request: GapRequest) -> int:
        if request.by_link:
            assert request.link_from is not None
            rows = await self.store.read_link_range(
                DOMAIN,
                TOPIC,
                str(WILMA),
                first=request.link_from,
                last=request.link_to,
                epoch=request.link_epoch,
                resolution=RES,
            )
            epoch = request.link_epoch
            for seq, entry in rows:
                if entry is None:
                    beat = RobustInfo(
                        link_seq=seq,
                        link_epoch=epoch,
                        source=Endpoint.parse("apex=pubsub@example.com"),
                        heartbeat=True,
                    )
                    await self._send(beat, b"")
                else:
                    await self._send(self._info(entry, seq, epoch), entry.payload)
            return len(rows)
        entries = await self.store.read_after(
            DOMAIN, TOPIC, [(str(s), a) for s, a in request.sources]
        )
        for number, entry in enumerate(entries, start=1):
            await self._send(
                self._info(entry, None, None, (request.trans_id, number)), entry.payload
            )
        return len(entries)

    async def _published(self, received) -> None:  # type: ignore[no-untyped-def]
        option = received.options[0]
        header = publish_from_option(option)
        done = await self.store.commit_publication(
            DOMAIN,
            TOPIC,
            source=str(received.originator),
            payload=received.content,
            now_ms=int(time.time() * 1000),
            resolution=RES,
            retention=KEEP,
            type_="" if header.type is None else header.type.value,
        )
        answer = Published(topic=TOPIC, trans_id=option.trans_id, source_seq=done.source_seq)
        await self.attachment.send(received.originator, XmlContent(answer.to_xml()))


@contextlib.asynccontextmanager
async def _setup(
    redis_server: RedisServer,
    keys: Keys,
    tmp_path: Path,
    heartbeat_ms: int,
    events: list[tuple[float, StubEvent]],
) -> AsyncIterator[tuple[StandIn, RobustClient]]:
    redis = Redis.from_url(redis_server.url)
    async with (
        running_mesh(redis_server, keys, tmp_path) as mesh,
        endpoint_client(mesh.a.edge_port) as client_a,
        endpoint_client(mesh.b.edge_port) as client_b,
    ):
        store = RobustStore(redis, keys, "stand-in")
        assert await store.own(DOMAIN, TOPIC, 60_000)
        fred = StandIn(await client_a.attach(str(FRED)), store, heartbeat_ms)
        wilma = RobustClient(
            await client_b.attach(str(WILMA)),
            service=FRED,
            topic_of=lambda e: TOPIC if e == FRED else None,
            on_event=lambda topic, event: events.append((time.monotonic(), event)),
        )
        wilma.follow(TOPIC, resolution=RES, heartbeat_ms=heartbeat_ms, repair_timeout_ms=2_000)
        server = asyncio.create_task(fred.serve())
        try:
            yield fred, wilma
        finally:
            server.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await server
            await wilma.aclose()
            await redis.aclose()


async def _receive(client: RobustClient, count: int, within: float = 20.0) -> list[bytes]:
    out: list[bytes] = []
    async with asyncio.timeout(within):
        while len(out) < count:
            out.append((await client.next()).payload)
    return out


async def test_dropped_deliveries_are_repaired_by_link_range_in_order_once(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    events: list[tuple[float, StubEvent]] = []
    async with _setup(redis_server, keys, tmp_path, 1_000, events) as (fred, wilma):
        dropped = {4, 5, 17, 29}
        for n in range(30):
            await fred.publish(n, drop=n in dropped)
        got = await _receive(wilma, 30)
        assert got == [f"publication {n}".encode() for n in range(30)]
        stub = wilma.stub(TOPIC)
        assert stub.stats.delivered == 30
        assert stub.stats.link_repairs >= 2
        assert all(r.by_link for _, r in fred.gap_requests)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(wilma.next(), timeout=0.3)


async def test_heartbeats_reveal_a_silent_topics_loss_within_two_intervals(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    interval = 400
    events: list[tuple[float, StubEvent]] = []
    async with _setup(redis_server, keys, tmp_path, interval, events) as (fred, wilma):
        await fred.publish(0)
        assert await _receive(wilma, 1) == [b"publication 0"]
        dropped_at = time.monotonic()
        await fred.publish(1, drop=True)  # and then the topic falls silent

        async def beats() -> None:
            while True:
                await asyncio.sleep(interval / 1000)
                await fred.heartbeat()

        beating = asyncio.create_task(beats())
        try:
            assert await _receive(wilma, 1) == [b"publication 1"]
        finally:
            beating.cancel()
        detected = fred.gap_requests[0][0] - dropped_at
        assert detected <= 2 * interval / 1000, f"gap detected after {detected:.3f} s"


async def test_overdue_heartbeats_report_delayed_and_recover_the_lost_tail(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    interval = 300
    events: list[tuple[float, StubEvent]] = []
    async with _setup(redis_server, keys, tmp_path, interval, events) as (fred, wilma):
        await fred.publish(0)
        assert await _receive(wilma, 1) == [b"publication 0"]
        silent_from = time.monotonic()
        await fred.publish(1, drop=True)
        await fred.heartbeat(drop=True)  # even the heartbeat is lost
        assert await _receive(wilma, 1, within=10) == [b"publication 1"]
        delayed = [t for t, e in events if isinstance(e, Delayed)]
        assert delayed
        assert delayed[0] - silent_from < 2 * interval / 1000 + 1.0
        (open_request,) = [r for _, r in fred.gap_requests if r.link_to is None][:1]
        assert open_request.link_from == 1


async def test_a_lost_link_context_is_repaired_by_source(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    events: list[tuple[float, StubEvent]] = []
    async with _setup(redis_server, keys, tmp_path, 1_000, events) as (fred, wilma):
        for n in range(5):
            await fred.publish(
                n, source="publisher@fromaplace.net" if n % 2 else "publisher@elsewhere.net"
            )
        assert len(await _receive(wilma, 5)) == 5
        for n in range(5, 8):
            await fred.publish(n, drop=True)
        # The link context expires (as after 30 s detached): the next delivery restarts
        # the link at 0 in a new epoch.
        await fred.store._redis.delete(fred.store.keys.link(DOMAIN, TOPIC, str(WILMA)))
        for n in range(8, 12):
            await fred.publish(n)
        got = await _receive(wilma, 7)
        assert got == [f"publication {n}".encode() for n in range(5, 12)]
        stub = wilma.stub(TOPIC)
        assert stub.stats.resyncs == 1
        assert any(not r.by_link and r.sources for _, r in fred.gap_requests)


async def test_publishers_get_their_source_seq(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    events: list[tuple[float, StubEvent]] = []
    async with _setup(redis_server, keys, tmp_path, 1_000, events) as (_fred, wilma):
        header = PublishHeader(type=PublishType.UPDATE, item="XMPL")
        first = await wilma.publish(TOPIC, b"a", header, recipient=FRED)
        second = await wilma.publish(TOPIC, b"b", header, recipient=FRED)
        assert (first, second) == (1, 2)


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
            received = await asyncio.wait_for(fred.next_other(), timeout=10)
            assert received.content == b"goal"
            assert (await fred.cancel("sports")).code == 250
        finally:
            await mike.aclose()
            await fred.aclose()
