"""The relay's admin routes (``/admin/v1/...``, apexmesh/ops/admin.py): sessions and the
attachments made over them, held data and its purge, traced hops, closing a session,
drain and its undoing, and reloading the TLS and SASL files.

The routes read the pod through :class:`RelayView`, a narrow read-only window the
composition root hands over (the session table, the router's local attachments, the
held-data store and the hop log), and change it only through the two callables it
offers (drain, undrain, reload).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, HTTPException, Path, Query
from pydantic import BaseModel, Field

from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.ops.admin import GUARDED_ONE, Guard
from apexmesh.store.held import HeldStore
from apexmesh.store.hops import Hop, HopLog
from services.relay.sessions import SessionRecord, Sessions

if TYPE_CHECKING:
    from services.relay.attachments import AttachmentTable
    from services.relay.edge import ApexChannel

#: Seconds a closed session's peer gets to answer the BEEP release before the
#: connection is dropped.
CLOSE_SECONDS = 2.0


@dataclass(frozen=True)
class RelayView:
    """What the admin routes may see and do at one relay pod."""

    pod_id: str
    domains: Sequence[str]
    sessions: Sessions
    #: The router's endpoints attached over this pod's channels.
    table: AttachmentTable
    held: HeldStore | None
    hops: HopLog
    #: Stop accepting sessions and turn readiness false.
    drain: Callable[[], Awaitable[None]]
    #: Undo the drain: accept sessions again, ready.
    undrain: Callable[[], Awaitable[None]]
    #: Look at the TLS and SASL files now (services/relay/reloading.py).
    reload: Callable[[], Awaitable[dict[str, str]]]


class SessionOut(BaseModel):
    id: int
    mode: str = Field(description="endpoint-relay (apex-edge) or relay-relay (apex-mesh)")
    peer: str
    tls: bool
    identity: str = Field("", description="the SASL-authenticated identity, if any")
    channels: int
    attachments: list[str]
    opened_at: float = Field(description="seconds since the epoch")
    age_seconds: float


class SessionClosed(BaseModel):
    id: int
    closed: bool


class AttachmentOut(BaseModel):
    endpoint: str
    session: int
    channel: int
    trans_id: int


class HeldEndpointOut(BaseModel):
    endpoint: str
    domain: str
    count: int
    bytes: int
    oldest_age_seconds: float


class HeldEntryOut(BaseModel):
    id: int
    size: int = Field(description="payload octets")
    age_seconds: float
    deadline_in_seconds: float | None = Field(description="None: held until attach")


class DrainOut(BaseModel):
    draining: bool
    since: float = Field(description="when the drain began (epoch seconds), 0 if not")
    sessions: int = Field(description="sessions still open")


class PurgedOut(BaseModel):
    endpoint: str
    purged: int = Field(description="held data removed")


class ReloadOut(BaseModel):
    results: dict[str, str] = Field(
        description="per material (tls, ca, sasl): unchanged, reloaded or failed: why"
    )


class HopOutcomeOut(BaseModel):
    recipient: str
    code: int
    text: str
    route: str


class HopOut(BaseModel):
    id: str
    originator: str
    trans_ids: list[int]
    pod: str
    domain: str
    origin: str
    received_ms: int
    concluded_ms: int
    cid: str
    outcomes: list[HopOutcomeOut]
    reported_by: list[str]


def _peer(record: SessionRecord) -> str:
    peer = record.conn.peer_address
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer or "")


def hop_out(hop: Hop) -> HopOut:
    return HopOut(
        id=hop.id,
        originator=hop.originator,
        trans_ids=list(hop.trans_ids),
        pod=hop.pod,
        domain=hop.domain,
        origin=hop.origin,
        received_ms=hop.received_ms,
        concluded_ms=hop.concluded_ms,
        cid=hop.cid,
        outcomes=[
            HopOutcomeOut(recipient=o.recipient, code=o.code, text=o.text, route=o.route)
            for o in hop.outcomes
        ],
        reported_by=list(hop.reported_by),
    )


def _endpoint(text: str) -> Endpoint:
    try:
        return Endpoint.parse(text)
    except (EndpointError, ValueError):
        raise HTTPException(404, f"{text!r} is not an endpoint") from None


def relay_routers(view: RelayView, guard: Guard) -> list[APIRouter]:
    """The relay's admin routers."""
    read = guard.reader()
    change = guard.changer()

    def attachments_of(record: SessionRecord) -> list[tuple[Endpoint, ApexChannel, int]]:
        return [
            (endpoint, channel, attachment.trans_id)
            for endpoint, (channel, attachment) in view.table.items()
            if channel.conn is record.conn
        ]

    @read.get("/sessions", response_model=list[SessionOut], summary="BEEP sessions of this pod")
    async def list_sessions() -> list[SessionOut]:
        now = time.time()
        return [
            SessionOut(
                id=record.id,
                mode=record.mode.value,
                peer=_peer(record),
                tls=record.conn.session.tls_active,
                identity=record.conn.session.peer_identity or "",
                channels=max(0, len(record.conn.session.channels) - 1),
                attachments=[str(e) for e, _, _ in attachments_of(record)],
                opened_at=record.opened_at,
                age_seconds=round(now - record.opened_at, 3),
            )
            for record in view.sessions
        ]

    @change.delete(
        "/sessions/{session_id}",
        response_model=SessionClosed,
        responses=GUARDED_ONE,
        summary="Close one session (its attachments end)",
    )
    async def close_session(session_id: Annotated[int, Path(ge=1)]) -> SessionClosed:
        record = view.sessions.get(session_id)
        if record is None:
            raise HTTPException(404, f"no session {session_id}")
        await record.conn.close(timeout=CLOSE_SECONDS)
        return SessionClosed(id=session_id, closed=True)

    @read.get("/attachments", response_model=list[AttachmentOut], summary="Endpoints attached here")
    async def list_attachments() -> list[AttachmentOut]:
        out = []
        for record in view.sessions:
            for endpoint, channel, trans_id in attachments_of(record):
                number = 0 if channel.channel is None else channel.channel.number
                out.append(
                    AttachmentOut(
                        endpoint=str(endpoint), session=record.id, channel=number, trans_id=trans_id
                    )
                )
        return sorted(out, key=lambda a: a.endpoint)

    @read.get(
        "/held",
        response_model=list[HeldEndpointOut],
        summary="Data held for endpoints not attached (hold4Endpoint), per endpoint",
    )
    async def list_held() -> list[HeldEndpointOut]:
        if view.held is None:
            return []
        now = int(time.time() * 1000)
        out: list[HeldEndpointOut] = []
        for domain in view.domains:
            out.extend(
                HeldEndpointOut(
                    endpoint=item.endpoint,
                    domain=domain,
                    count=item.count,
                    bytes=item.bytes,
                    oldest_age_seconds=item.oldest_age_ms / 1000,
                )
                for item in await view.held.by_endpoint(domain, now)
            )
        return out

    @read.get(
        "/held/{endpoint}",
        response_model=list[HeldEntryOut],
        responses=GUARDED_ONE,
        summary="The data held for one endpoint (ages and sizes, not contents)",
    )
    async def held_of(
        endpoint: str, limit: Annotated[int, Query(ge=1, le=1000)] = 100
    ) -> list[HeldEntryOut]:
        who = _endpoint(endpoint)
        if view.held is None:
            return []
        now = int(time.time() * 1000)
        return [
            HeldEntryOut(
                id=entry.id,
                size=entry.size,
                age_seconds=max(0, now - entry.held_at) / 1000,
                deadline_in_seconds=None
                if entry.deadline is None
                else (entry.deadline - now) / 1000,
            )
            for entry in await view.held.read(str(who), limit=limit)
        ]

    @change.delete(
        "/held/{endpoint}",
        response_model=PurgedOut,
        responses=GUARDED_ONE,
        summary="Purge the data held for one endpoint (no reports are sent for it)",
    )
    async def purge_held(endpoint: str) -> PurgedOut:
        who = str(_endpoint(endpoint))
        if view.held is None:
            return PurgedOut(endpoint=who, purged=0)
        purged = 0
        while entries := await view.held.read(who, limit=1000):
            purged += await view.held.ack(who, [entry.id for entry in entries])
        return PurgedOut(endpoint=who, purged=purged)

    @change.post(
        "/reload",
        response_model=ReloadOut,
        summary="Reload changed TLS and SASL files now (sessions are kept)",
    )
    async def reload() -> ReloadOut:
        return ReloadOut(results=await view.reload())

    def drain_state() -> DrainOut:
        return DrainOut(
            draining=view.sessions.draining,
            since=view.sessions.drain_started,
            sessions=len(view.sessions),
        )

    @read.get("/drain", response_model=DrainOut, summary="Whether this pod is draining")
    async def get_drain() -> DrainOut:
        return drain_state()

    @change.post(
        "/drain",
        response_model=DrainOut,
        summary="Stop accepting sessions; readiness goes false; open sessions go on",
    )
    async def drain() -> DrainOut:
        await view.drain()
        return drain_state()

    @change.post(
        "/undrain",
        response_model=DrainOut,
        summary="Undo a drain: accept sessions again; readiness turns true",
    )
    async def undrain() -> DrainOut:
        await view.undrain()
        return drain_state()

    @read.get(
        "/hops",
        response_model=list[HopOut],
        summary="Traced hops of data with a statusRequest, oldest first",
    )
    async def list_hops(
        originator: str | None = None,
        trans_id: Annotated[int | None, Query(ge=1, le=2_147_483_647)] = None,
        after: Annotated[str, Query(pattern=r"^(-|\d{1,20}-\d{1,20})$")] = "-",
        limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    ) -> list[HopOut]:
        try:
            hops = await view.hops.read(
                after=after, limit=limit, originator=originator, trans_id=trans_id
            )
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        return [hop_out(hop) for hop in hops]

    read.tags = ["relay"]
    change.tags = ["relay"]
    return [read, change]


__all__ = ["RelayView", "relay_routers"]
