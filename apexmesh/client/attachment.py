"""One endpoint attached over the client's APEX channel (RFC 3340 sections 4.4.1 and
4.4.3).

An :class:`Attachment` is created by :meth:`apexmesh.client.ApexClient.attach`. It owns
the receive queue of its endpoint: data the client accepted for it (section 4.4.4.2) is
queued in arrival order and taken with :meth:`Attachment.receive` (or ``async for``).
The queue is bounded: while it is full the client stops reading the channel, so the
BEEP window and then TCP push back on the relay instead of memory growing.

The attachment ends with our terminate (:meth:`Attachment.terminate`), the relay's
(section 4.4.3, "relay-initiated"), :meth:`ApexClient.terminate_all` (transID 0) or the
end of the BEEP session (section 6.1.1). Queued data is still handed out; after that,
receivers get :class:`~apexmesh.client.errors.AttachmentTerminatedError` with the
terminate's code.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Final

from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.options import Option
from apexmesh.apex.timing import DataTiming
from apexmesh.client.errors import AttachmentTerminatedError
from apexmesh.client.outgoing import OCTET_STREAM, Content, RecipientLike
from apexmesh.client.received import ReceivedData
from apexmesh.client.reports import SendResult

if TYPE_CHECKING:
    from apexmesh.client.client import ApexClient

#: Data queued per attachment before the client stops reading the channel.
DEFAULT_QUEUE_LIMIT: Final = 1024


class AttachmentState(enum.Enum):
    """Where an attach operation stands."""

    #: The attach was sent; the relay has not answered yet.
    ATTACHING = "attaching"
    #: The relay answered ``<ok />``: data for the endpoint is accepted.
    ATTACHED = "attached"
    #: Ended (or the attach failed); nothing more is accepted for it.
    TERMINATED = "terminated"


class Attachment:
    """The application attached as ``endpoint`` under transaction ``trans_id``."""

    def __init__(
        self,
        client: ApexClient,
        endpoint: Endpoint,
        trans_id: int,
        options: tuple[Option, ...] = (),
        *,
        queue_limit: int = DEFAULT_QUEUE_LIMIT,
    ) -> None:
        #: The endpoint attached as.
        self.endpoint = endpoint
        #: The attach's transaction identifier (what a terminate names).
        self.trans_id = trans_id
        #: The options sent with the attach.
        self.options = options
        self.state = AttachmentState.ATTACHING
        #: Why the attachment ended, once it has.
        self.ended: AttachmentTerminatedError | None = None
        self._client = client
        self._limit = queue_limit
        self._queue: deque[ReceivedData] = deque()
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._results: set[SendResult] = set()

    def __repr__(self) -> str:
        return f"<Attachment {self.endpoint} transID={self.trans_id} {self.state.value}>"

    @property
    def attached(self) -> bool:
        """True while the relay holds the attachment."""
        return self.state is AttachmentState.ATTACHED

    # ----------------------------------------------------------------- application API

    async def send(
        self,
        recipients: RecipientLike | Iterable[RecipientLike],
        content: Content,
        *,
        content_type: str = OCTET_STREAM,
        options: Iterable[Option] = (),
        status_request: bool = False,
        timing: DataTiming | None = None,
        hold: bool = False,
    ) -> SendResult:
        """Send data from this endpoint (RFC 3340 section 4.4.4).

        ``content`` as bytes travels as a multipart/related MIME part of
        ``content_type`` referenced by ``cid:``; :class:`~apexmesh.client.XmlContent` or
        an element travels inline as ``data-content`` referenced as ``#Content``
        (section 4.1). ``options`` are per-data options; ``status_request`` adds the
        statusRequest option of section 5.1 (targetHop final, mustUnderstand true) and
        the result collects the reports. ``timing`` adds the dataTiming option of RFC
        3342 section 2 (targetHop all, mustUnderstand true) and the result collects its
        final hop, timing error and transient reports too; ``hold`` adds hold4Endpoint
        (section 3): a recipient that is not attached gets the data when it attaches.
        Raises ApexRequestError with the relay's code (450 when held data would exceed
        the relay's quota, 421 when every recipient's queue stayed full), and
        AttachmentTerminatedError once the attachment ended. Waits first while the
        client has ``max_in_flight`` data unanswered (the relay slows its senders).
        """
        await self._client.writable()
        return await self.submit(
            recipients,
            content,
            content_type=content_type,
            options=options,
            status_request=status_request,
            timing=timing,
            hold=hold,
        )

    def submit(
        self,
        recipients: RecipientLike | Iterable[RecipientLike],
        content: Content,
        *,
        content_type: str = OCTET_STREAM,
        options: Iterable[Option] = (),
        status_request: bool = False,
        timing: DataTiming | None = None,
        hold: bool = False,
    ) -> asyncio.Future[SendResult]:
        """:meth:`send` without waiting: the data is on its way when this returns, and
        the future resolves as :meth:`send` would (the producer pattern of aiokafka's
        ``send``). An application keeping many data in flight pays no task per data.
        What :meth:`send` raises before anything is sent is raised here."""
        return self._client._submit_data(
            self,
            recipients,
            content,
            content_type=content_type,
            options=tuple(options),
            status_request=status_request,
            timing=timing,
            hold=hold,
        )

    async def receive(self) -> ReceivedData:
        """The next data for this endpoint; AttachmentTerminatedError once it ended and
        the queue is drained."""
        while not self._queue:
            if self.ended is not None:
                raise self.ended
            self._readable.clear()
            await self._readable.wait()
        item = self._queue.popleft()
        if len(self._queue) < self._limit:
            self._writable.set()
        return item

    def receive_nowait(self) -> ReceivedData | None:
        """The next queued data, or None when none is queued."""
        if not self._queue:
            return None
        item = self._queue.popleft()
        if len(self._queue) < self._limit:
            self._writable.set()
        return item

    def __aiter__(self) -> AsyncIterator[ReceivedData]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ReceivedData]:
        while True:
            try:
                yield await self.receive()
            except AttachmentTerminatedError:
                return

    async def terminate(self, *, code: int = 250, text: str = "") -> None:
        """Release the attachment (RFC 3340 section 4.4.3); ApexRequestError when the
        relay refuses (550 for an unknown transaction), AttachmentTerminatedError when it
        has already ended."""
        await self._client._terminate(self, code=code, text=text)

    # ----------------------------------------------------------------- client side

    def _settle(self, attached: bool) -> None:
        self.state = AttachmentState.ATTACHED if attached else AttachmentState.TERMINATED
        if not self._settled.done():
            self._settled.set_result(None)

    def _offer(self, item: ReceivedData) -> bool:
        """Queue ``item`` at once when there is room (the common case, no coroutine);
        False when the queue is full and :meth:`_put` must wait for room."""
        if len(self._queue) >= self._limit and self.ended is None:
            return False
        if self.ended is None:
            self._queue.append(item)
            self._readable.set()
        return True

    async def _put(self, item: ReceivedData) -> None:
        while len(self._queue) >= self._limit and self.ended is None:
            self._writable.clear()
            await self._writable.wait()
        if self.ended is None:
            self._queue.append(item)
            self._readable.set()

    def _end(self, error: AttachmentTerminatedError) -> None:
        if self.ended is not None:
            return
        self.ended = error
        self.state = AttachmentState.TERMINATED
        if not self._settled.done():
            self._settled.set_result(None)
        self._readable.set()
        self._writable.set()
        for result in tuple(self._results):
            result._fail(error)
            result.close()
        self._results.clear()


__all__ = ["DEFAULT_QUEUE_LIMIT", "Attachment", "AttachmentState"]
