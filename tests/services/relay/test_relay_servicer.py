"""The relay's gRPC servicer: Submit from services, retried with a submission id."""

from __future__ import annotations

import asyncio
import dataclasses

import grpc
import pytest

from apexmesh.apex.data import Recipient
from apexmesh.apex.endpoint import Endpoint
from apexmesh.beep.mime import beep_xml
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from services.relay.wellknown import inline_data
from tests.support.mesh import Mesh, endpoint_client, receive

pytestmark = pytest.mark.integration

PUBSUB = Endpoint.parse("apex=pubsub@example.com")
BARNEY = Endpoint.parse("barney@example.com")


def submission(text: bytes, submission_id: str) -> relay_pb2.SubmitRequest:
    data = inline_data(PUBSUB, BARNEY, text)
    return relay_pb2.SubmitRequest(
        originator=str(PUBSUB),
        payload=beep_xml(data.to_xml()),
        submission_id=submission_id,
    )


async def test_a_retried_submission_is_relayed_once(mesh: Mesh) -> None:
    """A service that retries a Submit cut off mid-flight (same submission id) gets the
    first attempt's answer, and the recipient gets the data once."""
    async with endpoint_client(mesh.a.edge_port) as client:
        barney = await client.attach(str(BARNEY))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{mesh.a.grpc_port}") as channel:
            stub = relay_pb2_grpc.RelayServiceStub(channel)
            first = await stub.Submit(submission(b"<n>1</n>", "pub-1:pod-a:0"))
            again = await stub.Submit(submission(b"<n>1</n>", "pub-1:pod-a:0"))
            other = await stub.Submit(submission(b"<n>2</n>", "pub-2:pod-a:0"))
        assert (first.status.code, again.status.code, other.status.code) == (250, 250, 250)
        received = [(await receive(barney)).content for _ in range(2)]
        assert received == [b"<n>1</n>", b"<n>2</n>"]
        with pytest.raises(TimeoutError):
            await receive(barney, within=0.5)


async def test_concurrent_attempts_of_one_submission_relay_it_once(mesh: Mesh) -> None:
    async with endpoint_client(mesh.a.edge_port) as client:
        barney = await client.attach(str(BARNEY))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{mesh.a.grpc_port}") as channel:
            stub = relay_pb2_grpc.RelayServiceStub(channel)
            answers = await asyncio.gather(
                *(stub.Submit(submission(b"<n>once</n>", "pub-9:pod-a:0")) for _ in range(5))
            )
        assert {answer.status.code for answer in answers} == {250}
        assert (await receive(barney)).content == b"<n>once</n>"
        with pytest.raises(TimeoutError):
            await receive(barney, within=0.5)


async def test_an_oversized_submission_id_is_refused(mesh: Mesh) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{mesh.a.grpc_port}") as channel:
        stub = relay_pb2_grpc.RelayServiceStub(channel)
        answer = await stub.Submit(submission(b"<n/>", "x" * 300))
    assert answer.status.code == 553


async def test_cold_access_decisions_of_a_fan_out_are_fetched_in_one_call(mesh: Mesh) -> None:
    """A service's data to many recipients whose decisions are not cached costs one
    ``CheckMany`` (issue #33), not one call per recipient in series; the recipients it
    allows still get the data."""
    others = tuple(Endpoint.parse(f"cold{index}@example.com") for index in range(30))
    data = dataclasses.replace(
        inline_data(PUBSUB, BARNEY, b"<n>fan</n>"),
        recipients=tuple(Recipient(identity=e) for e in (*others, BARNEY)),
    )
    checker = mesh.a.checker
    async with endpoint_client(mesh.a.edge_port) as client:
        barney = await client.attach(str(BARNEY))
        fetches = checker.fetches
        async with grpc.aio.insecure_channel(f"127.0.0.1:{mesh.a.grpc_port}") as channel:
            stub = relay_pb2_grpc.RelayServiceStub(channel)
            answer = await stub.Submit(
                relay_pb2.SubmitRequest(
                    originator=str(PUBSUB),
                    payload=beep_xml(data.to_xml()),
                    submission_id="fan-1:pod-a:0",
                )
            )
        assert answer.status.code == 250
        assert (await receive(barney)).content == b"<n>fan</n>"
        assert checker.fetches - fetches == 1
        assert checker.lookup(str(others[-1]), str(PUBSUB), "core:data") is not None
