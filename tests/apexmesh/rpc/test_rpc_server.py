"""grpc.aio server factory on port 0, graceful stop, and proto conversions."""

from __future__ import annotations

import grpc
import pytest

from apexmesh.apex.access import Decision, OperationResult, Outbound
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.contracts.access.v1 import access_pb2, access_pb2_grpc
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.rpc.access import (
    AccessClient,
    code_from_proto,
    decision_from_proto,
    decision_to_proto,
    result_from_proto,
    result_to_proto,
)
from apexmesh.rpc.server import create_server, graceful_stop


class FixedServicer(access_pb2_grpc.AccessServiceServicer):
    """Answers every Check with 537 and version 7 (to see the wire, not the logic)."""

    async def Check(  # noqa: N802
        self, request: access_pb2.CheckRequest, context: grpc.aio.ServicerContext
    ) -> access_pb2.CheckResponse:
        return access_pb2.CheckResponse(
            decision=decision_to_proto(Decision(False, ApexReplyCode.NOT_AUTHORIZED, "no")),
            version=7,
        )


@pytest.mark.integration
async def test_server_on_port_zero_serves_and_stops() -> None:
    servicer = FixedServicer()
    server, port = await create_server(
        [lambda s: access_pb2_grpc.add_AccessServiceServicer_to_server(servicer, s)]
    )
    assert port > 0
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            decision, version = await AccessClient(channel).check("a@b.c", "d@e.f", "core:data")
            assert decision == Decision(False, ApexReplyCode.NOT_AUTHORIZED, "no")
            assert version == 7
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await AccessClient(channel).version()
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await graceful_stop(server, 0.5)


@pytest.mark.integration
async def test_two_servers_get_distinct_ports() -> None:
    first, port1 = await create_server([])
    second, port2 = await create_server([])
    try:
        assert port1 != port2
    finally:
        await graceful_stop(first, 0)
        await graceful_stop(second, 0)


@pytest.mark.unit
def test_conversions_round_trip() -> None:
    decision = Decision(True, ApexReplyCode.SUCCESS, "")
    assert decision_from_proto(decision_to_proto(decision)) == Decision(
        True, ApexReplyCode.SUCCESS, "transaction successful"
    )
    result = OperationResult(
        Outbound("fred@example.com", b"<allow transID='1' />"),
        (Outbound("wilma@example.com", b"<set transID='1'/>"),),
        ApexReplyCode.SUCCESS,
    )
    assert result_from_proto(result_to_proto(result)) == result
    assert code_from_proto(common_pb2.ApexStatus(code=299)) == ApexReplyCode.ACTION_ABORTED
