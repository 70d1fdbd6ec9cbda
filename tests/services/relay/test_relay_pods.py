"""Several relay pods of one domain (RFC 3340 section 6: every relay of a domain handles
every endpoint of it): attachments are domain-wide, pods hand data to each other, a pod
that dies (SIGKILL, a real subprocess) loses its attachments within the lease and its
endpoints re-attach to a surviving pod while the survivors' endpoints are undisturbed."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apexmesh.aio.tasks import within
from apexmesh.beep.limits import MAX_MESSAGE_OCTETS
from apexmesh.client import (
    ApexClient,
    ApexRequestError,
    Attachment,
    AttachmentTerminatedError,
    SessionClosedError,
    connect_endpoint,
)
from apexmesh.client.outgoing import as_recipients, encode_data
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from apexmesh.store.keys import Keys
from services.relay.locations import LOCATION_TTL_SECONDS
from tests.support.grpc_channels import ready_channel
from tests.support.mesh import (
    Mesh,
    apex_channel,
    beep_session,
    endpoint_client,
    receive,
    running_mesh,
    start_answer,
)
from tests.support.polling import eventually, scaled
from tests.support.processes import ServiceProcess
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

LEASE_MS = 600


@pytest.fixture
async def short_lease(redis_server: RedisServer, keys: Keys, tmp_path: Path) -> AsyncIterator[Mesh]:
    async with running_mesh(redis_server, keys, tmp_path, lease_ms=LEASE_MS) as running:
        yield running


async def attach_when_free(client: ApexClient, endpoint: str, within: float) -> Attachment:
    """Attach as soon as the domain lets go of ``endpoint`` (554 until then)."""
    async with asyncio.timeout(scaled(within)):
        while True:
            try:
                return await client.attach(endpoint)
            except ApexRequestError as exc:
                if exc.code != 554:
                    raise
            await asyncio.sleep(0.05)  # poll interval, not a readiness guess


async def test_pods_deliver_to_each_other_in_order(mesh: Mesh) -> None:
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        endpoint_client(mesh.b.edge_port) as two,
        endpoint_client(mesh.rubble.edge_port) as three,
    ):
        fred = await one.attach("fred@example.com")
        barney = await two.attach("barney@example.com")
        betty = await three.attach("betty@rubble.com")
        for n in range(20):
            await fred.send("barney@example.com", str(n).encode())
        assert [(await receive(barney)).content for _ in range(20)] == [
            str(n).encode() for n in range(20)
        ]
        # rubble -> pod a (its mesh route) -> pod b (where barney is), and back
        await betty.send("barney@example.com", b"from rubble")
        got = await receive(barney)
        assert (str(got.originator), got.content) == ("betty@rubble.com", b"from rubble")
        result = await barney.send("betty@rubble.com", b"from pod b", status_request=True)
        assert (await receive(betty)).content == b"from pod b"
        [report] = await result.reports(1, timeout=scaled(5))
        assert str(report.destinations[0].identity) == "betty@rubble.com"
        assert int(report.destinations[0].reply.code) == 250


async def test_closing_the_apex_channel_releases_its_attachments(short_lease: Mesh) -> None:
    # RFC 3340 4.4.1: an attachment lives on its BEEP channel. A peer that closes the
    # channel but keeps the session no longer holds the endpoint.
    mesh = short_lease
    async with beep_session(mesh.a.edge_port) as conn, endpoint_client(mesh.b.edge_port) as other:
        channel = await apex_channel(conn, "<attach endpoint='fred@example.com' transID='1' />")
        assert start_answer(channel) == ("ok", "")
        barney = await other.attach("barney@example.com")
        await within(channel.close(), scaled(5))
        # data for fred meanwhile is not delivered (and breaks nothing)
        result = await barney.send("fred@example.com", b"anyone?", status_request=True)
        [report] = await result.reports(1, timeout=scaled(5))
        assert int(report.destinations[0].reply.code) == 550
        fred = await attach_when_free(other, "fred@example.com", within=5 * LEASE_MS / 1000)
        await barney.send("fred@example.com", b"there you are")
        assert (await receive(fred)).content == b"there you are"


async def test_relay_initiated_terminate_carries_its_code(mesh: Mesh) -> None:
    # The contract's example: 556 for attachOverride (a code outside section 10 is still
    # a three-digit %XYZ; code of the terminate element).
    async with endpoint_client(mesh.a.edge_port) as client, ready_channel(mesh.a.grpc_port) as grpc:
        wilma = await client.attach("wilma@example.com")
        stub = relay_pb2_grpc.RelayServiceStub(grpc)
        request = relay_pb2.TerminateAttachmentRequest(
            endpoint="wilma@example.com", code=556, text="attached elsewhere"
        )
        assert (await stub.TerminateAttachment(request, timeout=scaled(5))).terminated
        with pytest.raises(AttachmentTerminatedError) as ended:
            await receive(wilma)
        assert ended.value.code == 556


async def test_killed_pod_releases_its_attachments(short_lease: Mesh, tmp_path: Path) -> None:
    mesh = short_lease
    process = ServiceProcess(
        "services.relay",
        mesh.relay_env("example-killed", lease_ms=LEASE_MS),
        tmp_path / "relay-killed.log",
    )
    info = await asyncio.to_thread(process.start)
    doomed: ApexClient | None = None
    try:
        doomed = await connect_endpoint("127.0.0.1", info["edge_port"], timeout=scaled(5.0))
        fred = await doomed.attach("fred@example.com")
        wilma = await doomed.attach("wilma@example.com")
        assert wilma.attached
        async with (
            endpoint_client(mesh.a.edge_port) as survivor,
            endpoint_client(mesh.b.edge_port) as rescue,
        ):
            barney = await survivor.attach("barney@example.com")
            # before: the processes' pods deliver to each other
            await barney.send("fred@example.com", b"before")
            assert (await receive(fred)).content == b"before"
            await fred.send("barney@example.com", b"hello from the doomed pod")
            assert (await receive(barney)).content == b"hello from the doomed pod"
            with pytest.raises(ApexRequestError) as taken:
                await rescue.attach("fred@example.com")
            assert taken.value.code == 554

            process.process.send_signal(signal.SIGKILL)
            await asyncio.to_thread(process.process.wait, scaled(10))
            # the doomed client sees its session end
            await eventually(lambda: doomed is not None and fred.ended is not None, within=5)

            # within the lease (plus one renewal period), fred and wilma are free again
            within = 3 * LEASE_MS / 1000
            fred2 = await attach_when_free(rescue, "fred@example.com", within)
            wilma2 = await attach_when_free(rescue, "wilma@example.com", within)

            # the survivors were undisturbed: barney still receives, from both pods
            await fred2.send("barney@example.com", b"after, from pod b")
            assert (await receive(barney)).content == b"after, from pod b"
            result = await barney.send(
                ["fred@example.com", "wilma@example.com"], b"after", status_request=True
            )
            assert (await receive(fred2)).content == b"after"
            assert (await receive(wilma2)).content == b"after"
            reports = await result.reports(1, timeout=scaled(5))
            codes = {str(d.identity): int(d.reply.code) for r in reports for d in r.destinations}
            assert codes == {"fred@example.com": 250, "wilma@example.com": 250}
    finally:
        if doomed is not None:
            with contextlib.suppress(SessionClosedError):
                await doomed.close(timeout=scaled(2.0))
        process.stop()


async def test_large_data_to_another_pod_arrive_whole(mesh: Mesh) -> None:
    """Data up to the relay's message limit cross to another pod, several at once: the
    pod-to-pod stream cuts its batches by size and admits one delivery of the limit."""
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        endpoint_client(mesh.b.edge_port) as two,
    ):
        fred = await one.attach("fred@example.com")
        barney = await two.attach("barney@example.com")
        overhead = len(
            encode_data(
                originator=fred.endpoint,
                recipients=as_recipients("barney@example.com"),
                content=b"",
            )
        )
        bodies = [bytes([n]) * (3 * 1024 * 1024) for n in range(3)]
        bodies.append(b"y" * (MAX_MESSAGE_OCTETS - overhead))  # a BEEP message of the limit
        await asyncio.gather(*(fred.send("barney@example.com", body) for body in bodies))
        got = [(await receive(barney, within=20)).content for _ in bodies]
        assert got == bodies


async def test_a_location_past_its_ttl_is_used_while_it_is_asked_again(mesh: Mesh) -> None:
    """Data for an endpoint on another pod follow the cached location; once that is older
    than LOCATION_TTL_SECONDS it is still used for one more TTL while Redis is asked again
    in the background (no data waits for the lookup), and after that it is not."""
    now = [1000.0]
    router = mesh.a.router
    locations = router.locations
    locations.clock = lambda: now[0]
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        endpoint_client(mesh.b.edge_port) as two,
    ):
        fred = await one.attach("fred@example.com")
        barney = await two.attach("barney@example.com")
        await fred.send("barney@example.com", b"first")  # located through Redis
        assert (await receive(barney)).content == b"first"
        endpoint = barney.endpoint
        expires = locations.expiry(endpoint)
        assert expires is not None
        tasks = [d.task for d in router._dispatchers.values()]
        now[0] = expires + LOCATION_TTL_SECONDS / 2
        await fred.send("barney@example.com", b"second")  # the old entry, refreshed
        assert (await receive(barney)).content == b"second"
        assert [d.task for d in router._dispatchers.values()] == tasks  # routed at once
        await eventually(lambda: (locations.expiry(endpoint) or 0) > expires)
        assert not locations.refreshing
        now[0] += 3 * LOCATION_TTL_SECONDS  # far past: asked again before delivery
        await fred.send("barney@example.com", b"third")
        assert (await receive(barney)).content == b"third"
