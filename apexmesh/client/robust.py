"""Robust pubsub in the endpoint SDK: the subscriber stub over an attachment (XEP-0040
2.1, docs/robust.md).

::

    robust = RobustClient(attachment)                   # the attachment's only reader
    await robust.follow("data.topics")                   # settings from the topic
    await robust.subscribe("data.topics", duration=3600)
    publication = await robust.next()                    # in order, exactly once
    seq = await robust.publish("data.topics", b"...", PublishHeader(type=UPDATE))
    saved = robust.position("data.topics")               # to resume after a restart

Beside the stub: :meth:`RobustClient.source_query` (XEP 4), :meth:`RobustClient.snapshot`
(3.1), :meth:`RobustClient.permissions` and :meth:`RobustClient.permission_table` (5.1),
:meth:`RobustClient.keep_subscribed` (a plain or content subscription renewed at half its
duration), and :class:`~apexmesh.pubsub.robust.item_cache.ItemCache` for the last value
per item (docs/sdk.md "Robust topics").

A :class:`RobustClient` reads everything its attachment receives (it must be the only
reader, so it does the pubsub operations it needs itself): data carrying a ``robust``
per-recipient option goes to the stub of its topic (:class:`~apexmesh.pubsub.robust.
stub.SubscriberStub`), ``gapreply`` and error ``reply`` answers of the stub's gap
requests go back to it, ``published`` answers resolve :meth:`publish`, anything else is
:meth:`next_other`'s. One timer task calls the stubs' ``tick`` at their deadline. The
stub's "delayed", "repair refused" and "resynchronised" are passed to ``on_event``.

The stub survives a reattachment: :meth:`reattach` moves the reader to a new attachment
(the relay pod died, the application attached again through another one) and the first
delivery there shows the gap, which the stub repairs. Given ``reattach`` (a callable
making a new attachment of the endpoint), the client does that by itself when its
attachment ends, trying again until one is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable

from apexmesh.aio.tasks import stop_tasks
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import Option
from apexmesh.client.attachment import Attachment
from apexmesh.client.errors import ApexClientError
from apexmesh.client.outgoing import Content, XmlContent
from apexmesh.client.pubsub import DEFAULT_DURATION, pubsub_message
from apexmesh.client.received import ReceivedData
from apexmesh.client.reports import SendResult
from apexmesh.client.robust_requests import OPERATIONS_BLOCK, RobustRequests
from apexmesh.pubsub.elements import (
    Cancel,
    Subscribe,
    service_endpoint,
    topic_endpoint,
)
from apexmesh.pubsub.elements import topic_of as pubsub_topic_of
from apexmesh.pubsub.robust.elements import (
    OPTION_NAME,
    PublishHeader,
    RobustReader,
    publish_option,
)
from apexmesh.pubsub.robust.operations import (
    GapReply,
    PermissionTableAnswer,
    Published,
    SourceInfo,
    parse_answer,
)
from apexmesh.pubsub.robust.position import LinkPosition, Resume
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.stub import (
    Deliver,
    Publication,
    SendGap,
    StubEvent,
    SubscriberStub,
)
from apexmesh.pubsub.subscription_elements import SubscriptionReply

_log = logging.getLogger(__name__)

#: transIDs of one topic's stub are drawn from their own block, so that an answer names
#: its topic's stub (a block is ten million requests wide; 200 topics per client).
TRANS_BLOCK = 10_000_000

EventCallback = Callable[[str, StubEvent], None]
#: ``reattach()``: a new attachment of the same endpoint (through another relay pod when
#: the old one died); raises while none can be made (tried again after a pause).
Reattach = Callable[[], Awaitable[Attachment]]
#: Pause between attempts to attach again, seconds.
REATTACH_PAUSE = 0.2
#: How long a stub waits for an overtaken delivery before asking for it (ms): a topic's
#: fan-outs travel through the relay pods side by side (docs/robust.md "Fan-outs in
#: flight"), so a delivery may arrive a little after the next one. At most a quarter of
#: the topic's heartbeat interval, so that a loss a heartbeat reveals is still asked for
#: within two intervals (XEP 2.5).
REORDER_MS = 250


class RobustClient(RobustRequests):
    """Robust subscriptions and publications of one attachment."""

    def __init__(
        self,
        attachment: Attachment,
        *,
        domain: str | None = None,
        service: Endpoint | None = None,
        topic_of: Callable[[Endpoint], str | None] = pubsub_topic_of,
        on_event: EventCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
        reattach: Reattach | None = None,
    ) -> None:
        super().__init__()
        self.attachment = attachment
        #: Attaching again by itself when the attachment ends (None: the application
        #: calls :meth:`reattach`).
        self._reattach = reattach
        #: Attachments made again after one ended.
        self.reattached = 0
        self.domain = domain or attachment.endpoint.domain
        #: Where gap requests go (``apex=pubsub@DOMAIN``).
        self.service = service or service_endpoint(self.domain)
        self._topic_of = topic_of
        self._on_event = on_event
        self._clock = clock
        self._stubs: dict[str, SubscriberStub] = {}
        #: Reads each delivery's robust option, remembering the shapes seen (the parser
        #: cost more per delivery than the rest of the client's reading).
        self._reader = RobustReader()
        #: The topic of each stub's block of transIDs, in the order they were given.
        self._blocks: list[str] = []
        self._publications: asyncio.Queue[Publication] = asyncio.Queue()
        self._others: asyncio.Queue[ReceivedData] = asyncio.Queue()
        self._published: dict[int, asyncio.Future[int]] = {}
        self._publish_ids = itertools.count(1)
        #: Positions stubs were resumed from, sent with their next subscribe.
        self._resuming: dict[str, LinkPosition] = {}
        self._wake = asyncio.Event()
        #: When the timer task wakes next (ms): a stub with an earlier deadline wakes it.
        self._timer_at = 0
        self._tasks: list[asyncio.Task[None]] = []

    def _now(self) -> int:
        return int(self._clock() * 1000)

    # ------------------------------------------------------------------ application API

    async def follow(
        self,
        topic: str,
        *,
        resolution: Resolution | None = None,
        heartbeat_ms: int | None = None,
        fresh: bool = True,
        repair_timeout_ms: int | None = None,
        reorder_ms: int | None = None,
        resume: LinkPosition | None = None,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> SubscriberStub:
        """Run a stub for ``topic`` (then :meth:`subscribe`). The sequence size and
        heartbeat interval are the topic's (createtopic's ``seqbits`` and
        ``heartbeatms``), learnt with a source query (XEP 4: "subscribers must inquire
        about such information") unless both are given. ``resume``: a position saved
        from :meth:`position` before a restart; the stub continues from it and the next
        :meth:`subscribe` hands it to the service. ``reorder_ms``: how long a hole may
        wait for a delivery overtaken on the way before it is asked for (0: at once;
        by default :data:`REORDER_MS`, at most a quarter of the heartbeat interval).
        PubsubError with the service's code when the source query is refused (553 not
        a robust topic, 537 not allowed to subscribe); TimeoutError without an
        answer."""
        if resolution is None or heartbeat_ms is None:
            settings = (await self.source_query(topic, timeout=timeout)).settings
            resolution = resolution or settings.resolution
            heartbeat_ms = heartbeat_ms or settings.heartbeat_ms
        if resume is not None and resume.topic != topic:
            raise ValueError(f"a position of {resume.topic}, not of {topic}")
        if reorder_ms is None:
            reorder_ms = min(REORDER_MS, heartbeat_ms // 4)
        if len(self._blocks) * TRANS_BLOCK + TRANS_BLOCK >= OPERATIONS_BLOCK:
            raise ValueError("too many robust topics on one client")
        stub = SubscriberStub(
            topic,
            resolution=resolution,
            heartbeat_ms=heartbeat_ms,
            now_ms=self._now(),
            fresh=fresh,
            repair_timeout_ms=repair_timeout_ms,
            first_trans_id=len(self._blocks) * TRANS_BLOCK + 1,
            reorder_ms=reorder_ms,
            resume=resume,
        )
        if resume is not None:
            self._resuming[topic] = resume
        self._stubs[topic] = stub
        self._blocks.append(topic)
        self._start()
        self._wake.set()
        return stub

    def stub(self, topic: str) -> SubscriberStub:
        return self._stubs[topic]

    def position(self, topic: str) -> LinkPosition | None:
        """What the application has received of ``topic`` (None before its link is
        known): store :meth:`LinkPosition.dumps` with the application's own state after
        handling each publication, and give it back as ``follow(resume=...)`` after a
        restart. The SDK persists nothing by itself."""
        return self._stubs[topic].position()

    async def next(self) -> Publication:
        """The next publication of a followed topic, in order, exactly once."""
        self._start()
        return await self._publications.get()

    async def next_other(self) -> ReceivedData:
        """Anything the attachment received that is not robust pubsub's."""
        self._start()
        return await self._others.get()

    async def publish(
        self,
        topic: str,
        content: Content,
        header: PublishHeader | None = None,
        *,
        content_type: str = "application/octet-stream",
        item_header: str = "item",
        recipient: Endpoint | None = None,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> int:
        """Publish to ``topic`` with ``header`` and return the source seq the service
        gave it (its ``published`` answer); TimeoutError when none comes."""
        self._start()
        trans_id = next(self._publish_ids)
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._published[trans_id] = waiter
        try:
            await self.attachment.send(
                recipient or topic_endpoint(topic, self.domain),
                content,
                content_type=content_type,
                options=(publish_option(header or PublishHeader(), trans_id, item_header),),
            )
            async with asyncio.timeout(timeout):
                return await waiter
        finally:
            self._published.pop(trans_id, None)

    async def subscribe(
        self,
        topic: str,
        *,
        duration: int = DEFAULT_DURATION,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> Reply:
        """Subscribe this endpoint to ``topic`` at ``apex=pubsub@domain`` (this client is
        the attachment's only reader, so it sends the operation itself) for
        ``duration`` seconds (:meth:`keep_subscribed` renews it): the 250 reply,
        PubsubError with the code otherwise. A stub followed with ``resume`` sends its
        position right after (``resume``, XEP 2.4): the service keeps the link when it
        is in that epoch still, or restarts it above, and the stub repairs what it
        missed either way."""
        reply = await self._confirmed(
            Subscribe(
                subscriber=self.attachment.endpoint,
                topic=topic,
                trans_id=next(self._operation_ids),
                duration=duration,
            ),
            topic,
            timeout,
        )
        position = self._resuming.pop(topic, None)
        if position is not None:
            await self._confirmed(Resume.of(position, next(self._operation_ids)), topic, timeout)
        return reply

    async def cancel(self, topic: str, *, timeout: float = 10.0) -> Reply:  # noqa: ASYNC109
        """Cancel this endpoint's subscription to ``topic``."""
        op = Cancel(topic=topic, trans_id=next(self._operation_ids))
        return await self._confirmed(op, topic, timeout)

    async def reattach(self, attachment: Attachment) -> None:
        """Read from ``attachment`` from now on (the stubs keep their state)."""
        await self._stop()
        self.attachment = attachment
        self._start()

    async def aclose(self) -> None:
        """Stop renewing and reading."""
        await self._stop_renewing()
        await self._stop()

    # ------------------------------------------------------------------ tasks

    def _start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._read(), name="robust-reader"),
                asyncio.create_task(self._timer(), name="robust-timer"),
            ]

    async def _stop(self) -> None:
        """Cancel the reader and the timer, again if one swallowed it, within bounds
        (:func:`apexmesh.aio.tasks.stop_tasks`). On Python 3.11 a cancel that meets an
        ``asyncio.wait_for`` as it finishes can be lost; a bare await of the task after
        one cancel was the likely cause of a test teardown that hung once, with the
        reader attached again and the timer of another client still waiting. The
        project's code now bounds its awaits with :func:`~apexmesh.aio.tasks.within`
        instead, but a library may still lose one."""
        tasks, self._tasks = self._tasks, []
        await stop_tasks(tasks)

    async def _read(self) -> None:
        while True:
            with contextlib.suppress(ApexClientError):
                while True:
                    received = await self.attachment.receive()
                    await self._dispatch(received)
            if self._reattach is None:
                return
            # The attachment ended (its relay pod died, the session broke): attach
            # again; the stubs keep their state, and the first delivery or the overdue
            # heartbeats there show what was lost meanwhile, which they repair.
            self.attachment = await self._attach_again(self._reattach)
            self.reattached += 1

    @staticmethod
    async def _attach_again(reattach: Reattach) -> Attachment:
        while True:
            try:
                return await reattach()
            except (ApexClientError, OSError) as exc:
                _log.info("robust client: attaching again failed (%s); retrying", exc)
                await asyncio.sleep(REATTACH_PAUSE)

    async def _timer(self) -> None:
        while True:
            deadlines = [stub.next_deadline() for stub in self._stubs.values()]
            self._wake.clear()
            now = self._now()
            self._timer_at = min(deadlines) if deadlines else now + 3_600_000
            delay = max(0.0, (self._timer_at - now) / 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            now = self._now()
            for topic, stub in list(self._stubs.items()):
                if stub.next_deadline() <= now:
                    await self._carry_out(topic, stub.tick(now))

    # ------------------------------------------------------------------ dispatching

    def _robust_option(self, received: ReceivedData) -> Option | None:
        for recipient in received.data.recipients:
            if recipient.identity == self.attachment.endpoint:
                for option in recipient.options:
                    if option.internal == OPTION_NAME:
                        return option
        return None

    async def _dispatch(self, received: ReceivedData) -> None:
        option = self._robust_option(received)
        if (
            option is not None
            and self._answers.snapshots
            and self._snapshot_image(option, received)
        ):
            return
        if option is not None:
            topic = self._topic_of(received.originator)
            stub = None if topic is None else self._stubs.get(topic)
            if stub is not None and topic is not None:
                try:
                    info = self._reader.read(option, stub.resolution)
                except ApexError:
                    self._others.put_nowait(received)
                    return
                await self._carry_out(topic, stub.receive(info, received.content, self._now()))
                if stub.next_deadline() < self._timer_at:
                    self._wake.set()  # a hole now waits out the reorder tolerance
                return
        if received.is_xml and await self._answer(received):
            return
        self._others.put_nowait(received)

    def _snapshot_image(self, option: Option, received: ReceivedData) -> bool:
        """A snapshot's image (its option names the snapshot's transID as ``gap``)."""
        try:
            info = self._reader.read(option, Resolution.BITS64)
        except ApexError:
            return False
        collected = None if info.gap is None else self._answers.snapshots.get(info.gap)
        if collected is None:
            return False
        collected.image(info, received.content)
        return True

    async def _answer(self, received: ReceivedData) -> bool:
        """An answer to this client: a gapreply, sourceinfo, permissiontable, published
        or reply of ours; True when it was one."""
        try:
            answer = parse_answer(received.content)
        except ApexError:
            answer = None
        if isinstance(answer, GapReply) and answer.trans_id in self._answers.snapshots:
            self._answers.snapshots[answer.trans_id].counted(answer.count)
            return True
        if isinstance(answer, SourceInfo | PermissionTableAnswer):
            return self._answers.settle(answer.trans_id, answer)
        if isinstance(answer, GapReply):
            asker = self._asker(answer.trans_id)
            if asker is None:
                return False
            topic, stub = asker
            await self._carry_out(topic, stub.gap_answered(answer, self._now()))
            return True
        if isinstance(answer, Published):
            waiter = self._published.get(answer.trans_id)
            if waiter is not None and not waiter.done():
                waiter.set_result(answer.source_seq)
            return True  # one nobody waits for any more (a repeat, a timeout): dropped
        try:
            message = pubsub_message(received)
        except ApexError:
            return False
        if not isinstance(message, Reply | SubscriptionReply) or message.trans_id is None:
            return False
        if self._answers.settle(message.trans_id, message):
            return True
        if not isinstance(message, Reply):
            return False
        asker = self._asker(message.trans_id)
        if asker is None:
            return False
        topic, stub = asker
        if message.code != 250:
            events = stub.gap_refused(message.trans_id, message.code, self._now())
            await self._carry_out(topic, events)
        return True

    def _asker(self, trans_id: int) -> tuple[str, SubscriberStub] | None:
        """The topic and stub whose gap request ``trans_id`` is (its block of transIDs
        says which stub; the stub says whether it still waits for it)."""
        block = (trans_id - 1) // TRANS_BLOCK
        if not 0 <= block < len(self._blocks):
            return None
        topic = self._blocks[block]
        stub = self._stubs[topic]
        return (topic, stub) if stub.waiting_for(trans_id) else None

    def _send_gap(self, request: XmlContent) -> None:
        """Send a gap request without waiting for the relay's ``ok``: this runs on the
        reader, and the ``ok`` comes over the same channel as the repair's redeliveries.
        A reader waiting for it stops taking deliveries; once the attachment's queue is
        full the client stops reading the channel, and the ``ok`` behind the
        redeliveries can never be read (the relay holding its in-flight bound for this
        endpoint, the pod's Submits waiting on the relay): the repair of a long absence
        delivered nothing. Not sent, or refused: the stub asks again after its repair
        timeout, through the attachment made again by then."""
        try:
            sent = self.attachment.submit(self.service, request)
        except ApexClientError as exc:
            _log.info("robust client: gap request not sent: %s", exc)
            return
        sent.add_done_callback(_gap_sent)

    async def _carry_out(self, topic: str, events: list[StubEvent]) -> None:
        for event in events:
            if isinstance(event, Deliver):
                self._publications.put_nowait(event.publication)
            elif isinstance(event, SendGap):
                self._send_gap(XmlContent(event.request.to_xml()))
            elif self._on_event is not None:
                self._on_event(topic, event)
        if events:
            self._wake.set()


def _gap_sent(sent: asyncio.Future[SendResult]) -> None:
    """A gap request's ``ok`` (or refusal) came: nothing to do but say a refusal."""
    if not sent.cancelled() and sent.exception() is not None:
        _log.info("robust client: gap request not taken: %s", sent.exception())


__all__ = ["OPERATIONS_BLOCK", "TRANS_BLOCK", "EventCallback", "Reattach", "RobustClient"]
