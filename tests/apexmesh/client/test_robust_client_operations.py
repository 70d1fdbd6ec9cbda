"""The SDK's robust operations besides the stub (issue #29), against the real pubsub
service over the running mesh (two relay pods, two pubsub pods, a real redis-server):
``follow`` learning the topic's settings, resuming after a process restart, the source
query, snapshots (an empty one too) with the item cache, permission tokens managed by
publishers and read back, and a subscription renewed before its lease ends."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from apexmesh.aio.tasks import within
from apexmesh.apex.endpoint import Endpoint
from apexmesh.client import Attachment, PubsubClient
from apexmesh.client.errors import ApexRequestError, PubsubError
from apexmesh.client.robust import RobustClient
from apexmesh.pubsub.robust.elements import PublishHeader
from apexmesh.pubsub.robust.item_cache import ItemCache
from apexmesh.pubsub.robust.permissions import ChangeKind, PermissionChange, actor_of
from apexmesh.pubsub.robust.position import LinkPosition
from apexmesh.pubsub.robust.publish_types import PublishType
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.store.keys import Keys
from apexmesh.store.robust_keys import RobustKeys
from tests.services.pubsub.conftest import PubsubMesh, started_mesh, until
from tests.services.pubsub.robust_support import subscribed
from tests.support.mesh import endpoint_client
from tests.support.polling import scaled, wait_until
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DOMAIN, NEWS = "example.com", "news"
SETTINGS = RobustSettings(resolution=Resolution.BITS16, heartbeat_ms=700)
WILMA = Endpoint.parse(f"wilma@{DOMAIN}")


@contextlib.asynccontextmanager
async def _mesh(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> AsyncIterator[tuple[PubsubMesh, contextlib.AsyncExitStack]]:
    async with (
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("p1", "p2")) as mesh,
        contextlib.AsyncExitStack() as stack,
    ):
        yield mesh, stack


async def _robust(
    mesh: PubsubMesh, stack: contextlib.AsyncExitStack, name: str, relay: str = "a"
) -> RobustClient:
    port = (mesh.a if relay == "a" else mesh.b).edge_port
    client = await stack.enter_async_context(endpoint_client(port))

    async def attached() -> Attachment | None:
        try:
            return await client.attach(f"{name}@{DOMAIN}")
        except ApexRequestError as exc:
            # A restarted process may come back before its old session's attachment
            # was released (the relay learns it from the session's end): again.
            if exc.code != 554:
                raise
            return None

    robust = RobustClient(await wait_until(attached, 10, every=0.05, what=f"{name} attached"))
    stack.push_async_callback(robust.aclose)
    return robust


async def _topic(mesh: PubsubMesh, stack: contextlib.AsyncExitStack, *topics: str) -> None:
    """``topics`` created robust by Mike."""
    client = await stack.enter_async_context(endpoint_client(mesh.a.edge_port))
    mike = PubsubClient(await client.attach(f"mike@{DOMAIN}"))
    stack.push_async_callback(mike.aclose)
    for topic in topics:
        assert (await mike.create_topic(topic, robust=SETTINGS)).code == 250


async def _next(client: RobustClient, count: int, within: float = 15.0) -> list[bytes]:
    async with asyncio.timeout(scaled(within)):
        return [(await client.next()).payload for _ in range(count)]


async def test_follow_learns_the_topics_settings_and_the_caller_may_override_them(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with _mesh(redis_server, keys, tmp_path) as (mesh, stack):
        await _topic(mesh, stack, NEWS)
        wilma = await _robust(mesh, stack, "wilma")
        stub = await wilma.follow(NEWS)
        assert (stub.resolution, stub.heartbeat_ms) == (Resolution.BITS16, 700)
        barney = await _robust(mesh, stack, "barney")
        assert (await barney.follow(NEWS, heartbeat_ms=900)).heartbeat_ms == 900
        info = await wilma.source_query(NEWS)
        assert info.settings == SETTINGS
        with pytest.raises(PubsubError) as refused:
            await wilma.follow("nosuch")
        assert refused.value.code == 553


async def test_a_subscriber_restarting_its_process_resumes_where_it_left_off(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    """Wilma's process saves its position after each publication and restarts twice:
    once with its subscription still alive (the link goes on: repaired by link range),
    once after its subscription ended meanwhile (the service restarts the link above
    the saved epoch: repaired by source). Each time her application gets exactly what
    it had not got, in order."""
    async with _mesh(redis_server, keys, tmp_path) as (mesh, stack):
        await _topic(mesh, stack, NEWS)
        fred = await _robust(mesh, stack, "fred", "b")
        process = contextlib.AsyncExitStack()  # her first process: its session ends with it
        stack.push_async_callback(process.aclose)
        wilma = await _robust(mesh, process, "wilma")
        await wilma.follow(NEWS)
        await wilma.subscribe(NEWS, duration=60)
        await subscribed(mesh.pubsub.values(), DOMAIN, NEWS, WILMA)
        for n in range(5):
            await fred.publish(NEWS, f"m{n}".encode())
        assert await _next(wilma, 5) == [f"m{n}".encode() for n in range(5)]
        saved = wilma.position(NEWS)
        assert saved is not None
        text = saved.dumps()  # what the application stores
        await process.aclose()
        for n in range(5, 8):
            await fred.publish(NEWS, f"m{n}".encode())

        # Restarted, subscription alive: the link goes on from the saved position.
        process = contextlib.AsyncExitStack()
        stack.push_async_callback(process.aclose)
        again = await _robust(mesh, process, "wilma", "b")
        await again.follow(NEWS, resume=LinkPosition.loads(text))
        await again.subscribe(NEWS, duration=60)
        assert await _next(again, 3) == [b"m5", b"m6", b"m7"]
        saved = again.position(NEWS)
        assert saved is not None
        await again.cancel(NEWS)
        await process.aclose()

        # The subscription ended while the process was down; the service forgets the
        # link (its owner pod's next round ends it), and publications go on.
        redis = Redis.from_url(redis_server.url)
        stack.push_async_callback(redis.aclose)
        link = RobustKeys(keys).link(DOMAIN, NEWS, str(WILMA))

        async def forgotten() -> bool:
            return not await redis.exists(link)

        await until(forgotten, within=10)
        for n in range(8, 11):
            await fred.publish(NEWS, f"m{n}".encode())
        third = await _robust(mesh, stack, "wilma", "a")
        stub = await third.follow(NEWS, resume=saved)
        await third.subscribe(NEWS, duration=60)
        await subscribed(mesh.pubsub.values(), DOMAIN, NEWS, WILMA)
        await fred.publish(NEWS, b"m11")
        assert await _next(third, 4) == [b"m8", b"m9", b"m10", b"m11"]
        assert stub.stats.resyncs == 1
        assert stub.stats.source_repairs >= 1
        with pytest.raises(TimeoutError):
            await within(third.next(), timeout=scaled(0.5))


async def test_a_snapshot_answers_images_or_nothing_and_the_item_cache_takes_them(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with _mesh(redis_server, keys, tmp_path) as (mesh, stack):
        await _topic(mesh, stack, NEWS)
        fred = await _robust(mesh, stack, "fred", "b")
        wilma = await _robust(mesh, stack, "wilma")
        await wilma.subscribe(NEWS, duration=60)
        assert await wilma.snapshot(NEWS) == []  # no items yet: an empty snapshot
        await fred.publish(NEWS, b"no item")
        assert await wilma.snapshot(NEWS) == []  # a datastream without items
        quote = PublishHeader(type=PublishType.IMAGE, item="XMPL")
        await fred.publish(NEWS, b"<q><bid>1</bid><ask>2</ask></q>", quote)
        await fred.publish(
            NEWS, b"<q><bid>3</bid></q>", PublishHeader(type=PublishType.UPDATE, item="XMPL")
        )
        await fred.publish(NEWS, b"<q><bid>7</bid></q>", PublishHeader(item="ABCD"))
        images = await wilma.snapshot(NEWS)
        assert [(i.item, i.type, i.source_seq) for i in images] == [
            ("ABCD", PublishType.IMAGE, 4),
            ("XMPL", PublishType.IMAGE, 3),
        ]
        cache = ItemCache()
        cache.load(images)
        assert cache["XMPL"].payload() == b"<image><ask>2</ask><bid>3</bid></image>"
        (one,) = await wilma.snapshot(NEWS, item="XMPL")
        assert one.item == "XMPL"
        assert await wilma.snapshot(NEWS, item="NONE") == []


async def test_publishers_manage_their_own_tokens_and_the_table_is_read_back(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    """XEP 5.1 "individual publishers can manage access": anyone may publish to
    ``news`` (the seed's entries), so Fred and Barney are publishers; Mike created it."""
    async with _mesh(redis_server, keys, tmp_path) as (mesh, stack):
        await _topic(mesh, stack, NEWS)
        fred = await _robust(mesh, stack, "fred", "b")
        barney = await _robust(mesh, stack, "barney")
        wilma = await _robust(mesh, stack, "wilma")
        await wilma.follow(NEWS)
        await wilma.subscribe(NEWS, duration=60)
        await subscribed(mesh.pubsub.values(), DOMAIN, NEWS, WILMA)
        grant = PermissionChange(ChangeKind.GRANT, "fred-1", actor_of(str(WILMA)))
        assert (await fred.permissions(NEWS, [grant])).code == 250
        deny = PermissionChange(ChangeKind.DENY, "fred-1", actor_of(str(WILMA)))
        with pytest.raises(PubsubError) as refused:
            await barney.permissions(NEWS, [deny])
        assert refused.value.code == 537
        table = await fred.permission_table(NEWS)
        assert table.owners == {"fred-1": str(fred.attachment.endpoint)}
        assert table.allows(WILMA, "fred-1")
        assert not table.allows(barney.attachment.endpoint, "fred-1")
        await fred.publish(NEWS, b"for wilma", PublishHeader(permtoken="fred-1"))
        assert await _next(wilma, 1) == [b"for wilma"]
        # Barney (a publisher too) reads the table; a token nobody made lets no one in.
        assert (await barney.permission_table(NEWS)) == table
        assert not table.allows(WILMA, "nobody-1")


async def test_keep_subscribed_renews_the_lease_before_it_ends(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with _mesh(redis_server, keys, tmp_path) as (mesh, stack):
        await _topic(mesh, stack, NEWS)
        wilma = await _robust(mesh, stack, "wilma")
        await wilma.follow(NEWS)
        lease = wilma.keep_subscribed(NEWS, duration=2)
        app = mesh.pubsub["p1"]

        async def expiry() -> int:
            state = await app.subscribers.topic(DOMAIN, NEWS)
            return max(
                (s.expires_ms for s in state.subscriptions.values() if s.subscriber == WILMA),
                default=0,
            )

        async def subscribed_now() -> bool:
            return await expiry() > 0

        await until(subscribed_now, within=10)
        first = await expiry()

        async def renewed() -> bool:
            return await expiry() > first and time.time() * 1000 > first

        await until(renewed, within=10)  # past the first lease's end: still subscribed
        assert not lease.done()
        selection = wilma.keep_subscribed(NEWS, duration=2, selector="price > 1")
        with contextlib.suppress(TimeoutError):
            await within(asyncio.shield(selection), timeout=scaled(0.5))
        assert not selection.done()  # subscribed and renewing (an id: no refusal)
