"""The access service's admin routes: list, grant, deny and remove access entries
(RFC 3341 section 3), the operator's ``apexctl access ls/grant/deny``.

Changes go through the same store script as ``apex=access`` set operations, so every
decision cache in the mesh hears of them at once (the change channel) and the
``lastUpdate`` of the entry moves on. A grant adds actions to the entry of (owner,
actor), creating it when absent; a deny takes actions away, and with no action named
makes the entry deny everything (an entry with the empty action set, RFC 3341 section
3); ``DELETE`` removes the entry, so the RFC's defaults apply again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field

from apexmesh.apex.access import AccessEntry, AccessError, ActionSet, ActorPattern, TokenRegistry
from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.ops.admin import GUARDED_ONE, Guard
from apexmesh.store.access_entries import AccessEntryStore, ChangeOutcome

#: Attempts of one change when another writer changed the entry meanwhile.
CHANGE_ATTEMPTS = 5


class EntryOut(BaseModel):
    owner: str
    actor: str
    actions: list[str] = Field(description="granted action tokens; empty: denies everything")
    last_update: str = Field("", description="RFC 3339")


class EntryChange(BaseModel):
    owner: str = Field(description="the endpoint whose entry changes, e.g. fred@example.com")
    actor: str = Field(description="who it is about: an endpoint, *@domain, *@*")
    actions: list[str] = Field(
        default_factory=list, description="action tokens, e.g. core:data presence:subscribe"
    )


def entry_out(entry: AccessEntry) -> EntryOut:
    return EntryOut(
        owner=str(entry.owner),
        actor=str(entry.actor),
        actions=sorted(entry.actions.tokens) if entry.actions is not None else [],
        last_update="" if entry.last_update is None else entry.last_update.isoformat(),
    )


def access_routers(
    store: AccessEntryStore,
    tokens: TokenRegistry,
    domains: frozenset[str],
    clock: Callable[[], datetime],
    guard: Guard,
) -> list[APIRouter]:
    """The access service's admin routers."""
    read = guard.reader()
    change = guard.changer()

    def owner_of(text: str) -> Endpoint:
        try:
            owner = Endpoint.parse(text)
        except (EndpointError, ValueError):
            raise HTTPException(400, f"owner {text!r} is not an endpoint") from None
        if owner.domain not in domains:
            raise HTTPException(400, f"this access service does not serve {owner.domain}")
        return owner

    def actor_of(text: str) -> ActorPattern:
        try:
            return ActorPattern.parse(text)
        except AccessError as exc:
            raise HTTPException(400, str(exc)) from None

    def actions_of(names: list[str]) -> frozenset[str]:
        try:
            return frozenset(tokens.validate(name) for name in names)
        except AccessError as exc:
            raise HTTPException(400, str(exc)) from None

    async def apply(
        owner: Endpoint,
        actor: ActorPattern,
        decide: Callable[[frozenset[str] | None], frozenset[str] | None],
    ) -> EntryOut | None:
        """Read, decide the new actions (None: delete), write; again when raced."""
        for _ in range(CHANGE_ATTEMPTS):
            current = await store.get(owner, actor)
            before = None if current is None or current.actions is None else current.actions.tokens
            after = decide(before)
            if after is None and current is None:
                return None
            result = await store.change(
                owner,
                actor,
                None if after is None else ActionSet(after),
                None if current is None else current.last_update,
                clock(),
            )
            if result.outcome in (ChangeOutcome.STALE, ChangeOutcome.EXISTS, ChangeOutcome.MISSING):
                continue
            return None if result.entry is None or after is None else entry_out(result.entry)
        raise HTTPException(409, "the entry keeps changing; try again")

    @read.get("/entries", response_model=list[EntryOut], summary="Explicit access entries")
    async def list_entries(
        owner: Annotated[str | None, Query(description="only this owner's entries")] = None,
    ) -> list[EntryOut]:
        owners = [owner_of(owner)] if owner is not None else []
        if owner is None:
            for text in await store.owners():
                try:
                    owners.append(Endpoint.parse(text))
                except (EndpointError, ValueError):
                    continue
        out: list[EntryOut] = []
        for who in owners:
            rules, _ = await store.load(who)
            out.extend(entry_out(entry) for entry in rules.explicit.values())
        return out

    @change.post("/entries/grant", response_model=EntryOut, summary="Grant actions to an actor")
    async def grant(body: EntryChange) -> EntryOut:
        owner, actor = owner_of(body.owner), actor_of(body.actor)
        wanted = actions_of(body.actions)
        if not wanted:
            raise HTTPException(400, "name at least one action to grant")
        done = await apply(owner, actor, lambda now: (now or frozenset()) | wanted)
        assert done is not None  # noqa: S101  (a grant always leaves an entry)
        return done

    @change.post(
        "/entries/deny",
        response_model=EntryOut,
        summary="Take actions away (none named: the actor is denied everything)",
    )
    async def deny(body: EntryChange) -> EntryOut:
        owner, actor = owner_of(body.owner), actor_of(body.actor)
        unwanted = actions_of(body.actions)
        done = await apply(
            owner,
            actor,
            lambda now: frozenset() if not unwanted else (now or frozenset()) - unwanted,
        )
        assert done is not None  # noqa: S101  (a deny always leaves an entry)
        return done

    @change.delete(
        "/entries",
        status_code=204,
        responses=GUARDED_ONE,
        summary="Remove an entry (the RFC 3341 defaults apply again)",
    )
    async def remove(owner: str, actor: str) -> None:
        who, pattern = owner_of(owner), actor_of(actor)
        if await store.get(who, pattern) is None:
            raise HTTPException(404, "no such entry")
        await apply(who, pattern, lambda _now: None)

    read.tags = change.tags = ["access"]
    return [read, change]


__all__ = ["access_routers"]
