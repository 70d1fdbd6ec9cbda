"""Every example exchange of RFC 3340 (sections 4.4.1-4.4.4, 5.1) against running relays
over real TCP: two example.com pods, one rubble.com relay, the access and report
services, a real redis-server (tests/support/mesh.py). Raw BEEP channels send the
examples' exact elements; the endpoint SDK plays the other applications."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from apexmesh.beep.xml import Element
from apexmesh.client import ApexRequestError, AttachmentTerminatedError, connect_endpoint
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from services.relay.app import RelayApp
from tests.support.grpc_channels import ready_channel
from tests.support.mesh import (
    PASSWORDS,
    Mesh,
    apex_channel,
    ask,
    ask_payload,
    beep_session,
    cid_payload,
    endpoint_client,
    receive_msg,
    start_answer,
)
from tests.support.polling import scaled

pytestmark = pytest.mark.integration

OK = ("RPY", "ok", "")

FRED_TO_BARNEY = """<data content='cid:1@example.com'>
    <originator identity='fred@example.com' />
    <recipient identity='barney@example.com' />
</data>"""

STATUS_86 = (
    "<option internal='statusRequest' targetHop='final' mustUnderstand='true' transID='86' />"
)


def with_status(control: str) -> str:
    return control.replace("</data>", f"    {STATUS_86}\n</data>")


def status_of(report: Element) -> list[tuple[str, str, str]]:
    """(identity, code, text) of each destination of a statusResponse data element."""
    assert report.tag == "data"
    assert report.get("content") == "#Content"
    [response] = report.findall("data-content/statusResponse")
    assert response.get("transID") == "86"
    return [
        (
            str(d.get("identity")),
            str(d[0].get("code")),
            " ".join((d[0].text or "").split()),
        )
        for d in response.findall("destination")
    ]


def identities(element: Element, path: str) -> list[str]:
    return [str(e.get("identity")) for e in element.findall(path)]


# ---------------------------------------------------------------------------- 4.4.1


async def test_441_attach_ok_then_a_second_attach(mesh: Mesh) -> None:
    async with beep_session(mesh.a.edge_port) as conn:
        channel = await apex_channel(conn, "<attach endpoint='fred@example.com' transID='1' />")
        assert start_answer(channel) == ("ok", "")
        assert await ask(channel, "<attach endpoint='wilma@example.com' transID='2' />") == OK


async def test_441_attach_error_537_access_denied(mesh: Mesh) -> None:
    # barney authenticated (SASL) and tries to attach as fred: fred's access entries do
    # not grant barney core:attach (RFC 3340 4.5.1, RFC 3341 default entries).
    client = await connect_endpoint(
        "127.0.0.1",
        mesh.a.edge_port,
        sasl=("SCRAM-SHA-256", "barney", PASSWORDS["barney"]),
        timeout=scaled(5.0),
    )
    try:
        with pytest.raises(ApexRequestError) as refused:
            await client.attach("fred@example.com")
        assert refused.value.code == 537
        barney = await client.attach("barney@example.com")  # as himself: allowed
        assert barney.attached
    finally:
        await client.close(timeout=scaled(5.0))


# ---------------------------------------------------------------------------- 4.4.2


async def test_442_bind_ok_then_a_second_bind(mesh: Mesh) -> None:
    async with beep_session(mesh.a.mesh_port) as conn:
        channel = await apex_channel(conn, "<bind relay='example.com' transID='1' />")
        assert start_answer(channel) == ("ok", "")
        assert await ask(channel, "<bind relay='rubble.com' transID='2' />") == OK


async def test_442_bind_error_537_outside_development(mesh: Mesh) -> None:
    # A relay that is not in development mode accepts a bind only from a client
    # authenticated as that domain (section 4.5.2).
    strict = RelayApp(
        dataclasses.replace(
            mesh.a.settings,
            dev=False,
            pod_id="strict",
            edge_port=0,
            mesh_port=0,
            grpc_port=0,
            http_port=0,
        )
    )
    await strict.start()
    try:
        async with beep_session(strict.mesh_port) as conn:
            channel = await apex_channel(conn, "<bind relay='example.com' transID='1' />")
            assert start_answer(channel) == ("error", "537")
            assert await ask(channel, "<bind relay='example.com' transID='1' />") == (
                "ERR",
                "error",
                "537",
            )
        async with beep_session(strict.edge_port) as conn:
            channel = await apex_channel(conn)
            assert await ask(channel, "<attach endpoint='fred@example.com' transID='1' />") == (
                "ERR",
                "error",
                "537",
            )
    finally:
        await strict.stop()


# ---------------------------------------------------------------------------- 4.4.3


async def test_443_terminate_ok_and_550_unknown(mesh: Mesh) -> None:
    async with beep_session(mesh.a.edge_port) as conn:
        channel = await apex_channel(conn, "<attach endpoint='fred@example.com' transID='1' />")
        assert start_answer(channel) == ("ok", "")
        assert await ask(channel, "<terminate transID='1' />") == OK
        assert await ask(channel, "<terminate transID='13' />") == ("ERR", "error", "550")
        # fred is free again, in the whole domain (the other pod may take him).
        async with endpoint_client(mesh.b.edge_port) as client:
            fred = await client.attach("fred@example.com")
            assert fred.attached


async def test_443_relay_initiated_terminate(mesh: Mesh) -> None:
    async with beep_session(mesh.a.edge_port) as conn, ready_channel(mesh.a.grpc_port) as grpc:
        channel = await apex_channel(conn, "<attach endpoint='fred@example.com' transID='1' />")
        assert start_answer(channel) == ("ok", "")
        stub = relay_pb2_grpc.RelayServiceStub(grpc)
        call = asyncio.ensure_future(
            stub.TerminateAttachment(
                relay_pb2.TerminateAttachmentRequest(endpoint="fred@example.com", code=250),
                timeout=scaled(5),
            )
        )
        _, terminate = await receive_msg(channel)  # S: <terminate transID='1' />, C: <ok />
        assert (terminate.tag, terminate.get("transID")) == ("terminate", "1")
        assert (await call).terminated
        # The attachment is gone: data from fred is refused, fred may attach elsewhere.
        assert await ask_payload(channel, cid_payload(FRED_TO_BARNEY)) == ("ERR", "error", "537")
        async with endpoint_client(mesh.b.edge_port) as client:
            assert (await client.attach("fred@example.com")).attached
        answer = await stub.TerminateAttachment(
            relay_pb2.TerminateAttachmentRequest(endpoint="fred@example.com"), timeout=scaled(5)
        )
        assert not answer.terminated  # pod a no longer holds fred

    # The SDK side: the attachment ends with the relay's code.
    async with endpoint_client(mesh.a.edge_port) as client, ready_channel(mesh.a.grpc_port) as grpc:
        wilma = await client.attach("wilma@example.com")
        stub = relay_pb2_grpc.RelayServiceStub(grpc)
        answer = await stub.TerminateAttachment(
            relay_pb2.TerminateAttachmentRequest(
                endpoint="wilma@example.com", code=554, text="policy"
            ),
            timeout=scaled(5),
        )
        assert answer.terminated
        with pytest.raises(AttachmentTerminatedError) as ended:
            async with asyncio.timeout(scaled(5)):
                await wilma.receive()
        assert ended.value.code == 554


# ---------------------------------------------------------------------------- 4.4.4


async def test_444_data_ok_and_delivered_unmodified(mesh: Mesh) -> None:
    async with beep_session(mesh.a.edge_port) as one, beep_session(mesh.a.edge_port) as two:
        fred = await apex_channel(one, "<attach endpoint='fred@example.com' transID='1' />")
        barney = await apex_channel(two, "<attach endpoint='barney@example.com' transID='1' />")
        sent = cid_payload(FRED_TO_BARNEY, body=b"\x89PNG not really")
        assert await ask_payload(fred, sent) == OK
        received, data = await receive_msg(barney)  # appl. #2 answers <ok />
        assert received == sent  # section 4.4.4.1: content never modified
        assert identities(data, "originator") == ["fred@example.com"]
        assert identities(data, "recipient") == ["barney@example.com"]


async def test_444_data_error_537_access_denied(mesh: Mesh) -> None:
    async with beep_session(mesh.a.edge_port) as conn:
        channel = await apex_channel(conn, "<attach endpoint='wilma@example.com' transID='1' />")
        # fred is not attached over this channel: wilma's client may not speak for him.
        assert await ask_payload(channel, cid_payload(FRED_TO_BARNEY)) == ("ERR", "error", "537")


# ---------------------------------------------------------------------------- 5.1


async def test_51_status_request_250_then_550(mesh: Mesh) -> None:
    async with (
        beep_session(mesh.a.edge_port) as conn,
        endpoint_client(mesh.b.edge_port) as client,
    ):
        fred = await apex_channel(conn, "<attach endpoint='fred@example.com' transID='1' />")
        barney = await client.attach("barney@example.com")  # on the other pod
        assert await ask_payload(fred, cid_payload(with_status(FRED_TO_BARNEY))) == OK
        async with asyncio.timeout(scaled(5)):
            got = await barney.receive()
        assert (str(got.originator), got.content) == ("fred@example.com", b"hi")
        assert [o.internal for o in got.options] == ["statusRequest"]  # final keeps it
        _, report = await receive_msg(fred)
        assert identities(report, "originator") == ["apex=report@example.com"]
        assert identities(report, "recipient") == ["fred@example.com"]
        assert status_of(report) == [("barney@example.com", "250", "")]

        await barney.terminate()
        assert await ask_payload(fred, cid_payload(with_status(FRED_TO_BARNEY))) == OK
        _, report = await receive_msg(fred)
        assert identities(report, "originator") == ["apex=report@example.com"]
        assert status_of(report) == [("barney@example.com", "550", "unknown endpoint identity")]


async def test_51_cross_domain_report_from_rubble(mesh: Mesh) -> None:
    to_rubble = with_status(FRED_TO_BARNEY).replace("barney@example.com", "barney@rubble.com")
    async with (
        beep_session(mesh.a.edge_port) as conn,
        endpoint_client(mesh.rubble.edge_port) as client,
    ):
        fred = await apex_channel(conn, "<attach endpoint='fred@example.com' transID='1' />")
        barney = await client.attach("barney@rubble.com")
        sent = cid_payload(to_rubble)
        assert await ask_payload(fred, sent) == OK  # relay #1
        async with asyncio.timeout(scaled(5)):
            got = await barney.receive()  # relay #2 -> appl. #2
        assert (str(got.originator), got.content) == ("fred@example.com", b"hi")
        assert [(o.internal, o.trans_id) for o in got.options] == [("statusRequest", 86)]
        _, report = await receive_msg(fred)  # relay #2 -> relay #1 -> appl. #1
        assert identities(report, "originator") == ["apex=report@rubble.com"]
        assert identities(report, "recipient") == ["fred@example.com"]
        assert status_of(report) == [("barney@rubble.com", "250", "")]
