"""Well-known endpoint services with several pods (``APEXMESH_RELAY_SERVICES=
name=a|b``): deliveries spread round-robin over real gRPC servers, an unreachable pod is
skipped, a delivery whose every pod refuses waits for one to come back, and with every
pod unreachable for the whole wait the outcome is 421."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import pytest

from apexmesh.apex.data import Data, Originator, Recipient
from apexmesh.apex.endpoint import Endpoint
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.endpoint.v1 import endpoint_pb2, endpoint_pb2_grpc
from apexmesh.rpc.access import AccessClient
from apexmesh.rpc.endpoint import WellKnownEndpointServicer
from apexmesh.rpc.server import create_server
from services.relay.settings import _service_addresses
from services.relay.wellknown import WellKnownServices
from tests.support.redis_server import free_port

pytestmark = pytest.mark.integration

PUBSUB = Endpoint.parse("apex=pubsub/news@example.com")
DATA = Data(
    content="cid:1@example.com",
    originator=Originator(identity=Endpoint.parse("fred@example.com")),
    recipients=(Recipient(identity=PUBSUB),),
)


class CountingEndpoint(WellKnownEndpointServicer):
    def __init__(self) -> None:
        self.calls = 0

    async def Deliver(  # noqa: N802
        self, request: endpoint_pb2.EndpointDeliverRequest, context: grpc.aio.ServicerContext
    ) -> endpoint_pb2.EndpointDeliverResponse:
        self.calls += 1
        return endpoint_pb2.EndpointDeliverResponse(status=common_pb2.ApexStatus(code=250))


@pytest.fixture
async def pods() -> AsyncIterator[list[tuple[CountingEndpoint, int]]]:
    started = []
    for _ in range(2):
        servicer = CountingEndpoint()
        server, port = await create_server(
            [lambda s, v=servicer: endpoint_pb2_grpc.add_WellKnownEndpointServicer_to_server(v, s)]
        )
        started.append((server, servicer, port))
    yield [(servicer, port) for _, servicer, port in started]
    for server, _, _ in started:
        await server.stop(None)


async def deliver_many(addresses: list[str], count: int, *, patience: float = 0.5) -> list[int]:
    channels = [grpc.aio.insecure_channel(address) for address in addresses]
    access = grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}")
    services = WellKnownServices(
        AccessClient(access), {"pubsub": channels}, None, patience=patience
    )
    codes = []
    try:
        for _ in range(count):
            outcome = await services.deliver(PUBSUB, DATA, b"payload", ())
            codes.append(outcome.code)
    finally:
        for channel in (*channels, access):
            await channel.close()
    return codes


async def test_deliveries_spread_over_the_pods(pods: list[tuple[CountingEndpoint, int]]) -> None:
    codes = await deliver_many([f"127.0.0.1:{port}" for _, port in pods], 10)
    assert codes == [250] * 10
    assert [servicer.calls for servicer, _ in pods] == [5, 5]


async def test_an_unreachable_pod_is_skipped(pods: list[tuple[CountingEndpoint, int]]) -> None:
    (servicer, port), _ = pods
    codes = await deliver_many([f"127.0.0.1:{free_port()}", f"127.0.0.1:{port}"], 4)
    assert codes == [250] * 4
    assert servicer.calls == 4


async def test_no_pod_reachable_is_421_after_the_wait_for_one() -> None:
    started = time.monotonic()
    codes = await deliver_many([f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"], 1)
    assert codes == [421]
    assert time.monotonic() - started >= 0.3  # 0.1 + 0.2 s of pauses within 0.5 s


async def test_a_delivery_waits_for_a_pod_that_comes_back() -> None:
    """Every pod refuses (a pubsub pod restarting): the delivery waits for one to come
    back instead of 421 at once, after the relay's ``ok``."""
    port = free_port()
    servicer = CountingEndpoint()
    servers: list[grpc.aio.Server] = []

    async def come_back() -> None:
        await asyncio.sleep(0.5)  # the pod is away this long: the scenario, not a wait
        server = grpc.aio.server()
        endpoint_pb2_grpc.add_WellKnownEndpointServicer_to_server(servicer, server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        servers.append(server)

    back = asyncio.create_task(come_back())
    try:
        codes = await deliver_many([f"127.0.0.1:{port}"], 1, patience=5.0)
    finally:
        await back
        for server in servers:
            await server.stop(None)
    assert codes == [250]
    assert servicer.calls == 1


class CutOffOnce(WellKnownEndpointServicer):
    """Fails its first call as a pod killed mid-call would (outcome unknown)."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    async def Deliver(  # noqa: N802
        self, request: endpoint_pb2.EndpointDeliverRequest, context: grpc.aio.ServicerContext
    ) -> endpoint_pb2.EndpointDeliverResponse:
        self.ids.append(request.delivery_id)
        if len(self.ids) == 1:
            await context.abort(grpc.StatusCode.INTERNAL, "pod went away mid-call")
        return endpoint_pb2.EndpointDeliverResponse(status=common_pb2.ApexStatus(code=250))


@pytest.mark.parametrize(
    ("service", "attempts", "code"), [("pubsub", 2, 250), ("presence", 1, 421)]
)
async def test_a_call_cut_off_is_retried_with_its_delivery_id_where_the_service_allows(
    service: str, attempts: int, code: int
) -> None:
    """A service that honours delivery_id (pubsub) gets the retry of a call whose outcome
    is unknown, with the same id; any other service is not asked twice (421)."""
    servicer = CutOffOnce()
    server, port = await create_server(
        [lambda s: endpoint_pb2_grpc.add_WellKnownEndpointServicer_to_server(servicer, s)]
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    access = grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}")
    services = WellKnownServices(AccessClient(access), {service: [channel]}, None)
    recipient = Endpoint.parse(f"apex={service}/news@example.com")
    try:
        outcome = await services.deliver(recipient, DATA, b"payload", ())
    finally:
        await channel.close()
        await access.close()
        await server.stop(None)
    assert outcome.code == code
    assert len(servicer.ids) == attempts
    assert len(set(servicer.ids)) == 1
    assert servicer.ids[0]


@pytest.mark.unit
def test_service_addresses_setting() -> None:
    assert _service_addresses({"S": "pubsub=a:1|b:2, presence=c:3"}, "S") == {
        "pubsub": ("a:1", "b:2"),
        "presence": ("c:3",),
    }
