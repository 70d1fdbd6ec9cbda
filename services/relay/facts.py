"""What the routing decision knows (apexmesh/relay/routing.py ``Facts``), from memory.

:class:`RelayFacts` reads the access decision cache, this pod's attachment table and the
remembered locations: no I/O. When the decision says a fact is missing, the executor
fetches it and lays it over these with :class:`Fetched` for the decision it repeats.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from apexmesh.apex.access import CORE_DATA, Decision
from apexmesh.relay.routing import MISSING, Missing

if TYPE_CHECKING:
    from apexmesh.apex.endpoint import Endpoint
    from apexmesh.store.access_cache import CachedAccessChecker
    from services.relay.attachments import AttachmentTable
    from services.relay.edge import ApexChannel
    from services.relay.locations import Locations


class RelayFacts:
    """What the routing decision knows, read from this pod's memory (no I/O)."""

    def __init__(
        self, access: CachedAccessChecker, table: AttachmentTable, locations: Locations
    ) -> None:
        self._access = access
        self._table = table
        self._locations = locations

    def access(self, owner: str, actor: str) -> Decision | None:
        return self._access.lookup(owner, actor, CORE_DATA)

    def local_channel(self, endpoint: Endpoint) -> ApexChannel | None:
        return self._table.channel_of(endpoint)

    def location(self, endpoint: Endpoint) -> str | Missing | None:
        return self._locations.cached(endpoint)


@dataclasses.dataclass(frozen=True, slots=True)
class Fetched:
    """:class:`RelayFacts` with what was just fetched for one recipient laid over it."""

    base: RelayFacts
    decision: Decision | None = None
    located: str | Missing | None = MISSING

    def access(self, owner: str, actor: str) -> Decision | None:
        return self.decision or self.base.access(owner, actor)

    def local_channel(self, endpoint: Endpoint) -> ApexChannel | None:
        return self.base.local_channel(endpoint)

    def location(self, endpoint: Endpoint) -> str | Missing | None:
        if self.located is not MISSING:
            return self.located
        return self.base.location(endpoint)


__all__ = ["Fetched", "RelayFacts"]
