"""The pubsub service's admin routes: topics and subscriptions with their counts and
backlog, create and delete a topic, purge a topic's cache (``apexctl topics ...``,
``apexctl subscriptions ls``).

Topics and subscriptions live in Redis, so any pod answers for the whole domain. The
backlog of a subscription is the number of elements the service still owes its
subscriber (journal entries not yet sent: a relay was unreachable, or a leader is
redoing a dead pod's work); a healthy mesh shows 0 everywhere.

Create and delete run the draft's own steps (sections 4.2 and 4.3) as
``apex=pubsub@DOMAIN`` (:meth:`PubsubService.administer`), so the event log, presence
tuples and the cancels owed to a deleted topic's subscribers happen as for an endpoint's
request. Purge drops this pod's cached subscriber list and placement of a topic; apexctl
purges every pod.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path
from pydantic import BaseModel, Field

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.ops.admin import GUARDED_ONE, Guard
from apexmesh.pubsub.elements import CreateTopic, DeleteTopic
from apexmesh.store.pubsub import JournalEntry
from services.pubsub.servicer import PubsubService

#: transID of an operator's operation: nobody receives its reply, any valid id does.
_ADMIN_TRANS_ID = 1

#: How a topic appears in a path: any text but ``/`` (topic names have no slash).
TopicName = Annotated[str, Path(min_length=1, max_length=255, pattern=r"^[^/]+$")]
DomainName = Annotated[str, Path(min_length=1, max_length=255, pattern=r"^[^/@\s]+$")]


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
    originator: str = Field(description="who subscribed (gets the cancel when it ends)")
    trans_id: int
    expires_in_seconds: float
    backlog: int = Field(description="elements owed to the subscription's originator")


class TopicDetail(TopicOut):
    subscribers: list[SubscriptionOut]


class TopicCreate(BaseModel):
    domain: str = Field(description="a domain this pubsub service serves")
    topic: str = Field(min_length=1, max_length=255)


class OperationOut(BaseModel):
    code: int = Field(description="the draft's reply code: 250 done, 553 exists, 550 unknown")
    text: str = ""


class PurgeOut(BaseModel):
    domain: str
    topic: str
    pod: str
    cached: bool = Field(description="whether this pod had cached anything of the topic")


def _owed(entries: list[JournalEntry]) -> Counter[str]:
    """Elements still to send, per recipient."""
    return Counter(e.fields.get("recipient", "") for e in entries if e.kind == "send")


def pubsub_routers(service: PubsubService, pod_id: str, guard: Guard) -> list[APIRouter]:
    """The pubsub service's admin routers."""
    read = guard.reader()
    change = guard.changer()

    def served(domain: str) -> str:
        if domain not in service.domains:
            raise HTTPException(404, f"this pubsub service does not serve {domain}")
        return domain

    async def subscriptions_of(
        domain: str, topic: str, owed: Counter[str]
    ) -> list[SubscriptionOut]:
        view = await service.store.read_topic(domain, topic)
        now_ms = time.time() * 1000
        return [
            SubscriptionOut(
                domain=domain,
                topic=topic,
                subscriber=str(sub.subscriber),
                originator=str(sub.originator),
                trans_id=sub.trans_id,
                expires_in_seconds=round(max(0.0, sub.expires_ms - now_ms) / 1000, 3),
                backlog=owed.get(str(sub.originator), 0),
            )
            for sub in sorted(view.subscriptions.values(), key=lambda s: str(s.subscriber))
        ]

    async def topics_of(domain: str) -> list[TopicOut]:
        owed = _owed(await service.store.pending(domain))
        out = []
        for summary in await service.store.summaries(domain):
            subs = await subscriptions_of(domain, summary.topic, owed) if owed else []
            out.append(
                TopicOut(
                    domain=domain,
                    topic=summary.topic,
                    subscriptions=summary.subscriptions,
                    created_ms=summary.created_ms,
                    creator=summary.creator,
                    backlog=sum(s.backlog for s in subs),
                )
            )
        return out

    @read.get("/topics", response_model=list[TopicOut], summary="Topics of every served domain")
    async def list_topics() -> list[TopicOut]:
        out: list[TopicOut] = []
        for domain in sorted(service.domains):
            out.extend(await topics_of(domain))
        return out

    @read.get(
        "/topics/{domain}/{topic}",
        response_model=TopicDetail,
        responses=GUARDED_ONE,
        summary="One topic and its subscriptions",
    )
    async def describe(domain: DomainName, topic: TopicName) -> TopicDetail:
        served(domain)
        for summary in await topics_of(domain):
            if summary.topic == topic:
                owed = _owed(await service.store.pending(domain))
                subs = await subscriptions_of(domain, topic, owed)
                return TopicDetail(**summary.model_dump(), subscribers=subs)
        raise HTTPException(404, f"no topic {topic} in {domain}")

    @read.get(
        "/subscriptions",
        response_model=list[SubscriptionOut],
        summary="Every subscription with its lease and backlog",
    )
    async def list_subscriptions() -> list[SubscriptionOut]:
        out: list[SubscriptionOut] = []
        for domain in sorted(service.domains):
            owed = _owed(await service.store.pending(domain))
            for summary in await service.store.summaries(domain):
                out.extend(await subscriptions_of(domain, summary.topic, owed))
        return out

    async def operate(domain: str, op: CreateTopic | DeleteTopic) -> OperationOut:
        outcome = await service.administer(served(domain), op)
        if outcome.code == ApexReplyCode.SUCCESS:
            return OperationOut(code=outcome.code)
        status = 409 if isinstance(op, CreateTopic) else 404
        raise HTTPException(status, f"{outcome.code}: {outcome.step}")

    def parsed(
        kind: type[CreateTopic] | type[DeleteTopic], topic: str
    ) -> CreateTopic | DeleteTopic:
        try:
            return kind(topic=topic, trans_id=_ADMIN_TRANS_ID)
        except ApexError as exc:
            raise HTTPException(400, str(exc)) from None

    @change.post(
        "/topics",
        response_model=OperationOut,
        status_code=201,
        responses={**GUARDED_ONE, 409: {"description": "the topic exists"}},
        summary="Create a topic (draft section 4.2, as apex=pubsub@DOMAIN)",
    )
    async def create(body: TopicCreate) -> OperationOut:
        return await operate(body.domain, parsed(CreateTopic, body.topic))

    @change.delete(
        "/topics/{domain}/{topic}",
        response_model=OperationOut,
        responses=GUARDED_ONE,
        summary="Delete a topic; its subscribers get their cancels (section 4.3)",
    )
    async def delete(domain: DomainName, topic: TopicName) -> OperationOut:
        return await operate(domain, parsed(DeleteTopic, topic))

    @change.post(
        "/topics/{domain}/{topic}/purge",
        response_model=PurgeOut,
        responses=GUARDED_ONE,
        summary="Drop this pod's cache of a topic (subscriber list, placement)",
    )
    async def purge(domain: DomainName, topic: TopicName) -> PurgeOut:
        cached = service.purge(served(domain), topic)
        return PurgeOut(domain=domain, topic=topic, pod=pod_id, cached=cached)

    read.tags = change.tags = ["pubsub"]
    return [read, change]


__all__ = ["pubsub_routers"]
