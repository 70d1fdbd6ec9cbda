"""Optional: tell the presence service (RFC 3343) when an endpoint attaches or detaches.

RFC 3343 section 3 makes each domain "responsible for maintaining a presence entry for
each of its endpoints"; the mesh keeps one tuple per attached endpoint
(``apex:ENDPOINT``, docs/presence.md). Enabled by ``APEXMESH_PRESENCE_ADDRESS``. Calls
are fire-and-forget background tasks, in order per endpoint, so an attach or terminate
never waits on presence. A burst (thousands of sessions attaching at once) is sent at
most :data:`MAX_IN_FLIGHT` calls at a time, the rest waiting their turn, and a call that
timed out, was cut off or found the service unavailable is tried again, as
:data:`~apexmesh.rpc.retry.PRESENCE_REPORT` says (attach and detach set a state, so a
repeat is harmless): 10,000 unbounded calls with a 2 s deadline lost the
presence of about 900 endpoints in bench/pubsub_fanout.py's 10,000-topic setup. What
still fails is logged (the presence service also sees lapsed leases by itself, so a
lost detach is repaired within the lease time).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

import grpc

from apexmesh.aio.tasks import stop_tasks
from apexmesh.apex.endpoint import Endpoint
from apexmesh.contracts.presence.v1 import presence_pb2, presence_pb2_grpc
from apexmesh.rpc.channels import internal_channel
from apexmesh.rpc.retry import PRESENCE_REPORT, RetryPolicy, failure_of, may_repeat

_log = logging.getLogger(__name__)

#: Presence calls of one relay pod in flight at once.
MAX_IN_FLIGHT: Final = 64
#: Seconds a stopping pod gives the calls still queued (its detaches, when sessions end
#: with it); the rest are dropped, as the service repairs lapsed leases by itself.
CLOSE_SECONDS: Final = 2.0


class PresenceHook:
    """Reports attachments of this pod to the presence service."""

    def __init__(
        self,
        address: str,
        pod_id: str,
        *,
        timeout: float = 5.0,
        max_in_flight: int = MAX_IN_FLIGHT,
        policy: RetryPolicy = PRESENCE_REPORT,
    ) -> None:
        self._channel = internal_channel(address)
        self._stub = presence_pb2_grpc.PresenceServiceStub(self._channel)
        self._pod_id = pod_id
        self._timeout = timeout
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self._policy = policy
        self._tail: dict[Endpoint, asyncio.Task[None]] = {}

    def attached(self, endpoint: Endpoint) -> None:
        self._queue(endpoint, attached=True)

    def detached(self, endpoint: Endpoint) -> None:
        self._queue(endpoint, attached=False)

    def _queue(self, endpoint: Endpoint, *, attached: bool) -> None:
        previous = self._tail.get(endpoint)
        task = asyncio.create_task(self._call(previous, endpoint, attached=attached))
        self._tail[endpoint] = task
        task.add_done_callback(lambda done: self._done(endpoint, done))

    def _done(self, endpoint: Endpoint, task: asyncio.Task[None]) -> None:
        if self._tail.get(endpoint) is task:
            del self._tail[endpoint]

    async def _call(
        self, previous: asyncio.Task[None] | None, endpoint: Endpoint, *, attached: bool
    ) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        event = presence_pb2.EndpointEvent(endpoint=str(endpoint), pod_id=self._pod_id)
        call = self._stub.EndpointAttached if attached else self._stub.EndpointDetached
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._in_flight:
                    response = await call(event, timeout=self._timeout, wait_for_ready=True)
                break
            except grpc.aio.AioRpcError as exc:
                # An attach or a detach sets a state: a repeat of one that got through
                # changes nothing, so a call cut off mid-flight may go again too.
                failure = failure_of(exc.code())
                delay = (
                    self._policy.next_delay(attempt)
                    if may_repeat(failure, repeatable=True)
                    else None
                )
                if delay is None:
                    _log.warning("presence: %s %s: %s", endpoint, attached, exc.code())
                    return
            await asyncio.sleep(delay)
        if response.status.code != 250:
            _log.info("presence refused %s: %s", endpoint, response.status.text)

    async def aclose(self) -> None:
        pending = list(self._tail.values())
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_SECONDS)
        await stop_tasks(pending, grace=CLOSE_SECONDS)
        await self._channel.close()


__all__ = ["PresenceHook"]
