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
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import grpc
import pytest
from redis.asyncio import Redis

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.contracts.endpoint.v1 import endpoint_pb2
from apexmesh.rpc.server import create_server
from apexmesh.store.keys import Keys
from apexmesh.store.robust import RobustStore
from apexmesh.store.robust_topics import RobustTopics
from services.pubsub.robust_owner import (
    FORWARD_ATTEMPTS,
    OWNER_CHANNEL_IDLE_MS,
    OutcomeUnknownError,
    Sequencers,
)
from tests.support.fake_owner import ScriptedOwner, scripted_owners

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

#: Seconds a forward waits for the owner: short, so a held call is cut off quickly.
TIMEOUT = 0.5


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
    scripted = ScriptedOwner(*[grpc.StatusCode.INTERNAL] * FORWARD_ATTEMPTS)
    async with scripted_owners(scripted) as (address,), sequencers(redis, keys, Clock()) as seq:
        with pytest.raises(OutcomeUnknownError):
            await seq.forward(address, publication())
    assert scripted.calls == [("relay-1-7", True)] * FORWARD_ATTEMPTS
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
        async with asyncio.timeout(5):
            await first.ended.wait()
        assert not second.ended.is_set()
        clock.now += OWNER_CHANNEL_IDLE_MS - 1
        assert await seq.renew() == []  # owns nothing: only the channels are looked at
        assert seq.owner_addresses == (two,)
        clock.now += 1
        await seq.renew()
        assert not seq.owner_addresses  # closed
        async with asyncio.timeout(5):
            await second.ended.wait()
