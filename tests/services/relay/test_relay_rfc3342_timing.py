"""RFC 3342 section 2, the dataTiming option, against running relays over real TCP
(tests/support/mesh.py): the final hop report (250, with its own dataTiming carrying the
returnTrip as noLaterThan), the timing error report (550) when the recipient does not
answer in time, the transient report (350) when delivery is slow, and the per-hop
adjustment of the remaining time. The rules themselves run with a controlled clock in
tests/apexmesh/apex/test_timing.py; here the clock is real and the times are short."""

from __future__ import annotations

import itertools

import pytest

from apexmesh.aio.tasks import within
from apexmesh.apex.timing import DATA_TIMING, DataTiming, data_timing_of
from apexmesh.beep.mime import beep_xml
from apexmesh.client import ReceivedData
from services.relay.timekeeper import wall_ms
from tests.support.mesh import Mesh, apex_channel, ask, beep_session, endpoint_client, receive
from tests.support.polling import scaled, still_true

pytestmark = pytest.mark.integration


def timing_of(received: ReceivedData) -> DataTiming:
    found = [o for o in received.data.options if o.internal == DATA_TIMING]
    assert len(found) == 1
    return data_timing_of(found[0])


@pytest.mark.parametrize("pods", ["same pod", "other pod"])
async def test_final_hop_report(mesh: Mesh, pods: str) -> None:
    """Section 2.1.1: fred sends with noLaterThan 10000 and returnTrip 20000; barney
    answers ok; fred receives a statusResponse echoing transID, 250 for barney."""
    other = mesh.a if pods == "same pod" else mesh.b
    async with endpoint_client(mesh.a.edge_port) as one, endpoint_client(other.edge_port) as two:
        fred = await one.attach("fred@example.com")
        barney = await two.attach("barney@example.com")
        result = await fred.send(
            "barney@example.com",
            b"on time",
            timing=DataTiming(no_later_than=10_000, return_trip=20_000),
        )
        got = await receive(barney)
        assert got.content == b"on time"
        handed = timing_of(got)
        assert 0 < handed.no_later_than <= 10_000  # lowered by the time spent in the relay
        assert handed.return_trip == 20_000
        (report,) = await result.reports(1, timeout=scaled(5))
        assert report.trans_id == result.timing_trans_id
        (destination,) = report.destinations
        assert str(destination.identity) == "barney@example.com"
        assert destination.reply.code == 250


async def test_final_hop_report_data_carries_its_own_data_timing(mesh: Mesh) -> None:
    """The report data has a new dataTiming option whose noLaterThan is the returnTrip
    and no other attribute (section 2.1.1)."""
    async with endpoint_client(mesh.a.edge_port) as one, endpoint_client(mesh.b.edge_port) as two:
        fred = await one.attach("fred@example.com")
        barney = await two.attach("barney@example.com")
        result = await fred.send(
            "barney@example.com", b"x", timing=DataTiming(no_later_than=10_000, return_trip=20_000)
        )
        result.close()  # later reports reach the receive queue as data
        await receive(barney)
        report = await receive(fred)
        assert str(report.originator) == "apex=report@example.com"
        assert report.status_response is not None
        assert report.status_response.destinations[0].reply.code == 250
        own = timing_of(report)
        assert own.return_trip == 0
        assert own.report_after == 0
        assert not own.report_errors
        assert 0 < own.no_later_than <= 20_000


async def test_timing_error_report_when_the_recipient_is_too_slow(mesh: Mesh) -> None:
    """Section 2.1.2: no ok within noLaterThan -> the originator gets 550 (reportErrors).

    The recipient is an endpoint attached over a raw BEEP session that never answers."""
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        beep_session(mesh.b.edge_port) as conn,
    ):
        channel = await apex_channel(conn)
        assert await ask(channel, "<attach endpoint='barney@example.com' transID='1' />") == (
            "RPY",
            "ok",
            "",
        )
        fred = await one.attach("fred@example.com")
        result = await fred.send(
            "barney@example.com", b"late", timing=DataTiming(no_later_than=300, report_errors=True)
        )
        (report,) = await result.reports(1, timeout=scaled(5))
        assert report.trans_id == result.timing_trans_id
        assert report.destinations[0].reply.code == 550
        assert str(report.destinations[0].identity) == "barney@example.com"


async def test_transient_report_then_delivery(mesh: Mesh) -> None:
    """Section 2.2.1: no ok within reportAfter -> one 350; delivery is not affected."""
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        beep_session(mesh.b.edge_port) as conn,
    ):
        channel = await apex_channel(conn)
        await ask(channel, "<attach endpoint='barney@example.com' transID='1' />")
        fred = await one.attach("fred@example.com")
        result = await fred.send("barney@example.com", b"slow", timing=DataTiming(report_after=200))
        incoming = await within(channel.receive(), scaled(5))
        (report,) = await result.reports(1, timeout=scaled(5))
        assert report.destinations[0].reply.code == 350
        incoming.reply(beep_xml(b"<ok />"))
        # Once only, and no 550 (no noLaterThan): nothing more comes for 0.3 s.
        await still_true(lambda: len(result.collected) == 1, 0.3)


async def test_expired_before_forwarding_to_another_domain(mesh: Mesh) -> None:
    """Step 5.2 with a relay that knows the next hop takes longer than what is left:
    the predictive error (550) without connecting (section 2.1, last paragraph)."""
    mesh.a.router.timekeeper.min_transit_ms = 60_000
    async with endpoint_client(mesh.a.edge_port) as one:
        fred = await one.attach("fred@example.com")
        result = await fred.send(
            "betty@rubble.com", b"far", timing=DataTiming(no_later_than=5_000, report_errors=True)
        )
        (report,) = await result.reports(1, timeout=scaled(5))
        assert report.destinations[0].reply.code == 550


async def test_forwarded_data_carries_the_remaining_time(mesh: Mesh) -> None:
    """Step 5.2: noLaterThan and reportAfter are lowered by the time spent in each relay
    (example.com's clock made to jump 250 ms after the data is received, so that time is
    visible; rubble.com's clock stopped, so the real time its relay takes on a loaded
    machine is no part of the figure; the held-data sweepers, which read the clocks too,
    are stopped first)."""
    for relay in (mesh.a, mesh.rubble):
        assert relay.router.holder is not None
        await relay.router.holder.close()
    start = wall_ms()
    readings = itertools.chain([start], itertools.repeat(start + 250))
    mesh.a.router.timekeeper.now = lambda: next(readings)
    mesh.rubble.router.timekeeper.now = lambda: start
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        endpoint_client(mesh.rubble.edge_port) as two,
    ):
        fred = await one.attach("fred@example.com")
        betty = await two.attach("betty@rubble.com")
        await fred.send(
            "betty@rubble.com", b"far", timing=DataTiming(no_later_than=10_000, report_after=9_000)
        )
        got = await receive(betty)
        handed = timing_of(got)
        # 250 ms in example.com's relay, none on rubble.com's stopped clock.
        assert handed.no_later_than == 10_000 - 250
        assert handed.report_after == handed.no_later_than - 1_000
