"""The pod-to-pod delivery stream (services/relay/peers.py) against a real gRPC server.

Deliveries queued while the stream's writer waits travel together in one stream message,
cut by size so no message nears the gRPC limit; outcomes come back to each delivery's
callback or future in order (plain successes as packed ids, when the caller asks for
them); a broken stream settles whatever was pending with 421. The servicer's side of
the packing is tested at the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from apexmesh.aio.tasks import within
from apexmesh.apex.endpoint import Endpoint
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from apexmesh.ops.logs import correlation_id
from apexmesh.relay.outcomes import DELIVERED, Outcome
from apexmesh.rpc.server import create_server
from services.relay.peers import BATCH_OCTETS, PACKED_OUTCOMES, UNAVAILABLE, PeerDelivery
from services.relay.servicer import _Answers
from tests.support.polling import eventually, scaled

pytestmark = pytest.mark.integration

FRED = Endpoint.parse("fred@example.com")
BARNEY = Endpoint.parse("barney@example.com")


class Recorder(relay_pb2_grpc.RelayServiceServicer):
    """Answers every delivery 250 (or 550 for a payload starting with b"no"), keeping the
    size of each stream message it received; ``hang`` stops answering. Successes go as
    packed ids when the caller asks for them, unless ``old`` (a pod of the version before
    packed outcomes)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.payloads: list[bytes] = []
        self.hang = False
        self.old = False
        self.asked_packed: list[bool] = []
        self.correlation_ids: list[str] = []

    async def DeliverStream(  # noqa: N802
        self,
        request_iterator: AsyncIterator[relay_pb2.DeliverBatch],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[relay_pb2.DeliverOutcomes]:
        asked = PACKED_OUTCOMES in tuple(context.invocation_metadata() or ())
        self.asked_packed.append(asked)
        async for batch in request_iterator:
            self.batches.append([len(r.payload) for r in batch.requests])
            self.payloads += [r.payload for r in batch.requests]
            self.correlation_ids += [r.correlation_id for r in batch.requests]
            if self.hang:
                await asyncio.Event().wait()
            outcomes = relay_pb2.DeliverOutcomes()
            for request in batch.requests:
                if request.payload.startswith(b"no"):
                    outcomes.responses.add(id=request.id).status.code = 550
                elif asked and not self.old:
                    outcomes.delivered.append(request.id)
                else:
                    outcomes.responses.add(id=request.id).status.code = 250
            yield outcomes


@pytest.fixture
async def pod() -> AsyncIterator[tuple[Recorder, grpc.aio.Server, str]]:
    recorder = Recorder()
    limit = PeerDelivery().max_message_bytes
    server, port = await create_server(
        [lambda s: relay_pb2_grpc.add_RelayServiceServicer_to_server(recorder, s)],
        max_message_bytes=limit,
    )
    try:
        yield recorder, server, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def test_deliveries_of_one_turn_share_a_message_cut_by_size(
    pod: tuple[Recorder, grpc.aio.Server, str],
) -> None:
    recorder, _, address = pod
    peers = PeerDelivery()
    try:
        payloads = [bytes([n]) * (300 * 1024) for n in range(10)]  # 3 MiB in one turn
        futures = [peers.deliver(address, BARNEY, FRED, p) for p in payloads]
        assert await asyncio.gather(*futures) == [DELIVERED] * 10
        assert recorder.payloads == payloads  # in order, none lost
        assert len(recorder.batches) >= 3
        assert all(sum(sizes) <= BATCH_OCTETS for sizes in recorder.batches)
        small = [peers.deliver(address, BARNEY, FRED, b"%d" % n) for n in range(100)]
        await asyncio.gather(*small)
        assert len(recorder.batches[-1]) == 100  # queued in one turn: one message
    finally:
        await peers.close()


async def test_one_delivery_of_the_largest_payload_passes(
    pod: tuple[Recorder, grpc.aio.Server, str],
) -> None:
    recorder, _, address = pod
    peers = PeerDelivery()
    try:
        big = b"z" * (4 * 1024 * 1024)
        assert await peers.deliver(address, BARNEY, FRED, big) == DELIVERED
        assert recorder.batches[-1] == [len(big)]
    finally:
        await peers.close()


@pytest.mark.parametrize("old_pod", [False, True])
async def test_callbacks_get_each_outcome(
    pod: tuple[Recorder, grpc.aio.Server, str], old_pod: bool
) -> None:
    recorder, _, address = pod
    recorder.old = old_pod  # answers every success as a response of its own
    peers = PeerDelivery()
    got: list[tuple[int, Outcome]] = []
    try:
        for n, payload in enumerate((b"yes", b"no", b"yes")):
            peers.send(address, BARNEY, FRED, payload, lambda o, n=n: got.append((n, o)))
        await eventually(lambda: len(got) == 3)
        assert sorted(got) == [(0, DELIVERED), (1, Outcome(550, "")), (2, DELIVERED)]
        assert recorder.asked_packed == [True]
    finally:
        await peers.close()


async def test_a_broken_stream_settles_pending_deliveries_with_421(
    pod: tuple[Recorder, grpc.aio.Server, str],
) -> None:
    recorder, server, address = pod
    peers = PeerDelivery()
    try:
        recorder.hang = True
        pending = peers.deliver(address, BARNEY, FRED, b"lost in transit")
        await eventually(lambda: bool(recorder.batches))
        await server.stop(None)
        assert await within(pending, scaled(5)) == UNAVAILABLE
    finally:
        await peers.close()


@pytest.mark.parametrize("packed", [True, False])
def test_the_servicer_packs_plain_successes_only_when_asked(packed: bool) -> None:
    answers = _Answers(packed=packed)
    answers.single(1, DELIVERED)
    answers.single(2, Outcome(550, "unknown endpoint identity"))
    answers.single(3, Outcome(250, "delivered, with a word"))
    batch = answers.take()
    assert batch is not None
    assert list(batch.delivered) == ([1] if packed else [])
    responses = {r.id: (r.status.code, r.status.text) for r in batch.responses}
    assert responses == {
        **({} if packed else {1: (250, "")}),
        2: (550, "unknown endpoint identity"),
        3: (250, "delivered, with a word"),
    }
    assert answers.take() is None


async def test_each_delivery_carries_the_correlation_id_of_its_data(
    pod: tuple[Recorder, grpc.aio.Server, str],
) -> None:
    """The receiving pod's log lines about a delivery carry the sending pod's id."""
    recorder, _, address = pod
    peers = PeerDelivery()
    try:
        for cid in ("c-one", "c-two"):
            token = correlation_id.set(cid)
            try:
                await peers.deliver(address, BARNEY, FRED, b"x")
            finally:
                correlation_id.reset(token)
        assert recorder.correlation_ids == ["c-one", "c-two"]
    finally:
        await peers.close()
