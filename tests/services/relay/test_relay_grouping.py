"""Recipients grouped in one data element (RFC 3340 section 4.4.4.1, last paragraph).

Endpoints attached over the same APEX channel receive one data naming all of them; those
on another pod travel there as one group and are split by channel there. Each recipient
keeps its own outcome: statusRequest reports name every one of them.
"""

from __future__ import annotations

import pytest

from apexmesh.apex.report import StatusResponse
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from tests.support.grpc_channels import ready_channel
from tests.support.mesh import Mesh, endpoint_client, receive
from tests.support.polling import scaled

pytestmark = pytest.mark.integration


def codes(reports: tuple[StatusResponse, ...]) -> dict[str, int]:
    return {
        str(destination.identity): int(destination.reply.code)
        for report in reports
        for destination in report.destinations
    }


async def test_recipients_on_one_channel_share_one_data(mesh: Mesh) -> None:
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        endpoint_client(mesh.b.edge_port) as two,
    ):
        fred = await one.attach("fred@example.com")
        wilma = await one.attach("wilma@example.com")
        barney = await two.attach("barney@example.com")
        pebbles = await two.attach("pebbles@example.com")
        result = await fred.send(
            [
                "fred@example.com",
                "wilma@example.com",
                "barney@example.com",
                "pebbles@example.com",
            ],
            b"to all four",
            status_request=True,
        )
        for attachment, together in (
            (fred, ("fred@example.com", "wilma@example.com")),
            (wilma, ("fred@example.com", "wilma@example.com")),
            (barney, ("barney@example.com", "pebbles@example.com")),
            (pebbles, ("barney@example.com", "pebbles@example.com")),
        ):
            got = await receive(attachment)
            assert got.content == b"to all four"
            # One data per channel, naming the recipients attached over it (same pod
            # for fred and wilma, the other pod for barney and pebbles).
            assert tuple(str(r) for r in got.recipients) == together
        reports = await result.reports(timeout=scaled(5))
        assert codes(reports) == {
            "fred@example.com": 250,
            "wilma@example.com": 250,
            "barney@example.com": 250,
            "pebbles@example.com": 250,
        }
        # Nothing else arrives: each endpoint got the data exactly once.
        for attachment in (fred, wilma, barney, pebbles):
            assert attachment.receive_nowait() is None


async def test_a_grouped_recipient_gone_from_its_pod_gets_550(mesh: Mesh) -> None:
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        endpoint_client(mesh.b.edge_port) as two,
    ):
        fred = await one.attach("fred@example.com")
        barney = await two.attach("barney@example.com")
        pebbles = await two.attach("pebbles@example.com")
        # Pod a learns where both are attached (it caches the locations).
        await fred.send(["barney@example.com", "pebbles@example.com"], b"first")
        assert (await receive(barney)).content == b"first"
        assert (await receive(pebbles)).content == b"first"
        await pebbles.terminate()
        result = await fred.send(
            ["barney@example.com", "pebbles@example.com"], b"second", status_request=True
        )
        got = await receive(barney)
        assert (got.content, tuple(str(r) for r in got.recipients)) == (
            b"second",
            ("barney@example.com",),
        )
        reports = await result.reports(timeout=scaled(5))
        assert codes(reports) == {"barney@example.com": 250, "pebbles@example.com": 550}


HEAD = (
    b"Content-Type: application/beep+xml\r\n\r\n"
    b"<data content='#c'><originator identity='fred@example.com' />"
)
TAIL = b"<data-content Name='c'>hi</data-content></data>"


def element(identity: str) -> bytes:
    return f"<recipient identity='{identity}' />".encode()


async def test_a_pod_splits_a_group_by_channel_and_answers_per_recipient(mesh: Mesh) -> None:
    async with (
        endpoint_client(mesh.b.edge_port) as two,
        endpoint_client(mesh.b.edge_port) as three,
        ready_channel(mesh.b.grpc_port) as grpc,
    ):
        barney = await two.attach("barney@example.com")
        pebbles = await three.attach("pebbles@example.com")
        stub = relay_pb2_grpc.RelayServiceStub(grpc)
        names = ["barney@example.com", "nobody@example.com", "pebbles@example.com"]
        answer = await stub.Deliver(
            relay_pb2.DeliverRequest(
                originator="fred@example.com",
                group=names,
                group_elements=[element(name) for name in names],
                head=HEAD,
                tail=TAIL,
                id=7,
            ),
            timeout=scaled(5),
        )
        assert answer.id == 7
        assert [s.code for s in answer.statuses] == [250, 550, 250]
        assert "not attached to this relay pod" in answer.statuses[1].text
        # Two channels: each got a data naming only its own endpoint.
        for attachment, name in ((barney, names[0]), (pebbles, names[2])):
            got = await receive(attachment)
            assert (got.content, tuple(str(r) for r in got.recipients)) == (b"hi", (name,))

        mismatched = await stub.Deliver(
            relay_pb2.DeliverRequest(
                group=names, group_elements=[element(names[0])], head=HEAD, tail=TAIL
            ),
            timeout=scaled(5),
        )
        assert [s.code for s in mismatched.statuses] == [501, 501, 501]
        assert barney.receive_nowait() is None
