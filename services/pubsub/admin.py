"""The pubsub service's admin routes: topics and subscriptions with their counts and
backlog (read from the pod's catalogue, in pages: :mod:`services.pubsub.admin_lists`),
create and delete a topic, purge a topic's cache (``apexctl topics ...``,
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

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.ops.admin import GUARDED_ONE, Guard
from apexmesh.pubsub.elements import CreateTopic, DeleteTopic
from apexmesh.store.pubsub_snapshot import CatalogueSource
from services.pubsub.admin_lists import DomainName, TopicName, list_router
from services.pubsub.servicer import PubsubService

#: transID of an operator's operation: nobody receives its reply, any valid id does.
_ADMIN_TRANS_ID = 1


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


def pubsub_routers(
    service: PubsubService, catalogue: CatalogueSource, pod_id: str, guard: Guard
) -> list[APIRouter]:
    """The pubsub service's admin routers (the listings: :mod:`services.pubsub.admin_lists`)."""
    read = list_router(service, catalogue, pod_id, guard.reader())
    change = guard.changer()

    def served(domain: str) -> str:
        if domain not in service.domains:
            raise HTTPException(404, f"this pubsub service does not serve {domain}")
        return domain

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
