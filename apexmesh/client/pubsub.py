"""Pubsub helpers of the endpoint SDK (draft-schwartz-apex-pubsub-02).

::

    pubsub = PubsubClient(fred)                       # fred: an attached Attachment
    await pubsub.create_topic("music.jazz")           # Reply 250, or PubsubError(code)
    lease = pubsub.keep_subscribed("music.jazz", duration=60)    # renewed at half-life
    await pubsub.publish("music.jazz", b"hello")      # confirmed: PubsubError on 537/550
    topic, received = await pubsub.next_publication()
    await pubsub.cancel("music.jazz"); lease.cancel()

The operation helpers (``create_topic``, ``delete_topic``, ``subscribe``, ``cancel``,
``list_topics``) return the service's answer when it succeeded and raise
:class:`~apexmesh.client.errors.PubsubError` carrying its code otherwise; ``request``
returns whatever the service answered. ``publish`` asks for a statusRequest report from
the topic endpoint by default and raises PubsubError unless it is 250 (section 4.7.1:
550 no such topic, 537 no ``core:data``); ``confirm=False`` sends and returns at once.

Operations travel inline to ``apex=pubsub@DOMAIN`` (section 4.1). Everything the
attachment receives is sorted by a reader task: elements from ``apex=pubsub@D``
(``reply``, ``topiclist``, ``cancel``) go to :meth:`PubsubClient.next_message` (or to the
:meth:`PubsubClient.request` awaiting that transID), data from ``apex=pubsub/TOPIC@D`` to
:meth:`PubsubClient.next_publication`, anything else to :meth:`PubsubClient.next_other`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from typing import TypeVar

from apexmesh.aio.tasks import stop_tasks
from apexmesh.apex import _dtd
from apexmesh.apex.access import AccessEntry
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import Option
from apexmesh.client.access import AccessClient
from apexmesh.client.attachment import Attachment
from apexmesh.client.errors import ApexClientError, PubsubError
from apexmesh.client.outgoing import Content, XmlContent, as_endpoint
from apexmesh.client.received import ReceivedData
from apexmesh.client.reports import SendResult
from apexmesh.pubsub._fields import pubsub_tag
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
from apexmesh.pubsub.inre import INRE, subscription_ids_of
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.pubsub.subscription_elements import (
    ContentCancel,
    ContentSubscribe,
    SelectorSpec,
    SubscriptionReply,
    content_cancel_from,
    subscription_reply_from,
)
from apexmesh.pubsub.topic_access import Audience, TopicAccess, Who, tokens_of
from apexmesh.pubsub.topic_description import TopicDescription, TopicSettings

#: Who may subscribe to and publish on a topic whose createtopic states nothing (the
#: service's default, apexmesh/pubsub/topic_access.py).
DEFAULT_SUBSCRIBERS = Audience.DOMAIN
DEFAULT_PUBLISHERS = Audience.OWNER

_T = TypeVar("_T")

#: Seconds :meth:`PubsubClient.request` waits for the service's answer by default.
DEFAULT_ANSWER_SECONDS = 10.0
#: Seconds of a subscription's lease when the caller names none (an hour: long enough
#: for a program that subscribes once, short enough that a forgotten one ends).
DEFAULT_DURATION = 3600


#: What an endpoint receives from the service: draft-schwartz's elements, and
#: draft-wyman's reply carrying a subscription id and its cancel naming one.
AnyServiceMessage = ServiceMessage | SubscriptionReply | ContentCancel


def pubsub_message(received: ReceivedData) -> AnyServiceMessage | None:
    """The element carried by data from an ``apex=pubsub`` service, else None. Raises
    ApexError for a malformed one."""
    if not is_service(received.originator):
        return None
    try:
        return parse_service_message(received.content)
    except ApexError:
        root = _dtd.parse_root(received.content)
        tag = pubsub_tag(root)
        if tag == "reply":
            return subscription_reply_from(root)
        if tag == "cancel":
            return content_cancel_from(root)
        raise


def subscription_ids(received: ReceivedData, endpoint: Endpoint) -> tuple[int, ...]:
    """The ids of ``endpoint``'s subscriptions a publication matched: its InRe option
    (draft-wyman 5.10.1); empty for a plain topic subscription."""
    for option in received.recipient_options.get(endpoint, ()):
        if option.internal == INRE:
            return subscription_ids_of(option)
    return ()


def publication_topic(received: ReceivedData) -> str | None:
    """The topic of data forwarded by ``apex=pubsub/TOPIC@D`` (section 4.7.1), else None."""
    return topic_of(received.originator)


def _trans_id(message: AnyServiceMessage) -> int | None:
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
        self._messages: asyncio.Queue[AnyServiceMessage | None] = asyncio.Queue()
        self._publications: asyncio.Queue[tuple[str, ReceivedData] | None] = asyncio.Queue()
        self._others: asyncio.Queue[ReceivedData | None] = asyncio.Queue()
        #: Why the reader stopped (the attachment ended): what the queues raise once empty.
        self._ended: ApexClientError | None = None
        self._waiting: dict[int, asyncio.Future[AnyServiceMessage]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._leases: set[asyncio.Task[None]] = set()
        #: RFC 3341 operations against ``apex=access@domain`` over this attachment (its
        #: answers are taken by this client's reader): who may use this client's topics.
        self.access = AccessClient(
            attachment,
            domain=self.domain,
            next_trans_id=self.next_trans_id,
            before_send=self._start,
        )

    def next_trans_id(self) -> int:
        return next(self._ids)

    # ------------------------------------------------------------------ reading

    def _start(self) -> None:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read(), name="pubsub-client-reader")

    async def _read(self) -> None:
        try:
            await self._read_all()
        except ApexClientError as exc:
            # The attachment ended: every reader waiting (or coming) is told, once the
            # queue in front of it is empty (None marks the end in each queue).
            self._ended = exc
            for queue in (self._messages, self._publications, self._others):
                queue.put_nowait(None)

    async def _take(self, queue: asyncio.Queue[_T | None]) -> _T:
        item = await queue.get()
        if item is None:
            queue.put_nowait(None)  # for the next reader too
            assert self._ended is not None  # noqa: S101 - None is put only then
            raise self._ended
        return item

    async def _read_all(self) -> None:
        while True:
            received = await self.attachment.receive()
            if self.access.feed(received):
                continue
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

    async def next_message(self) -> AnyServiceMessage:
        """The next reply, topiclist or cancel nobody awaited with :meth:`request`."""
        self._start()
        return await self._take(self._messages)

    async def next_publication(self) -> tuple[str, ReceivedData]:
        """The next data a topic forwarded to this endpoint (section 4.7.1): (topic,
        data), ``data.content`` the publication's content, ``data.originator`` the
        topic endpoint ``apex=pubsub/TOPIC@D`` (the publisher is not named: the draft
        forwards as the topic). Waits until one comes (wrap it in ``asyncio.timeout``);
        raises AttachmentTerminatedError once the attachment ended and nothing is left
        (only the reader's queue holds what came: subscribe first, then read)."""
        self._start()
        return await self._take(self._publications)

    async def next_match(self) -> tuple[str, tuple[int, ...], ReceivedData]:
        """The next publication with the ids of this endpoint's subscriptions it
        matched (draft-wyman InRe): (topic, ids, data)."""
        topic, received = await self.next_publication()
        return topic, subscription_ids(received, self.attachment.endpoint), received

    async def next_other(self) -> ReceivedData:
        self._start()
        return await self._take(self._others)

    # ------------------------------------------------------------------ operations

    def create_topic_op(
        self,
        topic: str,
        *,
        robust: RobustSettings | None = None,
        subscribers: Who | None = None,
        publishers: Who | None = None,
    ) -> CreateTopic:
        """createtopic; ``robust``: a robust topic with these settings (docs/robust.md);
        ``subscribers``, ``publishers``: its access statement (:meth:`create_topic`)."""
        access = None
        if subscribers is not None or publishers is not None:
            access = TopicAccess.stating(
                self.domain,
                subscribers=DEFAULT_SUBSCRIBERS if subscribers is None else subscribers,
                publishers=DEFAULT_PUBLISHERS if publishers is None else publishers,
            )
        description = TopicDescription()
        if robust is not None:
            description = TopicDescription(settings=TopicSettings(robust=robust))
        return CreateTopic(
            topic=topic, trans_id=self.next_trans_id(), description=description, access=access
        )

    def delete_topic_op(self, topic: str) -> DeleteTopic:
        return DeleteTopic(topic=topic, trans_id=self.next_trans_id())

    def list_topics_op(self) -> ListTopics:
        return ListTopics(trans_id=self.next_trans_id())

    def subscribe_op(
        self,
        topic: str,
        *,
        duration: int = DEFAULT_DURATION,
        subscriber: Endpoint | str | None = None,
    ) -> Subscribe:
        who = self.attachment.endpoint if subscriber is None else as_endpoint(subscriber)
        return Subscribe(
            subscriber=who, topic=topic, trans_id=self.next_trans_id(), duration=duration
        )

    def cancel_op(self, topic: str, *, subscriber: Endpoint | str | None = None) -> Cancel:
        who = None if subscriber is None else as_endpoint(subscriber)
        return Cancel(topic=topic, trans_id=self.next_trans_id(), subscriber=who)

    async def send(self, op: Operation | ContentSubscribe | ContentCancel) -> None:
        """Send an operation without waiting for its answer."""
        self._start()
        await self.attachment.send(self.service, XmlContent(op.to_xml()))

    async def request(
        self,
        op: Operation | ContentSubscribe | ContentCancel,
        *,
        timeout: float = DEFAULT_ANSWER_SECONDS,  # noqa: ASYNC109
    ) -> AnyServiceMessage:
        """Send ``op`` and return the service's answer carrying its transID (a
        ``reply``, or the ``topiclist`` of listtopics). TimeoutError when none comes
        (a forwarded subscribe is answered by the redistributing server)."""
        self._start()
        trans_id = op.trans_id
        if trans_id is None:
            raise ValueError("request() needs an operation with a transID")
        waiter: asyncio.Future[AnyServiceMessage] = asyncio.get_running_loop().create_future()
        self._waiting[trans_id] = waiter
        try:
            await self.attachment.send(self.service, XmlContent(op.to_xml()))
            async with asyncio.timeout(timeout):
                return await waiter
        finally:
            self._waiting.pop(trans_id, None)

    async def _confirmed(self, op: Operation | ContentCancel, topic: str | None) -> Reply:
        """``request`` for an operation answered with a ``reply``: the reply when it says
        250, PubsubError with its code otherwise."""
        answer = await self.request(op)
        if isinstance(answer, Reply) and answer.code == 250:
            return answer
        if isinstance(answer, Reply):
            raise PubsubError(answer.code, answer.text, trans_id=answer.trans_id, topic=topic)
        raise PubsubError(
            550, f"unexpected {type(answer).__name__.lower()}", trans_id=op.trans_id, topic=topic
        )

    async def create_topic(
        self,
        topic: str,
        *,
        robust: RobustSettings | None = None,
        subscribers: Who | None = None,
        publishers: Who | None = None,
    ) -> Reply:
        """Section 4.2: the 250 reply; PubsubError when refused (537 not allowed to
        create topics, 553 the topic exists, is reserved or a name/actor is malformed,
        504 schemas not supported). ``robust``: create it robust (XEP-0040,
        docs/robust.md) with these settings.

        Who may use it besides its creator (who always may, and may grant): anyone of
        the domain subscribes, only the creator publishes, unless ``subscribers`` or
        ``publishers`` say otherwise: an :class:`Audience` (``OWNER``, ``DOMAIN``,
        ``ANYONE``), an actor pattern (``"barney@example.com"``, ``"*@rubble.com"``) or
        several. The 250 comes once the topic's access entries are written."""
        op = self.create_topic_op(
            topic, robust=robust, subscribers=subscribers, publishers=publishers
        )
        return await self._confirmed(op, topic)

    async def delete_topic(self, topic: str) -> Reply:
        """Section 4.3: the 250 reply; PubsubError (537, 553 ...) when refused."""
        return await self._confirmed(self.delete_topic_op(topic), topic)

    async def list_topics(self) -> tuple[str, ...]:
        """Section 4.4: the domain's topics; PubsubError carrying the code when refused."""
        op = self.list_topics_op()
        answer = await self.request(op)
        if isinstance(answer, TopicList):
            return answer.topics
        code = answer.code if isinstance(answer, Reply) else 550
        text = answer.text if isinstance(answer, Reply) else "listtopics refused"
        raise PubsubError(code, text, trans_id=op.trans_id)

    async def subscribe(
        self,
        topic: str,
        *,
        duration: int = DEFAULT_DURATION,
        subscriber: Endpoint | str | None = None,
    ) -> Reply:
        """Section 4.5: a lease of ``duration`` seconds (an hour by default; renew it by
        subscribing again, or use :meth:`keep_subscribed`); the 250 reply. PubsubError
        when refused: 537 not allowed to subscribe, 553 no such topic or a duration that
        is not positive. Publications then come from :meth:`next_publication`."""
        return await self._confirmed(
            self.subscribe_op(topic, duration=duration, subscriber=subscriber), topic
        )

    def select_op(
        self,
        topic: str,
        *,
        duration: int = DEFAULT_DURATION,
        selector: str | None = None,
        selector_class: str = "JMS",
        cached: bool = False,
        subscriber: Endpoint | str | None = None,
    ) -> ContentSubscribe:
        """A draft-wyman subscribe (5.8): with a selector of ``selector_class`` (JMS or
        RFC-2254) and/or ``cached``."""
        who = self.attachment.endpoint if subscriber is None else as_endpoint(subscriber)
        spec = (
            None if selector is None else SelectorSpec(selector_class=selector_class, text=selector)
        )
        return ContentSubscribe(
            topic=topic,
            subscriber=who,
            duration=duration,
            trans_id=self.next_trans_id(),
            cached=cached,
            selector=spec,
        )

    async def select(
        self,
        topic: str,
        *,
        duration: int = DEFAULT_DURATION,
        selector: str | None = None,
        selector_class: str = "JMS",
        cached: bool = False,
        subscriber: Endpoint | str | None = None,
    ) -> int:
        """Draft-wyman 5.8: subscribe with a selector (and ``cached``: the service then
        replays the cached messages it selects); returns the subscription id.
        PubsubError with the code when refused (537, 553, 566 class, 567 selector)."""
        op = self.select_op(
            topic,
            duration=duration,
            selector=selector,
            selector_class=selector_class,
            cached=cached,
            subscriber=subscriber,
        )
        answer = await self.request(op)
        if isinstance(answer, SubscriptionReply) and answer.code == 250:
            if answer.subscription_id is None:
                raise PubsubError(550, "reply without subscription-id", trans_id=op.trans_id)
            return answer.subscription_id
        code = answer.code if isinstance(answer, Reply | SubscriptionReply) else 550
        text = answer.text if isinstance(answer, Reply | SubscriptionReply) else "refused"
        raise PubsubError(code, text, trans_id=op.trans_id, topic=topic)

    async def unselect(
        self,
        *,
        topic: str | None = None,
        subscription_id: int | None = None,
        subscriber: Endpoint | str | None = None,
    ) -> Reply:
        """Draft-wyman 5.8.2's cancel: one subscription by id (and topic), every
        subscription to ``topic``, or with neither every subscription of the subject.
        PubsubError 568 when none matched."""
        op = ContentCancel(
            trans_id=self.next_trans_id(),
            topic=topic,
            subscription_id=subscription_id,
            subscriber=None if subscriber is None else as_endpoint(subscriber),
        )
        return await self._confirmed(op, topic)

    async def cancel(self, topic: str, *, subscriber: Endpoint | str | None = None) -> Reply:
        """Section 4.6: the 250 reply; PubsubError (537, 553 no such topic) when refused."""
        return await self._confirmed(self.cancel_op(topic, subscriber=subscriber), topic)

    # ------------------------------------------------------------------ topic access

    def topic_owner(self, topic: str) -> str:
        """The owner of a topic's access entries, ``apex=pubsub/TOPIC@domain``."""
        return str(topic_endpoint(topic, self.domain))

    async def grant(self, topic: str, actor: str, *roles: str) -> frozenset[str]:
        """Let ``actor`` (an endpoint or pattern: ``*@example.com``, ``fred/*@d``) do
        ``roles`` on ``topic``: ``"subscribe"``, ``"publish"`` or tokens
        (``"core:data"``); returns the actions of its entry. Only who holds
        ``access:set`` on the topic (its creator) may: AccessRequestError 537 otherwise,
        553 for a malformed actor or an unknown token."""
        if not roles:
            raise ValueError("grant needs a role: 'subscribe', 'publish' or a token")
        return await self.access.grant(self.topic_owner(topic), actor, tokens_of(roles))

    async def deny(self, topic: str, actor: str, *roles: str) -> frozenset[str]:
        """Take ``roles`` away from ``actor`` on ``topic``; none named: ``actor`` may do
        nothing on it (an entry without actions, which also overrides broader grants).
        AccessRequestError as :meth:`grant`."""
        return await self.access.deny(self.topic_owner(topic), actor, tokens_of(roles))

    async def revoke(self, topic: str, actor: str) -> bool:
        """Remove ``actor``'s entry on ``topic`` (broader ones apply again); False when
        it had none. AccessRequestError as :meth:`grant`."""
        return await self.access.remove(self.topic_owner(topic), actor)

    async def access_entries(self, topic: str) -> tuple[AccessEntry, ...]:
        """The topic's access entries (its creator's first among them); who may read
        them: who holds ``access:get`` on it, AccessRequestError 537 otherwise."""
        return await self.access.entries(self.topic_owner(topic))

    def keep_subscribed(
        self,
        topic: str,
        *,
        duration: int = DEFAULT_DURATION,
        subscriber: Endpoint | str | None = None,
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
        confirm: bool = True,
        status_request: bool = False,
        timeout: float = DEFAULT_ANSWER_SECONDS,  # noqa: ASYNC109
    ) -> SendResult:
        """Send ``content`` to ``apex=pubsub/TOPIC@domain`` (section 3).

        With ``confirm`` (the default) the data carries a statusRequest and this waits for
        the report of the topic endpoint (section 4.7.1's answer to the relay): 250
        returns, anything else raises PubsubError with its code (550 no such topic, 537
        not allowed to publish, 421 service unavailable); TimeoutError when no report
        comes within ``timeout`` seconds. With ``confirm=False`` the data is sent and the
        call returns once the relay took it (fire-and-forget; ``status_request`` still
        asks for a report the caller may await on the result)."""
        endpoint = topic_endpoint(topic, self.domain)
        result = await self.attachment.send(
            endpoint,
            content,
            content_type=content_type,
            options=options,
            status_request=status_request or confirm,
        )
        if not confirm:
            return result
        report = (await result.reports(1, timeout=timeout))[0]
        for destination in report.destinations:
            if destination.identity == endpoint and destination.reply.code != 250:
                reply = destination.reply
                raise PubsubError(reply.code, reply.text or "publication refused", topic=topic)
        return result

    async def aclose(self) -> None:
        """Stop renewing and reading."""
        tasks = [*self._leases, *([self._reader] if self._reader else [])]
        self._reader = None
        await stop_tasks(tasks)  # cancelled again if one swallowed it (bounded)


__all__ = [
    "DEFAULT_DURATION",
    "DEFAULT_PUBLISHERS",
    "DEFAULT_SUBSCRIBERS",
    "AnyServiceMessage",
    "PubsubClient",
    "publication_topic",
    "pubsub_message",
    "subscription_ids",
]
