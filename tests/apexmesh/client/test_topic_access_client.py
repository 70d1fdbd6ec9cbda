"""Who may use a topic, against the running mesh (relays, pubsub pods, the access
service, redis-server; real TCP): the basic program (one endpoint creates and
publishes, another subscribes) with no operator step, a createtopic stating its
access, and the creator granting, denying, revoking and listing through apex=access
(issue #29). A topic whose entries an operator seeded keeps them as they are."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from apexmesh.client import AccessRequestError, Audience, PubsubClient, PubsubError
from apexmesh.client.received import ReceivedData
from apexmesh.store.keys import Keys
from tests.services.pubsub.conftest import PubsubMesh, started_mesh
from tests.support.mesh import endpoint_client
from tests.support.polling import scaled, wait_until
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

Attach = Callable[[str, str], Awaitable[PubsubClient]]


@contextlib.asynccontextmanager
async def running(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> AsyncIterator[tuple[PubsubMesh, Attach]]:
    async with (
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("p1", "p2")) as mesh,
        contextlib.AsyncExitStack() as stack,
    ):
        helpers: list[PubsubClient] = []

        async def attach(endpoint: str, pod: str) -> PubsubClient:
            client = await stack.enter_async_context(endpoint_client(mesh.relay(pod).edge_port))
            helper = PubsubClient(await client.attach(endpoint))
            helpers.append(helper)
            return helper

        try:
            yield mesh, attach
        finally:
            for helper in helpers:
                await helper.aclose()


async def received(pubsub: PubsubClient, within: float = 5.0) -> tuple[str, ReceivedData]:
    async with asyncio.timeout(scaled(within)):
        return await pubsub.next_publication()


async def code_of(call: Awaitable[object]) -> int:
    try:
        await call
    except PubsubError as refused:
        return refused.code
    return 250


async def eventually(call: Callable[[], Awaitable[int]], code: int, within: float = 5.0) -> None:
    """A change of entries reaches the relays' and pods' decision caches by the access
    service's change channel, within milliseconds: poll until it did."""

    async def answered() -> bool:
        return await call() == code

    await wait_until(answered, within, every=0.05, what=f"answer {code}")


async def test_another_endpoint_subscribes_to_a_new_topic_with_no_operator_step(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    """The default (nothing stated): anyone of the domain subscribes, the creator
    publishes; without it the subscriber got 537. Stating ``publishers`` lets the
    second endpoint publish too."""
    async with running(redis_server, keys, tmp_path) as (_mesh, attach):
        mike = await attach("mike@example.com", "a")
        fred = await attach("fred@example.com", "b")
        await mike.create_topic("weather.today")
        assert (await fred.subscribe("weather.today")).code == 250  # duration: the default
        await mike.publish("weather.today", b"sunny")
        topic, data = await received(fred)
        assert (topic, data.content) == ("weather.today", b"sunny")
        assert await code_of(fred.publish("weather.today", b"mine")) == 537

        await mike.create_topic("weather.open", publishers=Audience.DOMAIN)
        assert (await fred.subscribe("weather.open")).code == 250
        await fred.publish("weather.open", b"rain")
        topic, data = await received(fred)
        assert (topic, data.content) == ("weather.open", b"rain")
        await fred.cancel("weather.open")


async def test_the_creator_states_grants_denies_and_lists(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with running(redis_server, keys, tmp_path) as (_mesh, attach):
        mike = await attach("mike@example.com", "a")
        fred = await attach("fred@example.com", "b")
        wilma = await attach("wilma@example.com", "a")
        await mike.create_topic(
            "quotes.x", subscribers=Audience.OWNER, publishers="fred@example.com"
        )
        assert await code_of(fred.publish("quotes.x", b"1")) == 250
        assert await code_of(fred.subscribe("quotes.x")) == 537
        assert await code_of(wilma.subscribe("quotes.x")) == 537
        listed = {str(e.actor): e.actions for e in await mike.access_entries("quotes.x")}
        assert {a: (t.tokens if t else None) for a, t in listed.items()} == {
            "mike@example.com": frozenset(
                {
                    "pubsub:subscribe",
                    "pubsub:cancel",
                    "core:data",
                    "access:query",
                    "access:get",
                    "access:set",
                }
            ),
            "fred@example.com": frozenset({"core:data"}),
        }

        assert await mike.grant("quotes.x", "*@example.com", "subscribe") == frozenset(
            {"pubsub:subscribe", "pubsub:cancel"}
        )
        await eventually(lambda: code_of(wilma.subscribe("quotes.x")), 250)
        await mike.publish("quotes.x", b"2")
        assert (await received(wilma))[1].content == b"2"
        # fred's exact entry wins over '*@example.com' (RFC 3341 3.1): give him both
        await mike.grant("quotes.x", "fred@example.com", "subscribe")
        await eventually(lambda: code_of(fred.subscribe("quotes.x")), 250)

        assert await mike.deny("quotes.x", "fred@example.com", "publish") == frozenset(
            {"pubsub:subscribe", "pubsub:cancel"}
        )
        await eventually(lambda: code_of(fred.publish("quotes.x", b"3")), 537)
        assert await mike.deny("quotes.x", "wilma@example.com") == frozenset()
        await eventually(lambda: code_of(wilma.subscribe("quotes.x")), 537)
        assert await mike.revoke("quotes.x", "wilma@example.com") is True
        await eventually(lambda: code_of(wilma.subscribe("quotes.x")), 250)
        assert await mike.revoke("quotes.x", "wilma@example.com") is False

        # only who holds access:* on the topic manages it
        with pytest.raises(AccessRequestError) as refused:
            await wilma.grant("quotes.x", "wilma@example.com", "publish")
        assert refused.value.code == 537
        with pytest.raises(AccessRequestError) as hidden:
            await wilma.access_entries("quotes.x")
        assert hidden.value.code == 537
        with pytest.raises(AccessRequestError) as malformed:
            await mike.grant("quotes.x", "nobody", "publish")
        assert malformed.value.code == 553


async def test_a_seeded_topic_keeps_the_operators_entries(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    """``news`` has seeded entries (anyone subscribes and publishes, dino nothing,
    mr.slate no core:data): creating it adds the creator's entry and no default."""
    async with running(redis_server, keys, tmp_path) as (_mesh, attach):
        mike = await attach("mike@example.com", "a")
        fred = await attach("fred@example.com", "b")
        slate = await attach("mr.slate@example.com", "b")
        await mike.create_topic("news")
        actors = {str(entry.actor) for entry in await mike.access_entries("news")}
        assert actors == {"*@*", "dino@example.com", "mr.slate@example.com", "mike@example.com"}
        assert (await fred.subscribe("news")).code == 250
        await fred.publish("news", b"seeded")
        assert (await received(fred))[1].content == b"seeded"
        assert await code_of(slate.publish("news", b"no")) == 537
