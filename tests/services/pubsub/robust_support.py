"""Helpers of the robust pubsub tests over the running mesh: an attachment that loses
chosen deliveries on purpose (the stub must notice and repair), the robust option of a
received delivery, and waiting for an answer among heartbeats."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from apexmesh.apex.endpoint import Endpoint
from apexmesh.client.attachment import Attachment
from apexmesh.client.received import ReceivedData
from apexmesh.pubsub.robust.elements import OPTION_NAME, RobustInfo, robust_from_option
from apexmesh.pubsub.robust.operations import GapRequest, parse_request
from tests.support.polling import scaled, wait_until


async def subscribed(apps: Any, domain: str, topic: str, endpoint: Endpoint) -> None:
    """Return once every pubsub pod's cache (``apps``: PubsubApp) lists ``endpoint`` as
    a subscriber of ``topic``: a publication sequenced before would not number its link
    (as any publication before a subscription reaches it)."""
    for app in apps:

        async def lists_it(app: Any = app) -> bool:
            state = await app.subscribers.topic(domain, topic)
            return any(sub.subscriber == endpoint for sub in state.subscriptions.values())

        await wait_until(lists_it, 10, every=0.02, what=f"{endpoint} subscribed on {app}")


def robust_info(received: ReceivedData, endpoint: Endpoint) -> RobustInfo | None:
    """The ``robust`` option ``endpoint`` got with ``received`` (None: none)."""
    for recipient in received.data.recipients:
        if recipient.identity == endpoint:
            for option in recipient.options:
                if option.internal == OPTION_NAME:
                    return robust_from_option(option)
    return None


class Lossy:
    """An attachment that drops the deliveries ``drop`` picks before the reader sees
    them (a delivery lost on its way), and records the gap requests sent through it."""

    def __init__(
        self, attachment: Attachment, drop: Callable[[ReceivedData, RobustInfo | None], bool]
    ) -> None:
        self._attachment = attachment
        self._drop = drop
        self.dropped: list[RobustInfo | None] = []
        self.gaps: list[tuple[float, GapRequest]] = []

    @property
    def endpoint(self) -> Endpoint:
        return self._attachment.endpoint

    async def receive(self) -> ReceivedData:
        while True:
            received = await self._attachment.receive()
            info = robust_info(received, self.endpoint)
            if self._drop(received, info):
                self.dropped.append(info)
                continue
            return received

    def _record(self, content: Any) -> None:
        raw = getattr(content, "xml", b"")
        if raw.lstrip().startswith(b"<gap"):
            request = parse_request(raw)
            assert isinstance(request, GapRequest)
            self.gaps.append((time.monotonic(), request))

    async def send(self, recipients: Any, content: Any, **kwargs: Any) -> Any:
        self._record(content)
        return await self._attachment.send(recipients, content, **kwargs)

    def submit(self, recipients: Any, content: Any, **kwargs: Any) -> Any:
        self._record(content)
        return self._attachment.submit(recipients, content, **kwargs)


class HeldOk(Lossy):
    """A :class:`Lossy` attachment whose gap requests' ``ok`` is held back until
    :attr:`release` is set: the relay's ``ok`` to a gap request comes over the same
    channel as the repair's redeliveries, so a reader that waits for it before reading
    on waits behind them (issue #29: once the attachment's queue was full, forever)."""

    def __init__(
        self, attachment: Attachment, drop: Callable[[ReceivedData, RobustInfo | None], bool]
    ) -> None:
        super().__init__(attachment, drop)
        self.release = asyncio.Event()

    @staticmethod
    def _is_gap(content: Any) -> bool:
        return bool(getattr(content, "xml", b"").lstrip().startswith(b"<gap"))

    async def send(self, recipients: Any, content: Any, **kwargs: Any) -> Any:
        result = await super().send(recipients, content, **kwargs)
        if self._is_gap(content):
            await self.release.wait()
        return result

    def submit(self, recipients: Any, content: Any, **kwargs: Any) -> Any:
        sent = super().submit(recipients, content, **kwargs)
        if not self._is_gap(content):
            return sent

        async def held() -> Any:
            result = await sent
            await self.release.wait()
            return result

        return asyncio.ensure_future(held())


async def publications(
    queue_get: Callable[[], Any],
    endpoint: Endpoint,
    count: int,
    within: float = 10.0,
    *,
    heartbeats: bool = False,
) -> list[tuple[RobustInfo, ReceivedData]]:
    """Deliveries a PubsubClient's ``next_publication`` returns until ``count``
    publications came (the heartbeats among them kept when ``heartbeats``)."""
    out: list[tuple[RobustInfo, ReceivedData]] = []
    seen = 0
    async with asyncio.timeout(scaled(within)):
        while seen < count:
            _topic, received = await queue_get()
            info = robust_info(received, endpoint)
            assert info is not None, received.content[:200]
            if not info.heartbeat:
                seen += 1
            if heartbeats or not info.heartbeat:
                out.append((info, received))
    return out
