"""Keeping this pod's attachments leased in Redis (RFC 3340 section 4.4.1: an endpoint
is attached at one place in the domain).

Every attachment this pod holds is a lease in Redis (apexmesh/store/attachments.py),
renewed every third of its length. When fewer come back renewed than the pod holds
(Redis restarted, the pod was paused past the lease), the lost ones may belong to another
pod by now: those are claimed again or terminated (554), never served twice. Attachments
made over an APEX channel the peer closed, keeping its session, are released.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from apexmesh.aio.tasks import stop_task

if TYPE_CHECKING:
    from apexmesh.store.attachments import AttachmentRegistry
    from services.relay.attachments import AttachmentTable

_log = logging.getLogger(__name__)


class LeaseKeeper:
    """The renewal loop of this pod's attachment leases (see the module docstring)."""

    def __init__(
        self,
        *,
        attachments: AttachmentRegistry,
        table: AttachmentTable,
        pod_id: str,
        address: Callable[[], str],
        lease_ms: int,
    ) -> None:
        self.attachments = attachments
        self.table = table
        self.pod_id = pod_id
        #: This pod's gRPC address, known once its server is bound.
        self.address = address
        self.lease_ms = lease_ms
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Renew once now (the pod's address goes in with it), then every third."""
        await self.attachments.renew(self.address())
        self._task = asyncio.get_running_loop().create_task(self._renew())

    async def close(self) -> None:
        await stop_task(self._task)
        self._task = None

    async def _renew(self) -> None:
        interval = self.lease_ms / 3000
        while True:
            await asyncio.sleep(interval)
            try:
                renewed = await self.attachments.renew(self.address())
            except (OSError, ConnectionError) as exc:
                _log.warning("cannot renew attachment leases: %s", exc)
                continue
            except Exception:  # noqa: BLE001  (Redis errors of every kind: keep trying)
                _log.exception("cannot renew attachment leases")
                continue
            if renewed < len(self.table):
                await self._drop_lost_attachments()
            try:
                await self._release_closed_channels()
            except Exception:  # noqa: BLE001  (Redis errors of every kind: keep renewing)
                _log.exception("cannot release the attachments of closed channels")

    async def _release_closed_channels(self) -> None:
        """Attachments made over an APEX channel the peer closed (keeping its session) are
        released (RFC 3340 section 4.4.1: an attachment lives on its BEEP channel)."""
        for channel in self.table.channels():
            if channel.closed_by_peer:
                await channel.release()

    async def _drop_lost_attachments(self) -> None:
        """Attachments whose lease lapsed (Redis restarted, pod paused) may now belong to
        another pod: terminate ours rather than serve an endpoint twice."""
        held = list(self.table.items())
        located = await self.attachments.locate_many([str(endpoint) for endpoint, _ in held])
        for (endpoint, (channel, attachment)), found in zip(held, located, strict=True):
            if found is None:
                if await self.attachments.claim(str(endpoint)) is None:
                    continue
            elif found[0] == self.pod_id:
                continue
            await channel.terminate(attachment, 554, "attachment lease lost")
