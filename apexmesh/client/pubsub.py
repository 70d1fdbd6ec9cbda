"""Pubsub helpers of the endpoint SDK (draft-schwartz-apex-pubsub-02).

::

    pubsub = PubsubClient(fred)                       # fred: an attached Attachment
    await pubsub.request(pubsub.create_topic_op("music.jazz"))   # -> Reply 250
    lease = pubsub.keep_subscribed("music.jazz", duration=60)    # renewed at half-life
    await pubsub.publish("music.jazz", b"hello")
    topic, received = await pubsub.next_publication()
    await pubsub.request(pubsub.cancel_op("music.jazz")); lease.cancel()

Operations travel inline to ``apex=pubsub@DOMAIN`` (section 4.1). Everything the
attachment receives is sorted by a reader task: elements from ``apex=pubsub@D``
(``reply``, ``topiclist``, ``cancel``) go to :meth:`PubsubClient.next_message` (or to the
:meth:`PubsubClient.request` awaiting that transID), data from ``apex=pubsub/TOPIC@D`` to
:meth:`PubsubClient.next_publication`, anything else to :meth:`PubsubClient.next_other`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterable

from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import Option
from apexmesh.client.attachment import Attachment
from apexmesh.client.errors import ApexClientError
from apexmesh.client.outgoing import Content, XmlContent, as_endpoint
from apexmesh.client.received import ReceivedData
from apexmesh.client.reports import SendResult
from apexmesh.pubsub.elements import (
    Cancel,
    CreateTopic,
    DeleteTopic,
    ListTopics,
    Operation,
    ServiceMessage,
    Subscribe,
    TopicList,
    is_service,
    parse_service_message,
    service_endpoint,
    topic_endpoint,
    topic_of,
)

#: Seconds :meth:`PubsubClient.request` waits for the service's answer by default.
DEFAULT_ANSWER_SECONDS = 10.0


def pubsub_message(received: ReceivedData) -> ServiceMessage | None:
    """The element carried by data from an ``apex=pubsub`` service, else None. Raises
    ApexError for a malformed one."""
    if not is_service(received.originator):
        return None
    return parse_service_message(received.content)


def publication_topic(received: ReceivedData) -> str | None:
    """The topic of data forwarded by ``apex=pubsub/TOPIC@D`` (section 4.7.1), else None."""
    return topic_of(received.originator)


def _trans_id(message: ServiceMessage) -> int | None:
    return message.trans_id


class PubsubClient:
    """The pubsub operations of one attachment, against ``apex=pubsub@domain`` (the
    attachment's own domain unless given)."""

    def __init__(
        self, attachment: Attachment, *, domain: str | None = None, first_trans_id: int = 1
    ) -> None:
        self.attachment = attachment
        self.domain = domain or attachment.endpoint.domain
        self.service = service_endpoint(self.domain)
        self._ids = itertools.count(first_trans_id)
        self._messages: asyncio.Queue[ServiceMessage] = asyncio.Queue()
        self._publications: asyncio.Queue[tuple[str, ReceivedData]] = asyncio.Queue()
        self._others: asyncio.Queue[ReceivedData] = asyncio.Queue()
        self._waiting: dict[int, asyncio.Future[ServiceMessage]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._leases: set[asyncio.Task[None]] = set()

    def next_trans_id(self) -> int:
        return next(self._ids)

    # ------------------------------------------------------------------ reading

    def _start(self) -> None:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read(), name="pubsub-client-reader")

    async def _read(self) -> None:
        with contextlib.suppress(ApexClientError):
            while True:
                received = await self.attachment.receive()
                topic = publication_topic(received)
                if topic is not None:
                    self._publications.put_nowait((topic, received))
                    continue
                try:
                    message = pubsub_message(received)
                except ApexError:
                    message = None
                if message is None:
                    self._others.put_nowait(received)
                    continue
                trans_id = _trans_id(message)
                waiter = self._waiting.pop(trans_id, None) if trans_id is not None else None
                if waiter is not None and not waiter.done():
                    waiter.set_result(message)
                else:
                    self._messages.put_nowait(message)

    async def next_message(self) -> ServiceMessage:
        """The next reply, topiclist or cancel nobody awaited with :meth:`request`."""
        self._start()
        return await self._messages.get()

    async def next_publication(self) -> tuple[str, ReceivedData]:
        """The next data forwarded for a topic: (topic, data)."""
        self._start()
        return await self._publications.get()

    async def next_other(self) -> ReceivedData:
        self._start()
        return await self._others.get()

    # ------------------------------------------------------------------ operations

    def create_topic_op(self, topic: str) -> CreateTopic:
        return CreateTopic(topic=topic, trans_id=self.next_trans_id())

    def delete_topic_op(self, topic: str) -> DeleteTopic:
        return DeleteTopic(topic=topic, trans_id=self.next_trans_id())

    def list_topics_op(self) -> ListTopics:
        return ListTopics(trans_id=self.next_trans_id())

    def subscribe_op(
        self, topic: str, *, duration: int, subscriber: Endpoint | str | None = None
    ) -> Subscribe:
        who = self.attachment.endpoint if subscriber is None else as_endpoint(subscriber)
        return Subscribe(
            subscriber=who, topic=topic, trans_id=self.next_trans_id(), duration=duration
        )

    def cancel_op(self, topic: str, *, subscriber: Endpoint | str | None = None) -> Cancel:
        who = None if subscriber is None else as_endpoint(subscriber)
        return Cancel(topic=topic, trans_id=self.next_trans_id(), subscriber=who)

    async def send(self, op: Operation) -> None:
        """Send an operation without waiting for its answer."""
        self._start()
        await self.attachment.send(self.service, XmlContent(op.to_xml()))

    async def request(
        self,
        op: Operation,
        *,
        timeout: float = DEFAULT_ANSWER_SECONDS,  # noqa: ASYNC109
    ) -> ServiceMessage:
        """Send ``op`` and return the service's answer carrying its transID (a
        ``reply``, or the ``topiclist`` of listtopics). TimeoutError when none comes
        (a forwarded subscribe is answered by the redistributing server)."""
        self._start()
        trans_id = op.trans_id
        if trans_id is None:
            raise ValueError("request() needs an operation with a transID")
        waiter: asyncio.Future[ServiceMessage] = asyncio.get_running_loop().create_future()
        self._waiting[trans_id] = waiter
        try:
            await self.attachment.send(self.service, XmlContent(op.to_xml()))
            async with asyncio.timeout(timeout):
                return await waiter
        finally:
            self._waiting.pop(trans_id, None)

    async def create_topic(self, topic: str) -> Reply | TopicList | Cancel:
        return await self.request(self.create_topic_op(topic))

    async def delete_topic(self, topic: str) -> Reply | TopicList | Cancel:
        return await self.request(self.delete_topic_op(topic))

    async def list_topics(self) -> tuple[str, ...]:
        """The domain's topics; ApexClientError carrying the reply when refused."""
        answer = await self.request(self.list_topics_op())
        if isinstance(answer, TopicList):
            return answer.topics
        code = answer.code if isinstance(answer, Reply) else 550
        raise ApexClientError(code, "listtopics refused")

    async def subscribe(
        self, topic: str, *, duration: int, subscriber: Endpoint | str | None = None
    ) -> Reply | TopicList | Cancel:
        return await self.request(
            self.subscribe_op(topic, duration=duration, subscriber=subscriber)
        )

    async def cancel(
        self, topic: str, *, subscriber: Endpoint | str | None = None
    ) -> Reply | TopicList | Cancel:
        return await self.request(self.cancel_op(topic, subscriber=subscriber))

    def keep_subscribed(
        self, topic: str, *, duration: int, subscriber: Endpoint | str | None = None
    ) -> asyncio.Task[None]:
        """Subscribe now and again at every half of ``duration`` (a repeated subscribe
        replaces the lease, section 4.5 step 5.2); cancel the task to stop renewing."""

        async def renew() -> None:
            while True:
                await self.send(self.subscribe_op(topic, duration=duration, subscriber=subscriber))
                await asyncio.sleep(max(duration / 2, 0.5))

        task = asyncio.create_task(renew(), name=f"pubsub-lease-{topic}")
        self._leases.add(task)
        task.add_done_callback(self._leases.discard)
        return task

    async def publish(
        self,
        topic: str,
        content: Content,
        *,
        content_type: str = "application/octet-stream",
        options: Iterable[Option] = (),
        status_request: bool = False,
    ) -> SendResult:
        """Send ``content`` to ``apex=pubsub/TOPIC@domain`` (section 3)."""
        return await self.attachment.send(
            topic_endpoint(topic, self.domain),
            content,
            content_type=content_type,
            options=options,
            status_request=status_request,
        )

    async def aclose(self) -> None:
        """Stop renewing and reading."""
        tasks = [*self._leases, *([self._reader] if self._reader else [])]
        self._reader = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, ApexClientError):
                await task


__all__ = ["PubsubClient", "publication_topic", "pubsub_message"]
