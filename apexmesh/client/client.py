"""The APEX endpoint client: one BEEP session, one APEX channel (RFC 3340 sections 3,
4.2 and 4.4).

:func:`connect_endpoint` opens the session, tunes it to TLS and authenticates with SASL
when asked (sections 3.2 and 3.4), and returns an :class:`ApexClient`. The APEX channel
is started by the first :meth:`ApexClient.attach`, with that ``attach`` piggybacked on
the BEEP ``start`` (section 4.2): the relay's ``<ok />`` or ``<error>`` comes back inside
the ``profile`` of the start's reply. Every later attach, terminate and data is a MSG on
that channel.

The client reads the channel in one task and performs "application processing of data"
(section 4.4.4.2) itself: a data is answered ``<ok />`` when at least one of its
recipients is attached over this client, and ``<error code='550'>`` otherwise; options
are not processed but handed to the application with the data. A relay's ``terminate``
(section 4.4.3) is answered ``<ok />`` (or 550 for an unknown transaction) and ends the
attachment(s) it names. A data from ``apex=report@...`` carrying a ``statusResponse``
(section 5.1) goes to the :class:`~apexmesh.client.reports.SendResult` that asked for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Final

from apexmesh.aio import BeepConnection, Channel, ChannelStartError, ConnectionClosedError, connect
from apexmesh.aio.connection import Incoming, Reply
from apexmesh.aio.tasks import stop_task, within
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import MimePart, parse_payload
from apexmesh.apex.data import Data, Recipient
from apexmesh.apex.elements import Attach, Error, Ok, Terminate, parse_message
from apexmesh.apex.endpoint import SERVICE_PREFIX, Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.holding import HOLD_FOR_ENDPOINT
from apexmesh.apex.memo import ParseMemo
from apexmesh.apex.options import STATUS_REQUEST, Option, TargetHop
from apexmesh.apex.report import SERVICE_NAME, StatusResponse, parse_status_response
from apexmesh.apex.timing import DataTiming, data_timing_option
from apexmesh.beep.errors import BeepError
from apexmesh.beep.management import MAX_PROFILE_CONTENT_OCTETS, ProfileOffer
from apexmesh.beep.mime import beep_xml, split_entity
from apexmesh.beep.sasl import SaslClientExchange
from apexmesh.beep.session import SessionConfig
from apexmesh.client.attachment import DEFAULT_QUEUE_LIMIT, Attachment, AttachmentState
from apexmesh.client.errors import (
    ApexRequestError,
    AttachmentTerminatedError,
    SessionClosedError,
)
from apexmesh.client.outgoing import Content, RecipientLike, as_endpoint, as_recipients, encode_data
from apexmesh.client.received import ReceivedData, decode_data
from apexmesh.client.reports import SendResult
from apexmesh.client.trans_ids import TransIds

logger = logging.getLogger(__name__)

#: Data a client keeps in flight (sent, not answered) before :meth:`Attachment.send` waits.
DEFAULT_MAX_IN_FLIGHT: Final = 1024

#: The APEX profile (RFC 3340 section 4.2).
APEX_PROFILE: Final = "http://iana.org/beep/APEX"

_OK_PAYLOAD: Final = beep_xml(Ok().to_xml())
#: The report service's local part (RFC 3340 section 6.2).
_REPORT_ADDRESS: Final = SERVICE_PREFIX + SERVICE_NAME
#: ``ok`` as relays commonly write it; anything else goes through the parser.
_OK_FORMS: Final = frozenset({b"<ok />", b"<ok/>", b"<ok></ok>"})


def _error_payload(code: int, text: str) -> bytes:
    return beep_xml(Error(code=code, text=text).to_xml())


def _outcome(body: bytes | str, trans_id: int | None) -> None:
    """Raise ApexRequestError unless ``body`` is ``<ok />`` (RFC 3080 section 2.3.1.4)."""
    raw = body.encode("utf-8") if isinstance(body, str) else body
    if raw.strip() in _OK_FORMS:
        return
    try:
        element = parse_message(raw)
    except ApexError as exc:
        raise ApexRequestError(
            int(exc.code), f"unreadable answer: {exc}", trans_id=trans_id
        ) from None
    if isinstance(element, Ok):
        return
    if isinstance(element, Error):
        raise ApexRequestError(element.code, element.text, trans_id=trans_id)
    raise ApexRequestError(
        ApexReplyCode.PARAMETER_SYNTAX_ERROR,
        f"unexpected answer {type(element).__name__}",
        trans_id=trans_id,
    )


def _settle_send(
    result: SendResult, done: asyncio.Future[SendResult], reply: Reply | ConnectionClosedError
) -> None:
    """The relay answered a data MSG (or the session ended first): settle its send."""
    if done.cancelled():
        result.close()
        return
    if isinstance(reply, Reply):
        try:
            _reply_outcome(reply.payload, None)
        except ApexRequestError as error:
            result.close()
            done.set_exception(error)
        else:
            done.set_result(result)
        return
    result.close()
    done.set_exception(SessionClosedError())


def _texts(recipients: tuple[Recipient, ...]) -> tuple[str, ...]:
    """The recipients' endpoints as text (a lone one without a generator)."""
    if len(recipients) == 1:
        return (str(recipients[0].identity),)
    return tuple(str(r.identity) for r in recipients)


async def _put_all(attachments: Sequence[Attachment], received: ReceivedData) -> None:
    """Queue ``received`` for each attachment, waiting for room where a queue is full."""
    for attachment in attachments:
        if not attachment._offer(received):
            await attachment._put(received)


def _reply_outcome(payload: bytes, trans_id: int | None) -> None:
    if payload == _OK_PAYLOAD:  # as every apex-mesh relay writes it: nothing to parse
        return
    try:
        body = split_entity(payload).body
    except BeepError as exc:
        raise ApexRequestError(
            ApexReplyCode.GENERAL_SYNTAX_ERROR, str(exc), trans_id=trans_id
        ) from None
    _outcome(body, trans_id)


class ApexClient:
    """An APEX application's session with its relay (endpoint-relay mode, RFC 3340
    section 2.1). Use :func:`connect_endpoint` to make one."""

    def __init__(
        self,
        conn: BeepConnection,
        *,
        queue_limit: int = DEFAULT_QUEUE_LIMIT,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        #: The BEEP session (for TLS and SASL state, peer identity, ...).
        self.conn = conn
        self._queue_limit = queue_limit
        #: What this client remembers of the documents it parses (apexmesh/apex/memo.py).
        self._memo = ParseMemo()
        #: Data sent and not answered yet, and the bound past which send() waits: a
        #: relay that holds answers back (flow control) slows this client too, instead
        #: of its outgoing queue growing.
        self._in_flight = 0
        self._max_in_flight = max_in_flight
        self._writable = asyncio.Event()
        self._writable.set()
        self._channel: Channel | None = None
        self._channel_lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None
        self._ids = TransIds()
        self._by_trans_id: dict[int, Attachment] = {}
        self._by_endpoint: dict[Endpoint, Attachment] = {}
        self._reports: dict[int, SendResult] = {}
        self._closed = False

    async def __aenter__(self) -> ApexClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def attachments(self) -> tuple[Attachment, ...]:
        """The attachments that are attached (or being attached) now."""
        return tuple(self._by_trans_id.values())

    # ----------------------------------------------------------------- attach

    async def attach(
        self, endpoint: Endpoint | str, *, options: Iterable[Option] = ()
    ) -> Attachment:
        """Attach as ``endpoint`` (RFC 3340 section 4.4.1).

        The first attach starts the APEX channel and rides on its ``start`` (section
        4.2); later ones are MSGs on that channel. Raises ApexRequestError with the
        relay's code: 553 (other domain), 537 (not authorized), 554 (already attached;
        also raised locally when this client holds the endpoint), 555 (transID in use),
        or the BEEP code when the relay refuses the APEX profile.
        """
        self._check_open()
        identity = as_endpoint(endpoint)
        if identity in self._by_endpoint:
            raise ApexRequestError(
                ApexReplyCode.TRANSACTION_FAILED, f"{identity} is already attached here"
            )
        trans_id = self._ids.allocate()
        attach = Attach(endpoint=identity, trans_id=trans_id, options=tuple(options))
        attachment = Attachment(
            self, identity, trans_id, attach.options, queue_limit=self._queue_limit
        )
        self._by_trans_id[trans_id] = attachment
        self._by_endpoint[identity] = attachment
        attached = False
        try:
            await self._send_attach(attach)
            attached = True
        except ConnectionClosedError:
            raise SessionClosedError() from None
        finally:
            attachment._settle(attached)
            if not attached:
                self._forget(attachment)
        return attachment

    async def _send_attach(self, attach: Attach) -> None:
        async with self._channel_lock:
            if self._channel is None and await self._start_channel(attach):
                return
        channel = self._channel
        if channel is None:  # pragma: no cover  (set by _start_channel or raised)
            raise SessionClosedError()
        reply = await channel.send(beep_xml(attach.to_xml()))
        _reply_outcome(reply.payload, attach.trans_id)

    async def _start_channel(self, attach: Attach) -> bool:
        """Start the APEX channel with ``attach`` piggybacked; True when the relay
        answered it there (ok, or raise), False when it must go as a MSG."""
        xml = attach.to_xml()
        piggyback = xml.decode("utf-8") if len(xml) <= MAX_PROFILE_CONTENT_OCTETS else None
        try:
            channel = await self.conn.open_channel(
                ProfileOffer(uri=APEX_PROFILE, content=piggyback)
            )
        except ChannelStartError as exc:
            code = int(exc.code) if exc.code is not None else ApexReplyCode.ACTION_NOT_TAKEN
            raise ApexRequestError(code, str(exc), trans_id=attach.trans_id) from None
        self._channel = channel
        answer = channel.reply_content
        if piggyback is None or answer is None or not answer.strip():
            # The relay did not answer the piggyback (RFC 3080 section 2.3.1.2 makes it
            # optional): the attach goes as the first MSG, once the reader runs.
            self._start_reader(channel)
            return False
        try:
            _outcome(answer, attach.trans_id)
        finally:
            # Data queued behind the start's reply is read only after the attachment's
            # outcome is recorded (the caller settles it before awaiting anything).
            self._start_reader(channel)
        return True

    def _start_reader(self, channel: Channel) -> None:
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read(channel))

    # ----------------------------------------------------------------- terminate

    async def _terminate(self, attachment: Attachment, *, code: int, text: str) -> None:
        if attachment.ended is not None:
            raise attachment.ended
        channel = self._require_channel()
        terminate = Terminate(trans_id=attachment.trans_id, code=code, text=text)
        try:
            reply = await channel.send(beep_xml(terminate.to_xml()))
        except ConnectionClosedError:
            raise SessionClosedError() from None
        _reply_outcome(reply.payload, attachment.trans_id)
        self._end(attachment, AttachmentTerminatedError(code, text or "terminated"))

    async def terminate_all(self, *, code: int = 250, text: str = "") -> None:
        """Release every attachment of this client with transID 0 (RFC 3340 section
        4.4.3, step 1)."""
        self._check_open()
        if self._channel is None:
            return
        terminate = Terminate(trans_id=0, code=code, text=text)
        try:
            reply = await self._channel.send(beep_xml(terminate.to_xml()))
        except ConnectionClosedError:
            raise SessionClosedError() from None
        _reply_outcome(reply.payload, 0)
        self._end_all(AttachmentTerminatedError(code, text or "terminated"))

    # ----------------------------------------------------------------- data

    def _submit_data(
        self,
        attachment: Attachment,
        recipients: RecipientLike | Iterable[RecipientLike],
        content: Content,
        *,
        content_type: str,
        options: tuple[Option, ...],
        status_request: bool,
        timing: DataTiming | None = None,
        hold: bool = False,
    ) -> asyncio.Future[SendResult]:
        """Send a data MSG now; the future resolves with its result once the relay
        answered ``ok`` (or fails with the relay's error). Errors found before sending
        are raised here."""
        if attachment.state is not AttachmentState.ATTACHED:
            if attachment.ended is not None:
                raise attachment.ended
            raise AttachmentTerminatedError(ApexReplyCode.ACTION_NOT_TAKEN, "not attached")
        channel = self._require_channel()
        targets = as_recipients(recipients)
        status_id: int | None = None
        if status_request:
            status_id = self._ids.allocate()
            options = (
                *options,
                Option(
                    internal=STATUS_REQUEST,
                    target_hop=TargetHop.FINAL,
                    must_understand=True,
                    trans_id=status_id,
                ),
            )
        timing_id: int | None = None
        hold_id: int | None = None
        allocated = [status_id] if status_id is not None else []
        try:
            if hold:
                # RFC 3342 section 3 (a transID is #REQUIRED by RFC 3340's DTD).
                hold_id = self._ids.allocate()
                allocated.append(hold_id)
                options = (*options, Option(internal=HOLD_FOR_ENDPOINT, trans_id=hold_id))
            if timing is not None:
                timing_id = self._ids.allocate()
                allocated.append(timing_id)
                options = (*options, data_timing_option(timing_id, timing))
            payload = encode_data(
                originator=attachment.endpoint,
                recipients=targets,
                content=content,
                content_type=content_type,
                options=options,
            )
        except BaseException:
            for trans_id in allocated:
                self._ids.release(trans_id)
            raise
        if hold_id is not None:
            self._ids.release(hold_id)  # no report ever names it
        result = SendResult(
            recipients=_texts(targets),
            status_trans_id=status_id,
            timing_trans_id=timing_id,
            on_close=self._unregister_result if status_id or timing_id else None,
        )
        if status_id is not None or timing_id is not None:
            for trans_id in result.trans_ids:
                # Registered before sending: a report may overtake the ok.
                self._reports[trans_id] = result
                attachment._results.add(result)
        return self._send_payload(channel, payload, result)

    def _send_payload(
        self, channel: Channel, payload: bytes, result: SendResult
    ) -> asyncio.Future[SendResult]:
        done: asyncio.Future[SendResult] = self.conn.loop.create_future()
        try:
            channel.send_then(payload, functools.partial(self._answered, result, done))
        except ConnectionClosedError:
            result.close()
            raise SessionClosedError() from None
        self._in_flight += 1
        if self._in_flight >= self._max_in_flight:
            self._writable.clear()
        return done

    def _answered(
        self,
        result: SendResult,
        done: asyncio.Future[SendResult],
        reply: Reply | ConnectionClosedError,
    ) -> None:
        self._in_flight -= 1
        if self._in_flight < self._max_in_flight:
            self._writable.set()
        _settle_send(result, done, reply)

    @property
    def in_flight(self) -> int:
        """Data sent and not answered by the relay yet."""
        return self._in_flight

    async def writable(self) -> None:
        """Wait until fewer than ``max_in_flight`` data await the relay's answer.
        :meth:`Attachment.send` does; a producer using :meth:`Attachment.submit` (which
        never waits) calls it to be slowed by the relay as well."""
        await self._writable.wait()

    def _unregister_result(self, result: SendResult) -> None:
        for trans_id in result.trans_ids:
            if self._reports.get(trans_id) is result:
                del self._reports[trans_id]
                self._ids.release(trans_id)
        for attachment in self._by_trans_id.values():
            attachment._results.discard(result)

    # ----------------------------------------------------------------- reading

    async def _read(self, channel: Channel) -> None:
        try:
            while True:
                # Every MSG of a read at once: one await per batch, not per delivery.
                for incoming in await channel.receive_batch():
                    try:
                        waiting = self._handle(incoming)
                        if waiting is not None:
                            await waiting
                    except (ConnectionClosedError, SessionClosedError):
                        raise
                    except Exception:  # one bad message must not stop the reader
                        logger.exception("handling an APEX message failed")
                        with contextlib.suppress(BeepError):
                            incoming.error(
                                _error_payload(ApexReplyCode.ACTION_ABORTED, "local error")
                            )
        except (ConnectionClosedError, SessionClosedError):
            pass
        finally:
            self._end_all(AttachmentTerminatedError(421, "BEEP session ended"))

    def _handle(self, incoming: Incoming) -> Awaitable[None] | None:
        """Process one MSG from the relay; what must wait (an attach still unanswered, a
        full receive queue) comes back as an awaitable, the rest is done on return."""
        try:
            payload = parse_payload(incoming.payload)
            message = parse_message(payload.control, self._memo)
        except ApexError as exc:
            incoming.error(beep_xml(Error.from_exception(exc).to_xml()))
            return None
        if isinstance(message, Data):
            return self._on_data(incoming, message, payload.parts)
        if isinstance(message, Terminate):
            self._on_terminate(incoming, message)
            return None
        incoming.error(
            _error_payload(
                ApexReplyCode.ACTION_NOT_TAKEN,
                f"an application does not accept {type(message).__name__.lower()}",
            )
        )
        return None

    def _on_data(
        self, incoming: Incoming, data: Data, parts: Mapping[str, MimePart]
    ) -> Awaitable[None] | None:
        """RFC 3340 section 4.4.4.2: ok when some recipient is attached here, else 550."""
        recipients = data.recipients
        if len(recipients) == 1:
            # One recipient (every delivery of a fan-out, most data): no list to build.
            attachment = self._by_endpoint.get(recipients[0].identity)
            if attachment is not None and attachment.state is AttachmentState.ATTACHED:
                return self._deliver(incoming, data, parts, (attachment,))
        targets: list[Attachment] = []
        for recipient in recipients:
            attachment = self._by_endpoint.get(recipient.identity)
            if attachment is None:
                continue
            state = attachment.state
            if state is AttachmentState.ATTACHED:
                if attachment not in targets:
                    targets.append(attachment)
            elif state is AttachmentState.ATTACHING:
                # Its ok may still be on its way to attach(): decide once it has settled.
                return self._on_data_settled(incoming, data, parts, attachment)
        if not targets:
            incoming.error(
                _error_payload(ApexReplyCode.ACTION_NOT_TAKEN, "no recipient is attached here")
            )
            return None
        return self._deliver(incoming, data, parts, targets)

    def _deliver(
        self,
        incoming: Incoming,
        data: Data,
        parts: Mapping[str, MimePart],
        targets: Sequence[Attachment],
    ) -> Awaitable[None] | None:
        """Answer ``data`` ok and queue it for ``targets`` (attached here), or answer the
        error its content reference gets (section 4.1)."""
        response = (
            None
            if data.originator.identity.address != _REPORT_ADDRESS
            else self._status_response(data)
        )
        try:
            received = decode_data(data, parts, response)
        except ApexError as exc:
            incoming.error(beep_xml(Error.from_exception(exc).to_xml()))
            return None
        incoming.reply(_OK_PAYLOAD)
        if response is not None:
            collector = self._reports.get(response.trans_id)
            if collector is not None:
                collector._deliver(response)
                return None
        for index, attachment in enumerate(targets):
            if not attachment._offer(received):
                return _put_all(targets[index:], received)
        return None

    async def _on_data_settled(
        self,
        incoming: Incoming,
        data: Data,
        parts: Mapping[str, MimePart],
        attaching: Attachment,
    ) -> None:
        await attaching._settled
        waiting = self._on_data(incoming, data, parts)
        if waiting is not None:
            await waiting

    def _status_response(self, data: Data) -> StatusResponse | None:
        """The statusResponse of a report (RFC 3340 section 5.1), parsed only for data
        from a report service with inline content."""
        originator = data.originator.identity
        content = data.data_content
        if (
            originator.address != _REPORT_ADDRESS
            or content is None
            or data.content != "#" + content.name
        ):
            return None
        try:
            return parse_status_response(content.content)
        except ApexError:
            return None

    def _on_terminate(self, incoming: Incoming, terminate: Terminate) -> None:
        """RFC 3340 section 4.4.3, as the receiving application."""
        error = AttachmentTerminatedError(terminate.code, terminate.text or "terminated by relay")
        if terminate.trans_id == 0:
            incoming.reply(_OK_PAYLOAD)
            self._end_all(error)
            return
        attachment = self._by_trans_id.get(terminate.trans_id)
        if attachment is None or attachment.state is not AttachmentState.ATTACHED:
            incoming.error(
                _error_payload(ApexReplyCode.ACTION_NOT_TAKEN, "unknown transaction-identifier")
            )
            return
        incoming.reply(_OK_PAYLOAD)
        self._end(attachment, error)

    # ----------------------------------------------------------------- lifecycle

    def _end(self, attachment: Attachment, error: AttachmentTerminatedError) -> None:
        attachment._end(error)
        self._forget(attachment)

    def _end_all(self, error: AttachmentTerminatedError) -> None:
        for attachment in tuple(self._by_trans_id.values()):
            if attachment.state is not AttachmentState.ATTACHING:
                self._end(attachment, error)

    def _forget(self, attachment: Attachment) -> None:
        if self._by_trans_id.get(attachment.trans_id) is attachment:
            del self._by_trans_id[attachment.trans_id]
            self._ids.release(attachment.trans_id)
        if self._by_endpoint.get(attachment.endpoint) is attachment:
            del self._by_endpoint[attachment.endpoint]

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError("client closed")
        try:
            self.conn.raise_if_closed()
        except ConnectionClosedError:
            raise SessionClosedError() from None

    def _require_channel(self) -> Channel:
        self._check_open()
        if self._channel is None:
            raise SessionClosedError("no APEX channel")
        return self._channel

    async def close(self, *, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Release the BEEP session; every attachment ends with it (RFC 3340 section
        6.1.1) and its receivers get AttachmentTerminatedError (421). A relay that does
        not confirm the release within ``timeout`` seconds is cut off."""
        if self._closed:
            return
        self._closed = True
        self._end_all(AttachmentTerminatedError(421, "client closed"))
        await _release(self.conn, timeout)
        await stop_task(self._reader)


#: Receive window an endpoint advertises (RFC 3081 3.1.3 lets it exceed the default 4096
#: octets): data from the relay arrives back to back, and a 4096-octet window would cost a
#: SEQ round trip every few messages.
DEFAULT_RECEIVE_WINDOW_OCTETS: Final = 256 * 1024


async def connect_endpoint(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    sasl: tuple[str, str, str] | None = None,
    config: SessionConfig | None = None,
    queue_limit: int = DEFAULT_QUEUE_LIMIT,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    timeout: float = 10.0,  # noqa: ASYNC109  (bounds connect, tuning and SASL together)
) -> ApexClient:
    """Open a BEEP session to an APEX relay (RFC 3340 section 3).

    With ``ssl_context`` the session is tuned to TLS first (RFC 3080 section 3.1,
    certificate checked against ``server_hostname`` or ``host``); with ``sasl`` =
    ``(mechanism, authcid, password)`` it then authenticates (RFC 3080 section 4.1,
    raising AuthenticationError with the relay's code). No channel is started yet: the
    first :meth:`ApexClient.attach` starts the APEX channel (section 4.2).
    """
    conn = await connect(
        host,
        port,
        config or SessionConfig(receive_window_octets=DEFAULT_RECEIVE_WINDOW_OCTETS),
        ssl_context=ssl_context,
        server_hostname=server_hostname,
        timeout=timeout,
    )
    try:
        async with asyncio.timeout(timeout):
            if ssl_context is not None:
                await conn.start_tls()
            if sasl is not None:
                mechanism, authcid, password = sasl
                exchange = SaslClientExchange(
                    mechanism,
                    authcid=authcid,
                    password=password,
                    host=server_hostname or host,
                )
                await conn.authenticate(mechanism, exchange)
    except BaseException:
        await _release(conn, timeout)
        raise
    return ApexClient(conn, queue_limit=queue_limit, max_in_flight=max_in_flight)


async def _release(conn: BeepConnection, timeout: float) -> None:  # noqa: ASYNC109
    """Release the session (RFC 3080 section 2.4), or abort it after ``timeout``."""
    try:
        await within(conn.close(), timeout)
    except TimeoutError:
        conn.abort()


__all__ = ["APEX_PROFILE", "ApexClient", "connect_endpoint"]
