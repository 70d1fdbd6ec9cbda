"""``Sequencers.forward`` (services/pubsub/robust_owner.py): a publication for a robust
topic handed to the pod owning its sequencer lease, against a real gRPC server standing
in as the owner (tests/support/fake_owner.py).

A forward cut off after the owner took it is sent again with the same delivery id and
answered from the owner's first commit; one cut off on every attempt leaves its outcome
unknown (never 450, "not sequenced"); one that reached nobody is 450 and its channel is
closed. Forwards pipeline over one batched stream carrying the forwarded mark, and the
channels to owner pods are bounded: the evicted and the idle ones are closed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from redis.asyncio import Redis

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.client import PubsubClient
from apexmesh.contracts.endpoint.v1 import endpoint_pb2
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.rpc.retry import DELIVER
from apexmesh.rpc.server import create_server
from apexmesh.store.keys import Keys
from apexmesh.store.robust import RobustKeys, RobustStore
from apexmesh.store.robust_topics import RobustTopics, holder_value
from services.pubsub.app import PubsubApp
from services.pubsub.robust_owner import (
    OWNER_CHANNEL_IDLE_MS,
    OutcomeUnknownError,
    Sequencers,
)
from services.pubsub.robust_serving import RobustSettingsReader
from tests.services.pubsub.conftest import PubsubMesh, started_mesh, until
from tests.support.fake_owner import ScriptedOwner, scripted_owners
from tests.support.mesh import endpoint_client
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

#: Attempts at one forward, the first included (the one policy of Deliver calls).
DELIVER_ATTEMPTS = DELIVER.attempts or 1

#: Seconds a forward waits for the owner: short, so a held call is cut off quickly.
TIMEOUT = 0.5
DOMAIN = "example.com"
NEWS = "news"
SETTINGS = RobustSettings(resolution=Resolution.BITS16, heartbeat_ms=300, retain_count=1000)


class Clock:
    """The pod's clock (ms), moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@asynccontextmanager
async def sequencers(
    redis: Redis, keys: Keys, clock: Clock, *, channels: int = 32
) -> AsyncIterator[Sequencers]:
    store = RobustStore(redis, keys, "pod-a|127.0.0.1:1")
    sequencers = Sequencers(
        store=store,
        topics=RobustTopics(redis, store.keys),
        clock=clock,
        lease_ms=3_000,
        timeout=TIMEOUT,
        channels=channels,
    )
    try:
        yield sequencers
    finally:
        await sequencers.aclose()


def publication(delivery_id: str = "relay-1-7") -> endpoint_pb2.EndpointDeliverRequest:
    return endpoint_pb2.EndpointDeliverRequest(
        recipient="apex=pubsub/news@example.com",
        originator="fred@example.com",
        payload=b"<data/>",
        delivery_id=delivery_id,
    )


@pytest.mark.parametrize(
    "owner",
    [
        pytest.param(lambda: ScriptedOwner(held=1), id="deadline"),
        pytest.param(lambda: ScriptedOwner(grpc.StatusCode.UNKNOWN), id="unknown"),
        pytest.param(lambda: ScriptedOwner(grpc.StatusCode.CANCELLED), id="cancelled"),
    ],
)
async def test_a_forward_cut_off_after_the_owner_took_it_is_sent_again_with_its_id(
    redis: Redis, keys: Keys, owner: Callable[[], ScriptedOwner]
) -> None:
    """The first call reached the owner, which committed it, and its answer was lost
    (the deadline passed, or the call ended cut off): the retry carries the same
    delivery id, the owner answers it from the first commit, the forward is 250."""
    scripted = owner()
    async with scripted_owners(scripted) as (address,), sequencers(redis, keys, Clock()) as seq:
        assert await seq.forward(address, publication()) == (ApexReplyCode.SUCCESS, "")
    assert scripted.calls == [("relay-1-7", True), ("relay-1-7", True)]
    assert scripted.committed == {"relay-1-7": 1}


async def test_a_forward_cut_off_on_every_attempt_leaves_the_outcome_unknown(
    redis: Redis, keys: Keys
) -> None:
    """Never 450 ("not sequenced": the publisher would send it again and the owner,
    which did commit, would sequence it twice): the outcome is unknown, for the
    incoming Deliver to end cut off (services/pubsub/endpoint.py) and be retried."""
    scripted = ScriptedOwner(*[grpc.StatusCode.INTERNAL] * DELIVER_ATTEMPTS)
    async with scripted_owners(scripted) as (address,), sequencers(redis, keys, Clock()) as seq:
        with pytest.raises(OutcomeUnknownError):
            await seq.forward(address, publication())
    assert scripted.calls == [("relay-1-7", True)] * DELIVER_ATTEMPTS
    assert scripted.committed == {"relay-1-7": 1}


async def test_a_cut_off_forward_without_a_delivery_id_is_not_sent_again(
    redis: Redis, keys: Keys
) -> None:
    """Without an id the owner cannot tell a repeat from a new publication: one call,
    and the outcome is unknown."""
    scripted = ScriptedOwner(grpc.StatusCode.UNKNOWN)
    async with scripted_owners(scripted) as (address,), sequencers(redis, keys, Clock()) as seq:
        with pytest.raises(OutcomeUnknownError):
            await seq.forward(address, publication(delivery_id=""))
    assert scripted.calls == [("", True)]


async def test_an_owner_that_cannot_be_reached_is_450_and_its_channel_closed(
    redis: Redis, keys: Keys
) -> None:
    """UNAVAILABLE reached nobody: nothing was sequenced, 450 stands; the channel to
    the pod that went away is not kept."""
    server, port = await create_server([])
    await server.stop(0)  # a pod that was there and is gone: nothing listens on its port
    async with sequencers(redis, keys, Clock()) as seq:
        with pytest.raises(ApexError) as refused:
            await seq.forward(f"127.0.0.1:{port}", publication())
        assert refused.value.code == ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT
        assert seq.owner_addresses == ()


async def test_forwards_pipeline_over_one_stream_each_call_marked_forwarded(
    redis: Redis, keys: Keys
) -> None:
    """Forwards go batched over one DeliverStream, as a relay's calls to a pubsub pod
    do: many publications in flight share stream messages, and the owner reads the
    forwarded mark of each (no loops) from the stream's metadata."""
    scripted = ScriptedOwner()
    count = 200
    async with scripted_owners(scripted) as (address,), sequencers(redis, keys, Clock()) as seq:
        answers = await asyncio.gather(
            *(seq.forward(address, publication(f"relay-1-{n}")) for n in range(count))
        )
    assert answers == [(ApexReplyCode.SUCCESS, "")] * count
    assert sorted(scripted.calls) == sorted((f"relay-1-{n}", True) for n in range(count))
    assert scripted.streams_opened == 1
    assert scripted.batches < count


async def test_channels_to_owners_are_bounded_and_the_evicted_and_idle_ones_closed(
    redis: Redis, keys: Keys
) -> None:
    """Room for one owner: forwarding to a second closes the first's channel (its
    stream ends at the owner); the robust task's round closes a channel left idle."""
    clock = Clock()
    first, second = ScriptedOwner(), ScriptedOwner()
    async with (
        scripted_owners(first, second) as (one, two),
        sequencers(redis, keys, clock, channels=1) as seq,
    ):
        assert await seq.forward(one, publication("relay-1-1")) == (ApexReplyCode.SUCCESS, "")
        assert await seq.forward(two, publication("relay-1-2")) == (ApexReplyCode.SUCCESS, "")
        assert seq.owner_addresses == (two,)
        async with asyncio.timeout(scaled(5)):
            await first.ended.wait()
        assert not second.ended.is_set()
        clock.now += OWNER_CHANNEL_IDLE_MS - 1
        assert await seq.renew() == []  # owns nothing: only the channels are looked at
        assert seq.owner_addresses == (two,)
        clock.now += 1
        await seq.renew()
        assert not seq.owner_addresses  # closed
        async with asyncio.timeout(scaled(5)):
            await second.ended.wait()


async def robust_news(mesh: PubsubMesh, stack: contextlib.AsyncExitStack) -> PubsubClient:
    """Mike attached through relay a, his robust topic NEWS created and known to both
    pods' caches (a publication is then served by whichever pod the relay picks)."""
    client = await stack.enter_async_context(endpoint_client(mesh.relay("a").edge_port))
    mike = PubsubClient(await client.attach(f"mike@{DOMAIN}"))
    stack.push_async_callback(mike.aclose)
    await mike.create_topic(NEWS, robust=SETTINGS)
    for app in mesh.pubsub.values():

        async def known(app: PubsubApp = app) -> bool:
            return RobustSettingsReader()(await app.subscribers.topic(DOMAIN, NEWS)) == SETTINGS

        await until(known)
    return mike


async def test_a_publication_whose_forward_stays_cut_off_is_retried_by_its_relay(
    redis_server: RedisServer, redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    """Through the running mesh: the topic's lease names a scripted owner that cuts off
    every forward of the first pod's attempts. The pod ends the relay's ``Deliver`` cut
    off (not 450), the relay delivers again with the same delivery id, the pod forwards
    it again and the owner answers that repeat from its one commit: the publisher gets
    ``ok``, the publication was sequenced once."""
    scripted = ScriptedOwner(*[grpc.StatusCode.UNKNOWN] * DELIVER_ATTEMPTS)
    async with (
        scripted_owners(scripted) as (address,),
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("p1", "p2")) as mesh,
        contextlib.AsyncExitStack() as stack,
    ):
        # The scripted pod holds the lease before any pod can claim the new topic.
        await redis.set(
            RobustKeys(keys).owner(DOMAIN, NEWS), holder_value("ghost", address), px=60_000
        )
        mike = await robust_news(mesh, stack)
        await mike.publish(NEWS, b"m1")  # raises unless the relay's report is 250
    ids = {delivery_id for delivery_id, _ in scripted.calls}
    assert len(scripted.calls) == DELIVER_ATTEMPTS + 1
    assert all(mark for _, mark in scripted.calls)
    assert len(ids) == 1
    assert scripted.committed == dict.fromkeys(ids, 1)


async def test_a_publication_to_a_dead_owner_waits_for_its_lease_and_is_sequenced_here(
    redis_server: RedisServer, redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    """Through the running mesh: the topic's lease names a pod that is gone (nothing
    listens at its address) and lapses in a second. The publication is not 450 (a send
    again for every publication in flight when an owner pod dies): the pod claims the
    topic again until the lease lapsed, takes it and sequences the publication, once."""
    server, port = await create_server([])
    await server.stop(0)
    async with (
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("p1", "p2")) as mesh,
        contextlib.AsyncExitStack() as stack,
    ):
        mike = await robust_news(mesh, stack)
        owner = RobustKeys(keys).owner(DOMAIN, NEWS)
        await redis.set(owner, holder_value("dead", f"127.0.0.1:{port}"), px=1_000)
        await mike.publish(NEWS, b"m1")  # raises unless the relay's report is 250
        holder = await redis.get(owner)
    assert holder is not None
    assert b"dead" not in holder
    assert await redis.xlen(RobustKeys(keys).stream(DOMAIN, NEWS)) == 1


async def test_a_forward_whose_owner_died_with_it_is_sequenced_once_by_the_next_owner(
    redis_server: RedisServer, redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    """The owner took the forward and went away (cut off, then unreachable: the outcome
    unknown, the owner gone) and its lease lapses in two and a half seconds. The pod waits
    for the lease, takes the topic and commits the publication under the same delivery
    key (had the dead owner committed it, the script would answer from that commit):
    the publisher gets ``ok``, the stream holds it once."""
    # Gone for good: every later call answered UNAVAILABLE, as a dead pod's address is.
    scripted = ScriptedOwner(grpc.StatusCode.UNKNOWN, *[grpc.StatusCode.UNAVAILABLE] * 100)
    async with (
        scripted_owners(scripted) as (address,),
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("p1", "p2")) as mesh,
        contextlib.AsyncExitStack() as stack,
    ):
        mike = await robust_news(mesh, stack)
        owner = RobustKeys(keys).owner(DOMAIN, NEWS)
        # Longer than the relay's own three attempts take (each a forward of three):
        # a pod has to wait for the lease to get the publication in.
        await redis.set(owner, holder_value("ghost", address), px=2_500)
        await mike.publish(NEWS, b"m1")  # raises unless the relay's report is 250
        holder = await redis.get(owner)
    assert holder is not None
    assert b"ghost" not in holder
    assert len(scripted.calls) >= DELIVER_ATTEMPTS
    assert len({delivery_id for delivery_id, _ in scripted.calls}) == 1
    assert await redis.xlen(RobustKeys(keys).stream(DOMAIN, NEWS)) == 1
