"""The pubsub pod's whole-domain catalogue on its admin API (``GET /catalogue``).

The catalogue is the latest snapshot the Spark job switched into Redis plus the events
after its position (``apexmesh/store/pubsub_snapshot.py``), or the whole event log when
no snapshot exists yet; a pod loads it in the background after it starts serving. It is
what needs every topic and subscription at once (listing a domain with the selectors and
ids of its subscriptions, counts) without a scan of the live keys.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path
from pydantic import BaseModel, Field

from apexmesh.ops.admin import GUARDED_ONE, Guard
from apexmesh.pubsub.catalogue import unpack_id
from apexmesh.store.pubsub_snapshot import CatalogueSource

DomainName = Annotated[str, Path(min_length=1, max_length=255, pattern=r"^[^/@\s]+$")]


class DomainCounts(BaseModel):
    domain: str
    topics: int
    subscriptions: int


class CatalogueInfo(BaseModel):
    position: str = Field(description="the last event of the log folded in")
    from_snapshot: bool = Field(description="started from a snapshot, not a replay of the log")
    load_seconds: float | None = Field(description="how long the first load took")
    domains: list[DomainCounts]


class CatalogueTopic(BaseModel):
    topic: str
    settings: str = Field(description="the topic's settings (JSON text), '' for the defaults")
    creator: str
    created_ms: int


class CatalogueSubscription(BaseModel):
    topic: str
    subscriber: str
    subscription_id: str
    selector_class: str
    selector: str
    cached: bool
    expires_ms: int


class DomainCatalogue(BaseModel):
    domain: str
    position: str
    topics: list[CatalogueTopic]
    subscriptions: list[CatalogueSubscription]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def catalogue_router(source: CatalogueSource, domains: tuple[str, ...], guard: Guard) -> APIRouter:
    read = guard.reader()

    @read.get("/catalogue", response_model=CatalogueInfo, summary="The catalogue's state")
    async def info() -> CatalogueInfo:
        catalogue = await source.current()
        now = _now_ms()
        counts = [catalogue.domain_counts(domain, now) for domain in sorted(domains)]
        return CatalogueInfo(
            position=unpack_id(catalogue.position),
            from_snapshot=source.from_snapshot,
            load_seconds=source.load_seconds,
            domains=[
                DomainCounts(domain=domain, topics=topics, subscriptions=subs)
                for domain, (topics, subs) in zip(sorted(domains), counts, strict=True)
            ],
        )

    @read.get(
        "/catalogue/{domain}",
        response_model=DomainCatalogue,
        summary="Every topic and live subscription of a domain",
        responses=GUARDED_ONE,
    )
    async def of_domain(domain: DomainName) -> DomainCatalogue:
        if domain not in domains:
            raise HTTPException(404, f"this pubsub service does not serve {domain}")
        catalogue = await source.current()
        now = _now_ms()
        return DomainCatalogue(
            domain=domain,
            position=unpack_id(catalogue.position),
            topics=[
                CatalogueTopic(
                    topic=row.topic,
                    settings=row.settings,
                    creator=row.creator,
                    created_ms=row.created_ms,
                )
                for (where, _), row in sorted(catalogue.topics.items())
                if where == domain
            ],
            subscriptions=[
                CatalogueSubscription(
                    topic=row.topic,
                    subscriber=row.subscriber,
                    subscription_id=row.subscription_id,
                    selector_class=row.selector_class,
                    selector=row.selector,
                    cached=row.cached,
                    expires_ms=row.expires_ms,
                )
                for row in sorted(catalogue.live(now), key=lambda r: r.identity)
                if row.domain == domain
            ],
        )

    return read


__all__ = ["catalogue_router"]
