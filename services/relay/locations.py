"""Which pod of the domain holds an endpoint: Redis's answer, remembered for a while.

A location (endpoint -> address of the pod holding its attachment) is reused for
:data:`LOCATION_TTL_SECONDS` without asking Redis again, and for one more TTL while Redis
is asked again in the background, so that the data of that moment do not queue behind a
lookup. A stale location costs one delivery answered "not here" (or "unavailable") and a
fresh lookup (services/relay/executor.py), never a lost message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from apexmesh.common.cache import BoundedCache
from apexmesh.relay.routing import MISSING, Missing

if TYPE_CHECKING:
    from apexmesh.apex.endpoint import Endpoint
    from apexmesh.store.attachments import AttachmentRegistry

_log = logging.getLogger(__name__)

#: Seconds a located attachment (endpoint -> pod) is reused without asking Redis again.
LOCATION_TTL_SECONDS: Final = 5.0
#: Locations remembered at most (one per endpoint this pod sends to on other pods).
DEFAULT_LOCATIONS: Final = 100_000


class Locations:
    """Endpoint locations from Redis, cached (see the module docstring)."""

    def __init__(
        self,
        attachments: AttachmentRegistry,
        clock: Callable[[], float],
        *,
        limit: int = DEFAULT_LOCATIONS,
    ) -> None:
        self._attachments = attachments
        self.clock = clock
        self._known: BoundedCache[Endpoint, str] = BoundedCache("endpoint locations", limit)
        #: Pod ids by gRPC address (as many as the domain has pods, bounded anyway).
        self._pods: BoundedCache[str, str] = BoundedCache("pod ids", 1024)
        #: Endpoints whose location is being asked again.
        self._refreshing: set[Endpoint] = set()
        self._background: set[asyncio.Task[Any]] = set()

    def cached(self, endpoint: Endpoint) -> str | Missing:
        """The remembered address of the pod holding ``endpoint``, MISSING when none is
        remembered or it is too old; a location past its TTL is asked again in the
        background and used meanwhile."""
        address = self._known.get(endpoint)
        if address is None:
            return MISSING
        expires = self._known.expiry(endpoint)
        now = self.clock()
        if expires is None or expires > now:
            return address
        if expires + LOCATION_TTL_SECONDS <= now:
            return MISSING
        if endpoint not in self._refreshing:
            self._refreshing.add(endpoint)
            task = asyncio.get_running_loop().create_task(self._refresh(endpoint))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return address

    async def lookup(self, endpoint: Endpoint) -> str | None:
        """Where Redis says ``endpoint`` is attached; None when here or nowhere."""
        found = await self._attachments.locate(str(endpoint))
        if found is None or not found[1] or found[0] == self._attachments.pod_id:
            self._known.pop(endpoint)
            return None
        self._known.put(endpoint, found[1], expires=self.clock() + LOCATION_TTL_SECONDS)
        self._pods.put(found[1], found[0])
        return found[1]

    def pod_at(self, address: str) -> str | None:
        """The id of the pod last seen at ``address`` (for traces and logs)."""
        return self._pods.get(address)

    def expiry(self, endpoint: Endpoint) -> float | None:
        """When the remembered location of ``endpoint`` stops being fresh (None: none)."""
        return self._known.expiry(endpoint)

    @property
    def refreshing(self) -> bool:
        """True while a location is being asked again in the background."""
        return bool(self._refreshing)

    def forget(self, endpoint: Endpoint) -> None:
        """The remembered location proved stale (or the endpoint attached here)."""
        self._known.pop(endpoint)

    async def _refresh(self, endpoint: Endpoint) -> None:
        try:
            await self.lookup(endpoint)
        except Exception as exc:  # noqa: BLE001  (Redis away: the entry ages out instead)
            _log.warning("locating %s again failed: %s", endpoint, exc)
        finally:
            self._refreshing.discard(endpoint)

    async def close(self) -> None:
        for task in tuple(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)


__all__ = ["DEFAULT_LOCATIONS", "LOCATION_TTL_SECONDS", "Locations"]
