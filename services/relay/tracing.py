"""The relay's part in tracing: one :class:`~apexmesh.store.hops.Hop` per data with a
statusRequest, written when the router knows every recipient's outcome.

The router calls :meth:`HopTracer.concluded` (one line in its conclusion step); the
tracer works out each recipient's route from what the pod knows (its own attachments,
the domain's attachment table, the domains it serves) and appends the hop in the
background, so a slow or absent Redis never delays a report. Tracing is on by default
(``APEXMESH_RELAY_TRACE``): it costs one XADD per data that asked for a report.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from apexmesh.apex.options import STATUS_REQUEST
from apexmesh.ops.logs import correlation_id
from apexmesh.relay.outcomes import Outcome, Reason
from apexmesh.relay.routing import RouteKind
from apexmesh.store.hops import Hop, HopLog, HopOutcome
from services.relay.timekeeper import wall_ms

if TYPE_CHECKING:
    from apexmesh.apex.data import Data
    from apexmesh.apex.endpoint import Endpoint
    from services.relay.router import Router

_log = logging.getLogger(__name__)


def status_trans_ids(data: Data) -> tuple[int, ...]:
    """The transIDs of the statusRequest options of ``data`` (per-data and
    per-recipient), in order, each once."""
    found = [o.trans_id for o in data.options if o.internal == STATUS_REQUEST]
    for recipient in data.recipients:
        found += [o.trans_id for o in recipient.options if o.internal == STATUS_REQUEST]
    return tuple(dict.fromkeys(found))


class HopTracer:
    """Writes the hops of one relay pod."""

    def __init__(self, log: HopLog, router: Router, pod_id: str) -> None:
        self._log = log
        self._router = router
        self._pod = pod_id
        self._tasks: set[asyncio.Task[None]] = set()

    def concluded(
        self,
        data: Data,
        received_ms: int,
        results: Mapping[Endpoint, Outcome],
        reported_by: tuple[str, ...],
        where: Mapping[Endpoint, tuple[RouteKind, str]] | None = None,
    ) -> None:
        """Every recipient of ``data`` has its outcome: record the hop (in the
        background). Data without a statusRequest is not traced."""
        trans_ids = status_trans_ids(data)
        if not trans_ids:
            return
        task = asyncio.get_running_loop().create_task(
            self._record(data, trans_ids, received_ms, dict(results), reported_by, where or {})
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _record(
        self,
        data: Data,
        trans_ids: tuple[int, ...],
        received_ms: int,
        results: dict[Endpoint, Outcome],
        reported_by: tuple[str, ...],
        where: Mapping[Endpoint, tuple[RouteKind, str]],
    ) -> None:
        router = self._router
        originator = data.originator.identity
        if originator.domain not in router.domains:
            origin = "mesh"
        elif originator.is_service:
            origin = "service"
        else:
            origin = "edge"
        try:
            outcomes = [
                HopOutcome(
                    recipient=str(endpoint),
                    code=int(outcome.code),
                    text=outcome.text,
                    route=await self._route(endpoint, outcome, where.get(endpoint)),
                )
                for endpoint, outcome in results.items()
            ]
            await self._log.record(
                Hop(
                    originator=str(originator),
                    trans_ids=trans_ids,
                    pod=self._pod,
                    domain=router.primary_domain,
                    origin=origin,
                    received_ms=received_ms or wall_ms(),
                    concluded_ms=wall_ms(),
                    cid=correlation_id.get(),
                    outcomes=tuple(outcomes),
                    reported_by=reported_by,
                )
            )
        except Exception as exc:  # noqa: BLE001  (Redis away: a missing trace, nothing more)
            _log.warning("cannot record the hop of data from %s: %s", originator, exc)

    async def _route(
        self, endpoint: Endpoint, outcome: Outcome, taken: tuple[RouteKind, str] | None
    ) -> str:
        """How the data went to ``endpoint``: the route the executor took when it is
        known (the endpoint may have moved or left since), else looked up now."""
        router = self._router
        if outcome.reason is Reason.HELD:
            return "held"
        if taken is not None:
            kind, address = taken
            if kind is RouteKind.LOCAL:
                return f"local {self._pod}"
            if kind is RouteKind.POD:
                return f"pod {router.locations.pod_at(address) or address}"
        if endpoint.domain not in router.domains:
            return f"mesh {endpoint.domain}"
        if endpoint.is_service:
            return f"service {endpoint}"
        if endpoint in router.table:
            return f"local {self._pod}"
        found = await router.attachments.locate(str(endpoint))
        return "none" if found is None else f"pod {found[0]}"

    async def close(self) -> None:
        """Let the hops being written finish (bounded by the caller's grace)."""
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await task


__all__ = ["HopTracer", "status_trans_ids"]
