"""The robust pubsub operations of the SDK besides the stub (XEP-0040 3.1, 4, 5.1 and
the subscription's lease), for :class:`apexmesh.client.robust.RobustClient`.

The client is its attachment's only reader, so it sends each operation itself and
matches the answer by transID (:mod:`apexmesh.client.robust_answers`): a refusal is
:class:`~apexmesh.client.errors.PubsubError` with the service's code, no answer within
the timeout ``TimeoutError``. :class:`RobustRequests` holds them; ``RobustClient`` is
one (it provides the attachment, the reader and the transIDs).
"""

from __future__ import annotations

import asyncio
import itertools
from abc import abstractmethod
from typing import TypeVar

from apexmesh.aio.tasks import stop_tasks
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.client.attachment import Attachment
from apexmesh.client.errors import PubsubError
from apexmesh.client.outgoing import XmlContent
from apexmesh.client.pubsub import DEFAULT_DURATION
from apexmesh.client.robust_answers import Answers, Snapshot
from apexmesh.pubsub.elements import Cancel, Subscribe, topic_endpoint
from apexmesh.pubsub.robust.operations import (
    Permissions,
    PermissionsQuery,
    PermissionTableAnswer,
    SnapshotRequest,
    SourceInfo,
    SourceQuery,
)
from apexmesh.pubsub.robust.permissions import PermissionChange, PermissionTable
from apexmesh.pubsub.robust.position import Resume
from apexmesh.pubsub.robust.stub_events import Publication
from apexmesh.pubsub.subscription_elements import ContentSubscribe, SelectorSpec, SubscriptionReply

#: The block of this client's own pubsub operations (subscribe, cancel, queries): above
#: every stub's block of gap transIDs.
OPERATIONS_BLOCK = 2_000_000_001


_T = TypeVar("_T")


def _expected(answer: object, kind: type[_T], topic: str) -> _T:
    """``answer`` when it is a ``kind``; PubsubError 550 otherwise (an answer of another
    shape to the transID: nothing this client can use)."""
    if not isinstance(answer, kind):
        raise PubsubError(550, f"unexpected answer {answer!r:.80}", topic=topic)
    return answer


class RobustRequests:
    """Operations sent to ``apex=pubsub@DOMAIN`` and ``apex=pubsub/TOPIC@DOMAIN``."""

    attachment: Attachment
    domain: str
    #: Where operations go (``apex=pubsub@DOMAIN``).
    service: Endpoint

    def __init__(self) -> None:
        self._operation_ids = itertools.count(OPERATIONS_BLOCK)
        #: Answers of this client's own operations, by transID.
        self._answers = Answers()
        self._leases: set[asyncio.Task[None]] = set()

    @abstractmethod
    def _start(self) -> None:
        """Start reading the attachment (the answers come through the reader)."""

    @abstractmethod
    async def subscribe(
        self,
        topic: str,
        *,
        duration: int = DEFAULT_DURATION,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> Reply: ...

    def keep_subscribed(
        self,
        topic: str,
        *,
        duration: int = DEFAULT_DURATION,
        selector: str | None = None,
        selector_class: str = "JMS",
    ) -> asyncio.Task[None]:
        """Subscribe now, and again at every half of ``duration`` (a repeated subscribe
        renews the lease, draft-schwartz 4.5 step 5.2; with ``selector`` a draft-wyman
        content subscription, renewed under its id by repeating it, 5.8). A refusal
        ends the task with its PubsubError; cancel the task (or :meth:`aclose`) to stop
        renewing. The first subscribe carries a resumed stub's position."""

        async def renew() -> None:
            while True:
                if selector is None:
                    await self.subscribe(topic, duration=duration)
                else:
                    await self.select(
                        topic, duration=duration, selector=selector, selector_class=selector_class
                    )
                await asyncio.sleep(max(duration / 2, 0.5))

        task = asyncio.create_task(renew(), name=f"robust-lease-{topic}")
        self._leases.add(task)
        task.add_done_callback(self._leases.discard)
        return task

    async def select(
        self,
        topic: str,
        *,
        duration: int = DEFAULT_DURATION,
        selector: str,
        selector_class: str = "JMS",
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> int:
        """A draft-wyman content subscription (5.8) with ``selector``; its subscription
        id. PubsubError with the code when refused (537, 553, 566, 567). On a robust
        topic the service does not select yet: every publication is delivered, with
        its ``robust`` option (docs/robust.md "Missing")."""
        op = ContentSubscribe(
            topic=topic,
            subscriber=self.attachment.endpoint,
            duration=duration,
            trans_id=next(self._operation_ids),
            selector=SelectorSpec(selector_class=selector_class, text=selector),
        )
        reply = await self._operation(op, topic, timeout)
        if not isinstance(reply, SubscriptionReply) or reply.subscription_id is None:
            raise PubsubError(550, "reply without subscription-id", trans_id=op.trans_id)
        return reply.subscription_id

    async def source_query(
        self,
        topic: str,
        *,
        link_seq: int | None = None,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> SourceInfo:
        """XEP 4: the topic's settings (resolution, retention, heartbeat, types,
        permissioning, contributions), and with ``link_seq`` what that position of this
        endpoint's link carried. PubsubError 553 (not robust), 537, 550 (position gone)."""
        query = SourceQuery(topic=topic, trans_id=next(self._operation_ids), link_seq=link_seq)
        answer = await self._ask(self.service, query.to_xml(), query.trans_id, topic, timeout)
        return _expected(answer, SourceInfo, topic)

    async def snapshot(
        self,
        topic: str,
        *,
        item: str | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109
    ) -> list[Publication]:
        """XEP 3.1 ``snapshot``: the current image of every item (or of ``item``), in
        item order, each a publication of type ``image``; no subscription follows
        (:class:`~apexmesh.pubsub.robust.item_cache.ItemCache.load` takes them). An
        empty list when the topic has no items (none of its publications named one).
        PubsubError with the code when refused (553, 537)."""
        request = SnapshotRequest(topic=topic, trans_id=next(self._operation_ids), item=item)
        collected = Snapshot(topic)
        self._answers.snapshots[request.trans_id] = collected
        try:
            answer = await self._ask(
                self.service, request.to_xml(), request.trans_id, topic, timeout, collected.done
            )
        finally:
            self._answers.forget(request.trans_id)
        return _expected(answer, list, topic)

    async def permissions(
        self,
        topic: str,
        changes: list[PermissionChange],
        *,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> Reply:
        """XEP 5.1: grant, deny or revoke tokens in-band (the topic's creator any token;
        a publisher the tokens it owns: the first to change a token owns it), applied
        from the next publication on. The 250 reply; PubsubError 537 (neither creator
        nor publisher, or another's token), 554 (a list or the table over its bound)."""
        change = Permissions(
            topic=topic, trans_id=next(self._operation_ids), changes=tuple(changes)
        )
        answer = await self._ask(
            topic_endpoint(topic, self.domain), change.to_xml(), change.trans_id, topic, timeout
        )
        return _expected(answer, Reply, topic)

    async def permission_table(
        self,
        topic: str,
        *,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> PermissionTable:
        """The permission table in force, read back (the topic's creator or a
        publisher): each token's grant and deny lists and its owner. PubsubError 537
        for anyone else, 553 for a topic that is not robust."""
        query = PermissionsQuery(topic=topic, trans_id=next(self._operation_ids))
        answer = await self._ask(self.service, query.to_xml(), query.trans_id, topic, timeout)
        return _expected(answer, PermissionTableAnswer, topic).table

    async def _operation(
        self, op: Subscribe | Cancel | Resume | ContentSubscribe, topic: str, within: float
    ) -> Reply | SubscriptionReply:
        answer = await self._ask(self.service, op.to_xml(), op.trans_id, topic, within)
        if not isinstance(answer, Reply | SubscriptionReply):
            return _expected(answer, Reply, topic)  # raises: neither kind of reply
        return answer

    async def _confirmed(self, op: Subscribe | Cancel | Resume, topic: str, within: float) -> Reply:
        """:meth:`_operation` answered with a plain ``reply`` (250)."""
        answer = await self._operation(op, topic, within)
        return _expected(answer, Reply, topic)

    async def _ask(
        self,
        to: Endpoint,
        content: bytes,
        trans_id: int,
        topic: str,
        within: float,
        done: asyncio.Future[list[Publication]] | None = None,
    ) -> object:
        """Send ``content`` and wait for the answer carrying ``trans_id`` (or ``done``,
        a snapshot's images): a refusal (a ``reply`` with another code than 250) is
        PubsubError, none within ``within`` seconds TimeoutError."""
        self._start()
        waiter = self._answers.expect(trans_id)
        try:
            await self.attachment.send(to, XmlContent(content))
            async with asyncio.timeout(within):
                if done is None:
                    answer = await waiter
                else:
                    finished, _ = await asyncio.wait(
                        {waiter, done}, return_when=asyncio.FIRST_COMPLETED
                    )
                    answer = (done if done in finished else waiter).result()
        finally:
            self._answers.forget(trans_id)
        if isinstance(answer, Reply | SubscriptionReply) and answer.code != 250:
            raise PubsubError(answer.code, answer.text, trans_id=trans_id, topic=topic)
        return answer

    async def _stop_renewing(self) -> None:
        leases, self._leases = set(self._leases), set()
        await stop_tasks(leases)


__all__ = ["OPERATIONS_BLOCK", "RobustRequests"]
