"""Typed client of the access service's gRPC contract (``apexmesh.contracts.access.v1``).

The relay and the pubsub service use :class:`AccessClient` either directly or as the
:class:`apexmesh.store.access_cache.DecisionSource` of a
:class:`~apexmesh.store.access_cache.CachedAccessChecker`, which is how the relay avoids
a round trip per message (RFC 3340 section 4.4.4.1 step 5.3). Conversions between the
protobuf messages and the sans-I/O types live here so that no service repeats them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import grpc

from apexmesh.apex.access import Decision, OperationResult, Outbound
from apexmesh.apex.codes import ApexReplyCode, for_code
from apexmesh.contracts.access.v1 import access_pb2, access_pb2_grpc
from apexmesh.contracts.common.v1 import common_pb2

#: Seconds a decision may take before the caller treats the service as unavailable.
DEFAULT_TIMEOUT: Final = 2.0


def status_to_proto(code: ApexReplyCode, text: str) -> common_pb2.ApexStatus:
    return common_pb2.ApexStatus(code=int(code), text=text or code.text)


def code_from_proto(status: common_pb2.ApexStatus) -> ApexReplyCode:
    """The registered code of ``status``; an unknown code reads as 451 (aborted)."""
    return for_code(status.code) or ApexReplyCode.ACTION_ABORTED


def decision_to_proto(decision: Decision) -> access_pb2.Decision:
    return access_pb2.Decision(
        allowed=decision.allowed, status=status_to_proto(decision.code, decision.text)
    )


def decision_from_proto(message: access_pb2.Decision) -> Decision:
    return Decision(message.allowed, code_from_proto(message.status), message.status.text)


def result_to_proto(result: OperationResult) -> access_pb2.OperationResponse:
    return access_pb2.OperationResponse(
        reply=access_pb2.Outbound(recipient=result.reply.recipient, content=result.reply.content),
        notifications=[
            access_pb2.Outbound(recipient=item.recipient, content=item.content)
            for item in result.notifications
        ],
        status=status_to_proto(result.code, ""),
    )


def result_from_proto(message: access_pb2.OperationResponse) -> OperationResult:
    return OperationResult(
        Outbound(message.reply.recipient, message.reply.content),
        tuple(Outbound(item.recipient, item.content) for item in message.notifications),
        code_from_proto(message.status),
    )


class AccessClient:
    """Calls the access service over a grpc.aio channel the caller owns."""

    def __init__(self, channel: grpc.aio.Channel, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._stub = access_pb2_grpc.AccessServiceStub(channel)
        self._timeout = timeout

    async def check(self, owner: str, actor: str, token: str) -> tuple[Decision, int]:
        """One decision and the access version it was computed at."""
        response = await self._stub.Check(
            access_pb2.CheckRequest(owner=owner, actor=actor, token=token),
            timeout=self._timeout,
            wait_for_ready=True,  # a reconnecting channel is waited for, within timeout
        )
        return decision_from_proto(response.decision), int(response.version)

    async def check_many(
        self, checks: Sequence[tuple[str, str, str]]
    ) -> tuple[list[Decision], int]:
        """Decisions for ``(owner, actor, token)`` checks, in order, and the version."""
        response = await self._stub.CheckMany(
            access_pb2.CheckManyRequest(
                checks=[
                    access_pb2.CheckRequest(owner=owner, actor=actor, token=token)
                    for owner, actor, token in checks
                ]
            ),
            timeout=self._timeout,
            wait_for_ready=True,
        )
        return [decision_from_proto(item) for item in response.decisions], int(response.version)

    async def handle_operation(self, originator: str, content: bytes) -> OperationResult:
        """Deliver one operation addressed to ``apex=access`` and return the answers."""
        response = await self._stub.HandleOperation(
            access_pb2.OperationRequest(originator=originator, content=content),
            timeout=self._timeout,
        )
        return result_from_proto(response)

    async def version(self) -> int:
        response = await self._stub.GetVersion(
            access_pb2.GetVersionRequest(), timeout=self._timeout
        )
        return int(response.version)


__all__ = [
    "AccessClient",
    "code_from_proto",
    "decision_from_proto",
    "decision_to_proto",
    "result_from_proto",
    "result_to_proto",
    "status_to_proto",
]
