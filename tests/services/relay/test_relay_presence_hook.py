"""The relay's presence hook (services/relay/presence_hook.py) against a real gRPC
presence server: a burst of attachments reaches the service a bounded number at a time
and every one arrives, a call that timed out is tried again, and each endpoint's events
arrive in the order they happened."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest

from apexmesh.apex.endpoint import Endpoint
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.presence.v1 import presence_pb2, presence_pb2_grpc
from apexmesh.rpc.retry import RetryPolicy
from apexmesh.rpc.server import create_server
from services.relay.presence_hook import PresenceHook
from tests.support.polling import scaled, wait_until

pytestmark = pytest.mark.integration

#: Retries 10 ms apart, so a timed-out first call is tried again at once.
QUICK = RetryPolicy(attempts=3, first_backoff_seconds=0.01, max_backoff_seconds=0.01)


class ScriptedPresence(presence_pb2_grpc.PresenceServiceServicer):
    """Records each endpoint's events; the first ``slow`` calls outlast their deadline."""

    def __init__(self, *, slow: int = 0, latency: float = 0.0) -> None:
        self.slow = slow
        self.latency = latency
        self.events: dict[str, list[bool]] = {}
        self.calls = 0
        self.in_flight = 0
        self.peak = 0

    async def _event(self, request: presence_pb2.EndpointEvent, attached: bool) -> object:
        self.calls += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.slow > 0:
                self.slow -= 1
                await asyncio.sleep(1.0)  # past the hook's deadline: counted as lost
                return presence_pb2.PresenceResponse(status=common_pb2.ApexStatus(code=250))
            await asyncio.sleep(self.latency)
            self.events.setdefault(request.endpoint, []).append(attached)
            return presence_pb2.PresenceResponse(status=common_pb2.ApexStatus(code=250))
        finally:
            self.in_flight -= 1

    async def EndpointAttached(  # noqa: N802
        self, request: presence_pb2.EndpointEvent, _context: grpc.aio.ServicerContext
    ) -> presence_pb2.PresenceResponse:
        return await self._event(request, True)  # type: ignore[return-value]

    async def EndpointDetached(  # noqa: N802
        self, request: presence_pb2.EndpointEvent, _context: grpc.aio.ServicerContext
    ) -> presence_pb2.PresenceResponse:
        return await self._event(request, False)  # type: ignore[return-value]


@asynccontextmanager
async def hook_to(presence: ScriptedPresence, **options: object) -> AsyncIterator[PresenceHook]:
    server, port = await create_server(
        [lambda s: presence_pb2_grpc.add_PresenceServiceServicer_to_server(presence, s)]
    )
    hook = PresenceHook(f"127.0.0.1:{port}", "relay-test-0", **options)  # type: ignore[arg-type]
    try:
        yield hook
    finally:
        await hook.aclose()
        await server.stop(None)


async def settled(presence: ScriptedPresence, expected: int, within: float = 20.0) -> None:
    """Wait until the servicer has recorded ``expected`` events."""
    await wait_until(
        lambda: sum(len(events) for events in presence.events.values()) >= expected,
        within=within,
        every=0.01,
        what=f"{expected} presence events recorded",
    )


async def test_a_burst_of_attachments_arrives_whole_and_a_bounded_number_at_a_time() -> None:
    presence = ScriptedPresence(latency=0.01)
    async with hook_to(presence, max_in_flight=16) as hook:
        for index in range(2_000):
            hook.attached(Endpoint.parse(f"e{index}@example.com"))
        await settled(presence, 2_000)
    assert len(presence.events) == 2_000
    assert all(events == [True] for events in presence.events.values())
    assert presence.peak <= 16


async def test_a_call_that_timed_out_is_tried_again() -> None:
    presence = ScriptedPresence(slow=1)
    async with hook_to(presence, timeout=0.3, policy=QUICK) as hook:  # setting under test
        hook.attached(Endpoint.parse("fred@example.com"))
        await settled(presence, 1)
    assert presence.events == {"fred@example.com": [True]}
    assert presence.calls == 2


async def test_an_endpoints_events_arrive_in_the_order_they_happened() -> None:
    presence = ScriptedPresence(slow=1)
    async with hook_to(presence, timeout=0.3, policy=QUICK) as hook:  # setting under test
        fred = Endpoint.parse("fred@example.com")
        hook.attached(fred)  # its first try times out: the detach still waits for it
        hook.detached(fred)
        hook.attached(fred)
        await settled(presence, 3)
    assert presence.events == {"fred@example.com": [True, False, True]}


async def test_a_stopping_pod_does_not_wait_out_a_backlog_of_calls() -> None:
    """Thousands of detaches queued behind a slow service when the pod stops: the stop
    gives them a bounded time, then drops them (the service repairs lapsed leases)."""
    presence = ScriptedPresence(latency=1.0)
    async with asyncio.timeout(scaled(10)):
        async with hook_to(presence, max_in_flight=1) as hook:
            for index in range(1_000):
                hook.detached(Endpoint.parse(f"e{index}@example.com"))
            await asyncio.sleep(0.1)  # the backlog runs a while before the stop: the scenario
    assert presence.calls < 1_000
