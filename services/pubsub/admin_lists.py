"""The pubsub service's admin listings, costing what they show (issue #33).

``GET /topics`` and ``GET /subscriptions`` used to read every topic's subscriptions from
Redis and build a model per row on each call; the dashboard asked every second, which
took most of a core of a pubsub pod at 10,000 topics. They are now read from the pod's
catalogue (the snapshot plus the later events it folds: docs/snapshot.md), whose index
keeps topic names and subscriptions sorted and counted per domain
(:mod:`apexmesh.pubsub.catalogue_index`):

- ``limit``, ``after``, ``prefix`` (and ``domain``, ``topic``) are optional query
  parameters; without them a listing is whole, as before, so ``apexctl`` and scripts
  read the same list. With ``limit`` a page is a bisect and a slice; ``X-Next-After``
  carries the cursor of the next page when the page is full, ``X-Total-Count`` how many
  rows match (both O(log n));
- ``GET /summary`` is the dashboard's per-second read: per domain the numbers of
  topics, subscriptions and journal entries, each O(1);
- backlogs (elements still owed to a subscriber) need the journal; it is read only when
  it is not empty, and only for the rows shown.

A cursor is the JSON array of the last row's key: ``["DOMAIN","TOPIC"]`` for topics,
``["DOMAIN","TOPIC","SUBSCRIBER","ID"]`` for subscriptions.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Annotated, Final

from fastapi import APIRouter, HTTPException, Path, Query, Response
from pydantic import BaseModel, Field

from apexmesh.ops.admin import GUARDED_ONE
from apexmesh.pubsub.catalogue import Catalogue, unpack_id
from apexmesh.store.pubsub_snapshot import CatalogueSource
from services.pubsub.servicer import PubsubService

#: The most rows one page may ask for.
MAX_LIMIT: Final = 1000
NEXT_HEADER: Final = "X-Next-After"
TOTAL_HEADER: Final = "X-Total-Count"

#: How a topic appears in a path: any text but ``/`` (topic names have no slash).
TopicName = Annotated[str, Path(min_length=1, max_length=255, pattern=r"^[^/]+$")]
DomainName = Annotated[str, Path(min_length=1, max_length=255, pattern=r"^[^/@\s]+$")]
Limit = Annotated[
    int | None, Query(ge=1, le=MAX_LIMIT, description="rows in one page (all when absent)")
]
After = Annotated[str, Query(max_length=2000, description="cursor: X-Next-After of a page")]
Prefix = Annotated[str, Query(max_length=255, description="only topics starting with this")]
DomainQuery = Annotated[str | None, Query(max_length=255, description="only this domain")]


class TopicOut(BaseModel):
    domain: str
    topic: str
    subscriptions: int
    created_ms: int
    creator: str
    backlog: int = Field(description="elements owed to this topic's subscribers, not yet sent")


class SubscriptionOut(BaseModel):
    domain: str
    topic: str
    subscriber: str
    subscription_id: str = Field("", description="'' for a plain topic subscription")
    originator: str = Field(description="who subscribed (gets the cancel when it ends)")
    trans_id: int
    expires_in_seconds: float
    backlog: int = Field(description="elements owed to the subscription's originator")


class TopicDetail(TopicOut):
    subscribers: list[SubscriptionOut]


class DomainSummary(BaseModel):
    domain: str
    topics: int
    subscriptions: int
    journal: int = Field(description="work accepted and not yet done (sends, forwards)")


class Summary(BaseModel):
    pod: str
    position: str = Field(description="the last event of the log the catalogue folded")
    domains: list[DomainSummary]
    topics: list[TopicOut] = Field(
        default_factory=list, description="with ?first=N: each domain's first N topics"
    )
    subscriptions: list[SubscriptionOut] = Field(
        default_factory=list, description="with ?first=N: each domain's first N subscriptions"
    )


def _cursor(text: str, size: int) -> tuple[str, ...] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if (
        not isinstance(value, list)
        or len(value) != size
        or not all(isinstance(v, str) for v in value)
    ):
        raise HTTPException(400, f"after: a JSON array of {size} strings, as {NEXT_HEADER} gives")
    return tuple(value)


def list_router(
    service: PubsubService, catalogue: CatalogueSource, pod_id: str, read: APIRouter
) -> APIRouter:
    """Adds the listing routes to the read router ``read``."""

    def domains_of(domain: str | None) -> list[str]:
        if domain is None:
            return sorted(service.domains)
        if domain not in service.domains:
            raise HTTPException(404, f"this pubsub service does not serve {domain}")
        return [domain]

    async def owed(domain: str) -> Counter[str]:
        """Elements still to send, per recipient ({} without reading an empty journal)."""
        if not await service.store.pending_count(domain):
            return Counter()
        entries = await service.store.pending(domain)
        return Counter(e.fields.get("recipient", "") for e in entries if e.kind == "send")

    def subscription_out(
        cat: Catalogue, domain: str, key: tuple[str, str, str], debts: Counter[str], now_ms: float
    ) -> SubscriptionOut | None:
        row = cat.subscriptions.get((domain, *key))
        if row is None:  # pragma: no cover - the index lists what the catalogue holds
            return None
        return SubscriptionOut(
            domain=domain,
            topic=row.topic,
            subscriber=row.subscriber,
            subscription_id=row.subscription_id,
            originator=row.originator,
            trans_id=row.trans_id,
            expires_in_seconds=round(max(0.0, row.expires_ms - now_ms) / 1000, 3),
            backlog=debts.get(row.originator, 0),
        )

    def topic_out(cat: Catalogue, domain: str, topic: str, debts: Counter[str]) -> TopicOut:
        row = cat.topics.get((domain, topic))
        index = cat.indexed()
        backlog = 0
        if debts:
            for key in index.subscription_page(domain, topic=topic):
                sub = cat.subscriptions.get((domain, *key))
                backlog += debts.get(sub.originator, 0) if sub else 0
        return TopicOut(
            domain=domain,
            topic=topic,
            subscriptions=index.subscriptions_of(domain, topic),
            created_ms=row.created_ms if row else 0,
            creator=row.creator if row else "",
            backlog=backlog,
        )

    @read.get(
        "/summary",
        response_model=Summary,
        summary="Counts per domain (O(1) each), and the first rows of its lists",
    )
    async def summary(
        first: Annotated[
            int,
            Query(ge=0, le=100, description="also each domain's first N topics and subscriptions"),
        ] = 0,
    ) -> Summary:
        """One call for what the dashboard draws each round (each HTTP call costs the
        pod about a millisecond of CPU, whatever it answers)."""
        cat = await catalogue.current()
        index = cat.indexed()
        out = Summary(pod=pod_id, position=unpack_id(cat.position), domains=[])
        now_ms = time.time() * 1000
        for domain in sorted(service.domains):
            topics, subscriptions = index.counts(domain)
            journal = await service.store.pending_count(domain)
            out.domains.append(
                DomainSummary(
                    domain=domain, topics=topics, subscriptions=subscriptions, journal=journal
                )
            )
            if not first:
                continue
            debts = await owed(domain) if journal else Counter()
            out.topics += [
                topic_out(cat, domain, name, debts)
                for name in index.topic_page(domain, limit=first)
            ]
            out.subscriptions += [
                row
                for key in index.subscription_page(domain, limit=first)
                if (row := subscription_out(cat, domain, key, debts, now_ms)) is not None
            ]
        return out

    @read.get(
        "/topics",
        response_model=list[TopicOut],
        responses=GUARDED_ONE,
        summary="Topics of the served domains, whole or a page",
    )
    async def list_topics(
        response: Response,
        domain: DomainQuery = None,
        prefix: Prefix = "",
        after: After = "",
        limit: Limit = None,
    ) -> list[TopicOut]:
        wanted = domains_of(domain)
        cursor = _cursor(after, 2)
        cat = await catalogue.current()
        index = cat.indexed()
        rows: list[TopicOut] = []
        total = 0
        for where in wanted:
            total += index.topic_count(where, prefix)
            if cursor is not None and where < cursor[0]:
                continue
            left = (limit - len(rows)) if limit else 0
            if limit and left <= 0:
                continue
            start = cursor[1] if cursor is not None and where == cursor[0] else ""
            names = index.topic_page(where, prefix, start, left)
            debts = await owed(where) if names else Counter()
            rows.extend(topic_out(cat, where, name, debts) for name in names)
        if limit:
            response.headers[TOTAL_HEADER] = str(total)
            if len(rows) == limit:
                response.headers[NEXT_HEADER] = json.dumps([rows[-1].domain, rows[-1].topic])
        return rows

    @read.get(
        "/subscriptions",
        response_model=list[SubscriptionOut],
        responses=GUARDED_ONE,
        summary="Subscriptions with their lease and backlog, whole or a page",
    )
    async def list_subscriptions(
        response: Response,
        domain: DomainQuery = None,
        topic: Annotated[str | None, Query(max_length=255, description="only this topic")] = None,
        prefix: Prefix = "",
        after: After = "",
        limit: Limit = None,
    ) -> list[SubscriptionOut]:
        wanted = domains_of(domain)
        cursor = _cursor(after, 4)
        cat = await catalogue.current()
        index = cat.indexed()
        now_ms = time.time() * 1000
        rows: list[SubscriptionOut] = []
        for where in wanted:
            if cursor is not None and where < cursor[0]:
                continue
            left = (limit - len(rows)) if limit else 0
            if limit and left <= 0:
                break
            start = (cursor[1], cursor[2], cursor[3]) if cursor and where == cursor[0] else None
            keys = index.subscription_page(
                where, topic=topic, prefix=prefix, after=start, limit=left
            )
            debts = await owed(where) if keys else Counter()
            for key in keys:
                out = subscription_out(cat, where, key, debts, now_ms)
                if out is not None:
                    rows.append(out)
        if limit and len(rows) == limit:
            last = rows[-1]
            response.headers[NEXT_HEADER] = json.dumps(
                [last.domain, last.topic, last.subscriber, last.subscription_id]
            )
        return rows

    @read.get(
        "/topics/{domain}/{topic}",
        response_model=TopicDetail,
        responses=GUARDED_ONE,
        summary="One topic and its subscriptions",
    )
    async def describe(domain: DomainName, topic: TopicName) -> TopicDetail:
        domains_of(domain)
        cat = await catalogue.current()
        if (domain, topic) not in cat.topics:
            raise HTTPException(404, f"no topic {topic} in {domain}")
        debts = await owed(domain)
        now_ms = time.time() * 1000
        subs = [
            out
            for key in cat.indexed().subscription_page(domain, topic=topic)
            if (out := subscription_out(cat, domain, key, debts, now_ms)) is not None
        ]
        return TopicDetail(**topic_out(cat, domain, topic, debts).model_dump(), subscribers=subs)

    return read


__all__ = ["MAX_LIMIT", "NEXT_HEADER", "TOTAL_HEADER", "TopicOut", "list_router"]
