"""The presence service's admin routes: presence entries with their tuples, and the
subscribe and watch operations in progress (``apexctl presence ls``).

The pod keeps the entries and operations of its domains in memory (loaded from Redis at
start, saved with each change), so these routes read the service's core directly.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from fastapi import APIRouter
from pydantic import BaseModel, Field

from apexmesh.apex.presence_core import PresenceCore
from apexmesh.ops.admin import Guard


class TupleOut(BaseModel):
    destination: str
    available_until: str
    available: bool = Field(description="availableUntil is still ahead")


class EntryOut(BaseModel):
    publisher: str
    last_update: str
    attached: bool = Field(description="the mesh shows the endpoint attached")
    tuples: list[TupleOut]


class OperationOut(BaseModel):
    kind: str = Field(description="subscribe or watch")
    originator: str
    subject: str
    trans_id: int
    expires: str


def presence_routers(core: Callable[[], PresenceCore | None], guard: Guard) -> list[APIRouter]:
    """The presence service's admin routers (``core`` is None until the service runs)."""
    read = guard.reader()

    @read.get("/entries", response_model=list[EntryOut], summary="Presence entries (RFC 3343)")
    async def list_entries() -> list[EntryOut]:
        current = core()
        if current is None:
            return []
        now = datetime.now(UTC)
        out = []
        for publisher, entry in sorted(current.entries.items(), key=lambda item: str(item[0])):
            out.append(
                EntryOut(
                    publisher=str(publisher),
                    last_update=entry.last_update,
                    attached=publisher in current.attached,
                    tuples=[
                        TupleOut(
                            destination=item.destination,
                            available_until=item.available_until,
                            available=item.available_at(now),
                        )
                        for item in entry.tuples
                    ],
                )
            )
        return out

    @read.get(
        "/operations",
        response_model=list[OperationOut],
        summary="Subscribe and watch operations in progress",
    )
    async def list_operations() -> list[OperationOut]:
        current = core()
        if current is None:
            return []
        return [
            OperationOut(
                kind=op.kind,
                originator=str(op.originator),
                subject=str(op.subject),
                trans_id=op.trans_id,
                expires=op.expires.isoformat(),
            )
            for op in sorted(
                current.operations.values(), key=lambda o: (str(o.originator), o.trans_id)
            )
        ]

    read.tags = ["presence"]
    return [read]


__all__ = ["presence_routers"]
