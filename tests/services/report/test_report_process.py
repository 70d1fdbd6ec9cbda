"""``python -m services.report`` as a real process, and the composition root in-process:
listening line, admin HTTP endpoints, a Report submitted through a real relay test
server, graceful SIGTERM (exit 0), bad settings (exit 2), and not ready without relays."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import httpx
import pytest

from apexmesh.beep.mime import split_entity
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.endpoint.v1 import endpoint_pb2, endpoint_pb2_grpc
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from apexmesh.contracts.report.v1 import report_pb2, report_pb2_grpc
from apexmesh.rpc.server import create_server, graceful_stop
from services.report.app import ReportApp
from services.report.settings import ReportSettings
from tests.support.grpc_channels import ready_channel
from tests.support.polling import scaled
from tests.support.processes import ServiceProcess

pytestmark = pytest.mark.integration


class SubmitOnlyRelay(relay_pb2_grpc.RelayServiceServicer):
    """A relay test server that accepts every Submit and records it."""

    def __init__(self) -> None:
        self.calls: list[relay_pb2.SubmitRequest] = []

    async def Submit(  # noqa: N802
        self, request: relay_pb2.SubmitRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.SubmitResponse:
        self.calls.append(request)
        return relay_pb2.SubmitResponse(status=common_pb2.ApexStatus(code=250))

    async def Deliver(  # noqa: N802
        self, request: relay_pb2.DeliverRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.DeliverResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "test relay: Submit only")
        raise AssertionError("unreachable")

    async def DeliverStream(  # noqa: N802
        self,
        request_iterator: AsyncIterator[relay_pb2.DeliverRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[relay_pb2.DeliverResponse]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "test relay: Submit only")
        yield relay_pb2.DeliverResponse()  # pragma: no cover - abort raised

    async def TerminateAttachment(  # noqa: N802
        self, request: relay_pb2.TerminateAttachmentRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.TerminateAttachmentResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "test relay: Submit only")
        raise AssertionError("unreachable")


@asynccontextmanager
async def running_relay(relay: SubmitOnlyRelay) -> AsyncIterator[str]:
    server, port = await create_server(
        [lambda s: relay_pb2_grpc.add_RelayServiceServicer_to_server(relay, s)]
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await graceful_stop(server, 0.5)


def service_env(relays: str) -> dict[str, str]:
    # Production settings (no APEXMESH_DEV): loopback binds are safe.
    return {
        "APEXMESH_DEV": "0",
        "APEXMESH_REPORT_DOMAINS": "example.com",
        "APEXMESH_RELAY_ADDRESSES": relays,
        "APEXMESH_REPORT_GRPC_PORT": "0",
        "APEXMESH_REPORT_HTTP_PORT": "0",
        "APEXMESH_SHUTDOWN_GRACE": "1",
    }


REPORT = report_pb2.ReportRequest(
    domain="example.com",
    recipient="fred@example.com",
    trans_id=86,
    destinations=[
        report_pb2.Destination(identity="barney@example.com", reply=common_pb2.ApexStatus(code=250))
    ],
)


async def test_process_reports_through_a_relay(tmp_path: Path) -> None:
    relay = SubmitOnlyRelay()
    async with running_relay(relay) as address:
        service = ServiceProcess("services.report", service_env(address), tmp_path / "r.log")
        info = service.start()
        try:
            assert info["service"] == "report"
            async with ready_channel(info["grpc_port"]) as channel:
                response = await report_pb2_grpc.ReportServiceStub(channel).Report(
                    REPORT, timeout=scaled(10)
                )
                assert response.status.code == 250
                refused = await endpoint_pb2_grpc.WellKnownEndpointStub(channel).Deliver(
                    endpoint_pb2.EndpointDeliverRequest(
                        recipient="apex=report@example.com",
                        originator="fred@example.com",
                        payload=b"\r\n",
                    ),
                    timeout=scaled(10),
                )
                assert refused.status.code == 550
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{info['http_port']}") as http:
                assert (await http.get("/healthz")).json() == {"status": "ok", "service": "report"}
                assert (await http.get("/readyz")).json() == {"status": "ready"}
                metrics = (await http.get("/metrics")).text
            assert 'apexmesh_report_responses_total{result="submitted"} 1.0' in metrics
            assert "apexmesh_report_inbound_refused_total 1.0" in metrics
            assert "apexmesh_report_duration_seconds_bucket" in metrics
            assert "apexmesh_report_relay_addresses 1.0" in metrics
        finally:
            assert service.stop() == 0, service.stderr()
    assert len(relay.calls) == 1
    assert relay.calls[0].originator == "apex=report@example.com"
    assert b"<statusResponse transID='86'>" in split_entity(relay.calls[0].payload).body


@pytest.mark.parametrize(
    "changes",
    [
        {"APEXMESH_REPORT_GRPC_HOST": "0.0.0.0"},  # wildcard bind outside development
        {"APEXMESH_REPORT_DOMAINS": ""},
        {"APEXMESH_RELAY_ADDRESSES": "relay-without-port"},
    ],
)
def test_bad_settings_exit_2(tmp_path: Path, changes: dict[str, str]) -> None:
    env = {**service_env("127.0.0.1:7410"), **changes}
    service = ServiceProcess("services.report", env, tmp_path / "bad.log")
    with pytest.raises(RuntimeError, match="exit 2"):
        service.start(timeout=15)  # start() scales it


async def test_not_ready_without_relays() -> None:
    settings = ReportSettings.from_env(
        {
            "APEXMESH_REPORT_DOMAINS": "example.com",
            "APEXMESH_REPORT_GRPC_PORT": "0",
            "APEXMESH_REPORT_HTTP_PORT": "0",
            "APEXMESH_SHUTDOWN_GRACE": "0.5",
        }
    )
    app = ReportApp(settings)
    await app.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{app.http_port}") as http:
            response = await http.get("/readyz")
            assert response.status_code == 503
            assert "APEXMESH_RELAY_ADDRESSES" in response.json()["reason"]
            assert (await http.get("/healthz")).status_code == 200
        async with ready_channel(app.grpc_port) as channel:
            response = await report_pb2_grpc.ReportServiceStub(channel).Report(
                REPORT, timeout=scaled(10)
            )
            assert response.status.code == 421
    finally:
        await app.stop()
