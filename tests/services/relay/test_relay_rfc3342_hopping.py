"""RFC 3342 section 4, the dataHopping option, against running relays over real TCP.

Besides the mesh of tests/support/mesh.py, two more relay pods are started with a
forwarding loop configured on purpose through APEXMESH_RELAY_ROUTES: for slate.com (a
domain nobody serves) the example.com pod "loop-example" routes to the rubble.com pod
"loop-rubble", which routes it back to "loop-example" (both pods trust either domain's relays to
relay the other's data). fred@example.com attaches to loop-example and sends to
barney@slate.com: each relay reduces noMoreThan before sending to the next one and the
relay where it runs out reports 550 to fred (reportErrors), through its domain's report
service.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from apexmesh.apex.party import data_hopping_option
from apexmesh.client import Attachment
from services.relay.app import RelayApp
from services.relay.settings import RelaySettings
from tests.support.mesh import Mesh, endpoint_client, receive, relay_env
from tests.support.redis_server import free_port

pytestmark = pytest.mark.integration

LOOPED = "barney@slate.com"


@pytest.fixture
async def loop(mesh: Mesh) -> AsyncIterator[RelayApp]:
    """Start the two looping pods; yield loop-example (where fred attaches)."""
    ports = {"example.com": free_port(), "rubble.com": free_port()}
    started: list[RelayApp] = []
    try:
        for pod_id, domain, other in (
            ("loop-example", "example.com", "rubble.com"),
            ("loop-rubble", "rubble.com", "example.com"),
        ):
            env = relay_env(
                mesh.env,
                domain=domain,
                pod_id=pod_id,
                mesh_port=ports[domain],
                access_port=mesh.access.grpc_port,
                report_port=mesh.report_ports[domain],
                routes={"slate.com": ports[other]},
                lease_ms=10_000,
            )
            # Data relayed back may come from either domain's relay (step 1 of 4.4.4.1).
            env["APEXMESH_RELAY_TRUSTED"] = "example.com,rubble.com"
            relay = RelayApp(RelaySettings.from_env(env))
            started.append(relay)
            await relay.start()
        yield started[0]
    finally:
        await asyncio.gather(*(relay.stop() for relay in started))


async def report_of(fred: Attachment) -> tuple[str, int, list[tuple[str, int]]]:
    got = await receive(fred, within=10.0)
    assert got.status_response is not None, got
    return (
        str(got.originator),
        got.status_response.trans_id,
        [(str(d.identity), int(d.reply.code)) for d in got.status_response.destinations],
    )


async def test_rfc_example_relay_2_reports_550(loop: RelayApp) -> None:
    # noMoreThan='2': relay #1 (loop-example) sends noMoreThan='1' to relay #2
    # (loop-rubble), which determines that further relaying is necessary and reports.
    async with endpoint_client(loop.edge_port) as client:
        fred = await client.attach("fred@example.com")
        await fred.send(LOOPED, b"hi", options=[data_hopping_option(86, 2)])
        assert await report_of(fred) == ("apex=report@rubble.com", 86, [(LOOPED, 550)])


async def test_a_configured_loop_is_stopped_and_reported(loop: RelayApp) -> None:
    # noMoreThan='5': loop-example 4, loop-rubble 3, loop-example 2, loop-rubble 1,
    # loop-example 0: stopped there, reported by example.com's report service.
    async with endpoint_client(loop.edge_port) as client:
        fred = await client.attach("fred@example.com")
        await fred.send(LOOPED, b"round and round", options=[data_hopping_option(87, 5)])
        assert await report_of(fred) == ("apex=report@example.com", 87, [(LOOPED, 550)])


async def test_a_single_hop_budget_stops_at_the_first_relay(loop: RelayApp) -> None:
    async with endpoint_client(loop.edge_port) as client:
        fred = await client.attach("fred@example.com")
        await fred.send(LOOPED, b"no hops", options=[data_hopping_option(88, 1)])
        assert await report_of(fred) == ("apex=report@example.com", 88, [(LOOPED, 550)])


async def test_a_final_hop_is_not_counted(mesh: Mesh) -> None:
    # Delivered by the first relay itself: no relay hop, nothing to reduce or report.
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        endpoint_client(mesh.rubble.edge_port) as two,
    ):
        fred = await one.attach("fred@example.com")
        barney = await one.attach("barney@example.com")
        betty = await two.attach("betty@rubble.com")
        await fred.send("barney@example.com", b"local", options=[data_hopping_option(89, 1)])
        assert (await receive(barney, within=10.0)).content == b"local"
        # One relay hop with a budget of two: delivered by rubble.com.
        await fred.send("betty@rubble.com", b"remote", options=[data_hopping_option(90, 2)])
        assert (await receive(betty, within=10.0)).content == b"remote"
