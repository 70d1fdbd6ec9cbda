"""asyncio adapter for the sans-I/O BEEP session (the uvicorn/aioquic shape).

:class:`BeepConnection` is an :class:`asyncio.Protocol`: ``data_received`` feeds the
session, dispatches the events it returns, writes ``data_to_send()`` and re-arms the one
timer the session asks for (aioquic's ``transmit()``). TLS tuning runs the handshake with
``loop.start_tls`` when the session says ``TlsStartRequired``. Everything the
application does goes through small awaitable methods; protocol decisions stay in the
core.

Back-pressure: writes honour ``pause_writing``/``resume_writing`` (``await drain()``);
reading pauses while more than :data:`HIGH_WATER_MESSAGES` received messages wait for the
application and resumes below :data:`LOW_WATER_MESSAGES` (uvicorn's flow control).

SASL as a listener: the exchange for each SASL start comes from
:attr:`BeepConnection.sasl_servers` when set (a factory that sees this connection: its
peer, which a guessing throttle may refuse, and its local address, which DIGEST-MD5's
digest-uri may name), else from the session config's factory. :meth:`BeepConnection.hold`
holds a failed exchange's answer (RFC 4422 section 6.2), so that the delay is paid
before the verdict, not after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, cast

from apexmesh.aio.tasks import within
from apexmesh.beep import events as ev
from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.errors import BeepError
from apexmesh.beep.management import ProfileOffer
from apexmesh.beep.session import Role, Session, SessionConfig, State
from apexmesh.beep.tuning import SaslClient, SaslServer, SaslServerFactory

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Received messages queued for the application before reading from the socket pauses.
HIGH_WATER_MESSAGES: Final = 256
#: Queue length at which reading resumes.
LOW_WATER_MESSAGES: Final = 64
#: Seconds a closed transport may take to send what it still buffers before it is cut
#: off: asyncio keeps a closed transport's socket open until its buffer drains, so a
#: peer that never reads would otherwise hold it (and its fd) for good.
FLUSH_GRACE_SECONDS: Final = 5.0


class ConnectionClosedError(BeepError):
    """The session ended; ``code`` says why (RFC 3080 section 8)."""


class ChannelStartError(BeepError):
    """The peer declined to start a channel."""


class AuthenticationError(BeepError):
    """A SASL exchange failed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """The complete reply to one MSG."""

    #: "RPY", "ERR" or "ANS" (a one-to-many reply ended by NUL).
    kind: str
    #: The RPY or ERR entity ("" for ANS replies).
    payload: bytes = b""
    #: The ANS entities, in the order they completed.
    answers: tuple[bytes, ...] = ()

    @property
    def ok(self) -> bool:
        """True for a positive reply (RPY or ANS/NUL)."""
        return self.kind != "ERR"


#: What :meth:`Channel.send_then` calls: with the reply, or with the error that ended the
#: session before it came.
ReplyCallback = Callable[["Reply | ConnectionClosedError"], None]


@dataclass(slots=True)
class Incoming:
    """A MSG from the peer; answer it exactly once (``reply``/``error``/answers+``finish``)."""

    channel: Channel
    msgno: int
    payload: bytes

    def reply(self, payload: bytes) -> None:
        """Send the positive reply (what :meth:`BeepConnection.call` does, without a
        closure: an endpoint or a relay answers every data it receives)."""
        channel = self.channel
        conn = channel.conn
        conn.raise_if_closed()
        conn.session.send_rpy(channel.number, self.msgno, payload)
        conn._acted()

    def error(self, payload: bytes) -> None:
        """Send the negative reply."""
        self.channel.conn.call(lambda s: s.send_err(self.channel.number, self.msgno, payload))

    def answer(self, payload: bytes) -> None:
        """Send one answer of a one-to-many reply."""
        self.channel.conn.call(lambda s: s.send_ans(self.channel.number, self.msgno, payload))

    def finish(self) -> None:
        """End a one-to-many reply (NUL)."""
        self.channel.conn.call(lambda s: s.send_nul(self.channel.number, self.msgno))


@dataclass(eq=False)
class Channel:
    """An open channel as the application sees it."""

    conn: BeepConnection
    number: int
    profile: str
    #: Initialization content piggybacked on the positive reply to our start.
    reply_content: str | None = None
    _incoming: deque[Incoming] = field(default_factory=deque)
    _incoming_ready: asyncio.Event = field(default_factory=asyncio.Event)
    _pending: dict[int, asyncio.Future[Reply] | ReplyCallback] = field(default_factory=dict)
    _answers: dict[int, list[bytes]] = field(default_factory=dict)
    _closed: asyncio.Future[None] | None = None
    #: True once the channel was closed (by either peer).
    ended: bool = False

    def send(self, payload: bytes) -> asyncio.Future[Reply]:
        """Send a MSG; the future resolves with its complete reply."""
        future: asyncio.Future[Reply] = self.conn.loop.create_future()
        msgno = self.conn.call(lambda s: s.send_msg(self.number, payload))
        self._pending[msgno] = future
        return future

    def send_then(self, payload: bytes, on_reply: ReplyCallback) -> None:
        """Send a MSG; ``on_reply`` gets its complete reply, or the
        :class:`ConnectionClosedError` that ended the session first. It is called from
        the connection's data handling, so it must not block; a caller that only turns
        the reply into something else saves the future (and the loop turn) of
        :meth:`send`."""
        msgno = self.conn.call(lambda s: s.send_msg(self.number, payload))
        self._pending[msgno] = on_reply

    async def request(self, payload: bytes) -> Reply:
        """Send a MSG and wait for its reply."""
        return await self.send(payload)

    async def receive(self) -> Incoming:
        """Wait for the next MSG from the peer; raise once the channel or session ended."""
        if not self._incoming:
            await self._incoming_queued()
        item = self._incoming.popleft()
        self.conn.message_consumed()
        return item

    async def _incoming_queued(self) -> None:
        """Wait until a MSG is queued; raise once the channel or session ended."""
        while not self._incoming:
            self.conn.raise_if_closed()
            if self.ended:
                raise ConnectionClosedError(f"channel {self.number} closed")
            self._incoming_ready.clear()
            await self._incoming_ready.wait()

    async def receive_batch(self) -> list[Incoming]:
        """Wait for the next MSG from the peer and take it with every MSG queued behind
        it, in order (those of one read from the socket, mostly): a reader that handles
        them in a loop pays one await per batch, not per MSG. Raises as :meth:`receive`.

        Reading from the socket resumes once the batch is taken, so while its reader
        works through one batch at most about :data:`HIGH_WATER_MESSAGES` more queue."""
        if not self._incoming:
            await self._incoming_queued()
        items = list(self._incoming)
        self._incoming.clear()
        self.conn.message_consumed(len(items))
        return items

    async def close(self, code: int = ReplyCode.SUCCESS) -> None:
        """Close the channel (RFC 3080 section 2.3.1.3)."""
        self._closed = self.conn.loop.create_future()
        self.conn.call(lambda s: s.close_channel(self.number, code))
        await self._closed


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptChannel:
    """Accept a start request with one profile; ``serve`` then runs with the channel.

    ``abandon`` runs instead of ``serve`` when the channel cannot be accepted after all
    (the session ended while the start was being decided): whatever the decision set up
    for the channel (an attachment claimed for a piggybacked attach) is undone there.
    """

    profile: str
    content: str | None = None
    serve: Callable[[Channel], Awaitable[None]] | None = None
    abandon: Callable[[], Awaitable[None]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RejectChannel:
    """Decline a start request with an error element."""

    code: int = ReplyCode.ACTION_NOT_TAKEN
    text: str = ""


#: Decides a peer's start request: the listener's (or initiator's) profile policy.
StartHandler = Callable[
    ["BeepConnection", ev.ChannelStartRequested], Awaitable[AcceptChannel | RejectChannel]
]

#: Builds the server side of one SASL exchange the peer starts on this connection:
#: (connection, mechanism, tls_active) -> exchange, or None when it is not offered.
ConnectionSaslFactory = Callable[["BeepConnection", str, bool], SaslServer | None]


class BeepConnection(asyncio.Protocol):
    """One BEEP session over one TCP connection. See the module docstring."""

    def __init__(
        self,
        role: Role,
        config: SessionConfig | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        on_start: StartHandler | None = None,
    ) -> None:
        config = config or SessionConfig()
        if config.sasl_server is not None:
            config = dataclasses.replace(
                config, sasl_server=functools.partial(self._sasl_server, config.sasl_server)
            )
        self.session = Session(role, config)
        self.loop = asyncio.get_running_loop()
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.on_start = on_start
        self.transport: asyncio.Transport | None = None
        self.peer_address: object = None
        #: This side's address of the connection (``sockname``): what the peer dialled.
        self.local_address: object = None
        #: Builds the exchanges of SASL starts on this connection when set (module
        #: docstring); the session config's factory otherwise.
        self.sasl_servers: ConnectionSaslFactory | None = None
        #: Told of every SASL exchange this peer refused as the server (audit).
        self.on_auth_failed: Callable[[BeepConnection, ev.AuthenticationFailed], None] | None = None
        self.greeting: asyncio.Future[ev.GreetingReceived] = self.loop.create_future()
        self.closed: asyncio.Future[ev.Event] = self.loop.create_future()
        self._channels: dict[int, Channel] = {}
        self._starting: dict[int, asyncio.Future[Channel]] = {}
        self._tls_done: asyncio.Future[None] | None = None
        self._auth: asyncio.Future[ev.Authenticated] | None = None
        self._release: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._can_write = asyncio.Event()
        self._can_write.set()
        #: Set when the transport reports its end (connection_lost): asyncio's close()
        #: keeps the socket until its write buffer drains, so close() waits for this.
        self._lost = asyncio.Event()
        self._queued_messages = 0
        self._transmit_scheduled = False
        self._reading_paused = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._end: ConnectionClosedError | None = None
        self._held: asyncio.TimerHandle | None = None
        #: True while a :meth:`hold` keeps what the session queued from the socket.
        self._output_held = False

    # ------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (TCP or TLS); uvloop's are not asyncio.Transport subclasses.
        self.transport = cast("asyncio.Transport", transport)
        self.peer_address = transport.get_extra_info("peername")
        self.local_address = transport.get_extra_info("sockname")
        self.session.touch(self.loop.time())
        self._dispatch(self.session.pending_events())
        self._transmit()

    def data_received(self, data: bytes) -> None:
        self._dispatch(self.session.receive_data(data, self.loop.time()))
        self._transmit()

    def eof_received(self) -> bool | None:
        self._dispatch(self.session.receive_eof())
        self._transmit()
        return None

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002
        if self._tls_done is not None and not self._tls_done.done():
            return  # start_tls swaps transports; the old one reports loss of nothing
        self._lost.set()
        self._dispatch(self.session.receive_eof())
        self._fail_all(self._end or ConnectionClosedError("connection lost"))
        if self._timer is not None:
            self._timer.cancel()
        if self._held is not None:
            self._held.cancel()
            self._held = None
        self._output_held = False
        self.transport = None

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # ------------------------------------------------------------- application API

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        await self._can_write.wait()

    async def wait_ready(self) -> ev.GreetingReceived:
        """Wait for the peer's greeting."""
        return await self.greeting

    def call(self, action: Callable[[Session], _T]) -> _T:
        """Run a session action, then dispatch its events and send its output."""
        self.raise_if_closed()
        result = action(self.session)
        self._acted()
        return result

    def _acted(self) -> None:
        """After a session action: dispatch its events and schedule the write."""
        events = self.session.pending_events()
        if events:
            self._dispatch(events)
        if not self._transmit_scheduled:
            # Coalesce the output of every action taken in this loop iteration into one
            # write: pipelined sends and replies then cost one syscall, not one each.
            self._transmit_scheduled = True
            self.loop.call_soon(self._transmit)

    def raise_if_closed(self) -> None:
        """Raise :class:`ConnectionClosedError` once the session has ended."""
        if self._end is not None:
            raise self._end

    async def open_channel(
        self, profile: str | ProfileOffer | list[ProfileOffer], server_name: str | None = None
    ) -> Channel:
        """Start a channel with one or several offered profiles and wait for the answer."""
        await self.wait_ready()
        if isinstance(profile, str):
            offers = [ProfileOffer(uri=profile)]
        elif isinstance(profile, ProfileOffer):
            offers = [profile]
        else:
            offers = profile
        future: asyncio.Future[Channel] = self.loop.create_future()
        number = self.call(lambda s: s.start_channel(offers, server_name))
        self._starting[number] = future
        return await future

    async def start_tls(self) -> None:
        """Tune the session to TLS (RFC 3080 section 3.1) and wait for the new greeting."""
        if self.ssl_context is None:
            raise ValueError("no TLS context configured for this connection")
        await self.wait_ready()
        self._tls_done = self.loop.create_future()
        self.greeting = self.loop.create_future()
        self.call(lambda s: s.start_tls(self.server_hostname))
        await self._tls_done
        await self.wait_ready()

    async def authenticate(self, mechanism: str, exchange: SaslClient) -> ev.Authenticated:
        """Authenticate with SASL (RFC 3080 section 4.1); raise AuthenticationError on failure."""
        await self.wait_ready()
        self._auth = self.loop.create_future()
        self.call(lambda s: s.start_sasl(mechanism, exchange, self.server_hostname))
        return await self._auth

    async def close(self, code: int = ReplyCode.SUCCESS, *, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Release the session (RFC 3080 section 2.4), then close the connection.

        Bounded: a peer that does not answer the release within ``timeout`` seconds, or
        channel tasks that do not finish within it, do not keep the connection open.
        Output held by :meth:`hold` goes out first (a held answer precedes the close).
        """
        if self._output_held and self._held is not None:
            self._held.cancel()
            self._end_hold()
        try:
            if self._end is None and self.session.state is State.OPEN:
                self._release = self.loop.create_future()
                self.call(lambda s: s.close(code))
                with contextlib.suppress(BeepError, TimeoutError):
                    await within(asyncio.shield(self._release), timeout)
        finally:
            self.abort()
        await self._until_lost(timeout)
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=timeout)
            for task in pending:
                task.cancel()

    def abort(self) -> None:
        """Close the transport now. What it still buffers (a release's last answer) may
        go out for :data:`FLUSH_GRACE_SECONDS`; then the socket is cut off."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.close()
        if transport.get_write_buffer_size():
            self.loop.call_later(FLUSH_GRACE_SECONDS, self._cut_off, transport)

    def _cut_off(self, transport: asyncio.Transport) -> None:
        """Drop what a closed ``transport`` still buffers and close its socket."""
        if not self._lost.is_set():
            transport.abort()

    async def _until_lost(self, timeout: float) -> None:  # noqa: ASYNC109
        """Wait until the closed transport reports its end; one still flushing after
        ``timeout`` seconds (sooner than its grace) is cut off now."""
        transport = self.transport
        if transport is None:
            return
        with contextlib.suppress(TimeoutError):
            await within(self._lost.wait(), timeout)
            return
        self._cut_off(transport)
        with contextlib.suppress(TimeoutError):
            await within(self._lost.wait(), timeout)

    def message_consumed(self, count: int = 1) -> None:
        """Queued messages were taken by the application (read back-pressure)."""
        self._queued_messages -= count
        if self._reading_paused and self._queued_messages <= LOW_WATER_MESSAGES:
            self._reading_paused = False
            if self.transport is not None and self._held is None:
                self.transport.resume_reading()

    def hold_reading(self, seconds: float) -> None:
        """Read nothing more from the peer for ``seconds`` (a delay after a failed
        authentication, RFC 4422 section 6.2); a later hold extends it."""
        if self.transport is None or seconds <= 0:
            return
        if self._held is not None:
            self._held.cancel()
        self.transport.pause_reading()
        self._held = self.loop.call_later(seconds, self._end_hold)

    def hold(self, seconds: float) -> None:
        """Send and read nothing for ``seconds``, then send what the session queued
        meanwhile; a later hold extends it. The listener's delay after a failed SASL
        exchange (RFC 4422 section 6.2): called while the failure is dispatched, it
        holds the failure's own answer, so a peer that opens a new session for every
        guess still waits for each verdict."""
        if self.transport is None or seconds <= 0:
            return
        self._output_held = True
        self.hold_reading(seconds)

    def _end_hold(self) -> None:
        self._held = None
        if self.transport is not None and not self._reading_paused:
            self.transport.resume_reading()
        if self._output_held:
            self._output_held = False
            self._transmit()

    def _sasl_server(
        self, configured: SaslServerFactory, mechanism: str, tls_active: bool
    ) -> SaslServer | None:
        """The session's SASL factory: :attr:`sasl_servers` when set, else the config's."""
        if self.sasl_servers is not None:
            return self.sasl_servers(self, mechanism, tls_active)
        return configured(mechanism, tls_active)

    # ------------------------------------------------------------- internals

    def _transmit(self) -> None:
        self._transmit_scheduled = False
        if not self._output_held:
            data = self.session.data_to_send()
            if data and self.transport is not None and not self.transport.is_closing():
                self.transport.write(data)
        when = self.session.get_timer()
        timer = self._timer
        if timer is not None:
            if when is not None and timer.when() <= when:
                # It fires no later than needed (activity only pushes the idle deadline
                # back): keep it rather than cancel and schedule one per message; when it
                # fires early, handle_timer does nothing and this schedules the next.
                return
            timer.cancel()
            self._timer = None
        if when is not None:
            self._timer = self.loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch(self.session.handle_timer(self.loop.time()))
        self._transmit()

    def _spawn(self, coro: Awaitable[None]) -> None:
        async def run() -> None:
            await coro

        task = self.loop.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("channel task failed", exc_info=task.exception())

    def _dispatch(self, events: list[ev.Event]) -> None:
        for event in events:
            handler = _HANDLERS.get(type(event))
            if handler is not None:
                handler(self, event)

    def _on_greeting(self, event: ev.GreetingReceived) -> None:
        if not self.greeting.done():
            self.greeting.set_result(event)

    def _on_start_requested(self, event: ev.ChannelStartRequested) -> None:
        if self.on_start is None:
            self.call(
                lambda s: s.reject_channel(
                    event.channel, ReplyCode.ACTION_NOT_TAKEN, "this peer starts no channels"
                )
            )
            return
        handler = self.on_start

        async def decide() -> None:
            try:
                decision = await handler(self, event)
            except Exception:
                # RFC 3080 section 2.3.1.2: a start is answered, with an error element
                # when the listener cannot start the channel (a local error here).
                logger.exception("deciding the start of channel %d failed", event.channel)
                decision = RejectChannel(
                    code=ReplyCode.ACTION_ABORTED, text="local error starting the channel"
                )
            if isinstance(decision, RejectChannel):
                with contextlib.suppress(BeepError):  # the session ended meanwhile
                    self.call(
                        lambda s: s.reject_channel(event.channel, decision.code, decision.text)
                    )
                return
            channel = Channel(self, event.channel, decision.profile)
            self._channels[event.channel] = channel
            try:
                self.call(
                    lambda s: s.accept_channel(event.channel, decision.profile, decision.content)
                )
            except BeepError:  # the session ended while the start was being decided
                self._channels.pop(event.channel, None)
                if decision.abandon is not None:
                    await decision.abandon()
                return
            if decision.serve is not None:
                await decision.serve(channel)

        self._spawn(decide())

    def _on_started(self, event: ev.ChannelStarted) -> None:
        if not event.initiated_locally:
            return
        reply = event.reply.content if event.reply is not None else None
        channel = Channel(self, event.channel, event.profile, reply_content=reply)
        self._channels[event.channel] = channel
        future = self._starting.pop(event.channel, None)
        if future is not None and not future.done():
            future.set_result(channel)

    def _on_start_failed(self, event: ev.ChannelStartFailed) -> None:
        future = self._starting.pop(event.channel, None)
        if future is not None and not future.done():
            future.set_exception(
                ChannelStartError(f"{event.code} {event.text}", code=_code(event.code))
            )

    def _on_message(self, event: ev.MessageReceived) -> None:
        channel = self._channels.get(event.channel)
        if channel is None:
            return
        channel._incoming.append(Incoming(channel, event.msgno, event.payload))
        channel._incoming_ready.set()
        self._queued_messages += 1
        if self._queued_messages >= HIGH_WATER_MESSAGES and not self._reading_paused:
            self._reading_paused = True
            if self.transport is not None:
                self.transport.pause_reading()

    def _resolve(self, channel_number: int, msgno: int, reply: Reply) -> None:
        channel = self._channels.get(channel_number)
        if channel is None:
            return
        pending = channel._pending.pop(msgno, None)
        if pending is None:
            return
        if isinstance(pending, asyncio.Future):
            if not pending.done():
                pending.set_result(reply)
        else:
            _call_back(pending, reply)

    def _on_reply(self, event: ev.ReplyReceived) -> None:
        self._resolve(event.channel, event.msgno, Reply(kind="RPY", payload=event.payload))

    def _on_error(self, event: ev.ErrorReceived) -> None:
        self._resolve(event.channel, event.msgno, Reply(kind="ERR", payload=event.payload))

    def _on_answer(self, event: ev.AnswerReceived) -> None:
        channel = self._channels.get(event.channel)
        if channel is not None:
            channel._answers.setdefault(event.msgno, []).append(event.payload)

    def _on_answers_done(self, event: ev.AnswersCompleted) -> None:
        channel = self._channels.get(event.channel)
        answers = channel._answers.pop(event.msgno, []) if channel is not None else []
        self._resolve(event.channel, event.msgno, Reply(kind="ANS", answers=tuple(answers)))

    def _on_channel_closed(self, event: ev.ChannelClosed) -> None:
        channel = self._channels.pop(event.channel, None)
        if channel is not None:
            channel.ended = True
            channel._incoming_ready.set()
            if channel._closed is not None and not channel._closed.done():
                channel._closed.set_result(None)

    def _on_close_failed(self, event: ev.ChannelCloseFailed) -> None:
        error = ConnectionClosedError(
            f"close declined: {event.code} {event.text}", code=_code(event.code)
        )
        if event.channel == 0:
            if self._release is not None and not self._release.done():
                self._release.set_exception(error)
            return
        channel = self._channels.get(event.channel)
        if channel is not None and channel._closed is not None and not channel._closed.done():
            channel._closed.set_exception(error)

    def _on_tls_required(self, event: ev.TlsStartRequired) -> None:
        self._transmit()
        if self._tls_done is None:
            self._tls_done = self.loop.create_future()
        self.greeting = self.loop.create_future()
        self._spawn(self._run_tls(event))

    async def _run_tls(self, event: ev.TlsStartRequired) -> None:
        assert self._tls_done is not None  # noqa: S101  (set by the caller)
        transport = self.transport
        context = self.ssl_context
        if transport is None or context is None:
            self._tls_done.set_exception(ConnectionClosedError("TLS not possible"))
            self.abort()
            return
        try:
            new_transport = await self.loop.start_tls(
                transport,
                self,
                context,
                server_side=event.server_side,
                server_hostname=None if event.server_side else self.server_hostname,
            )
        except (OSError, ssl.SSLError) as exc:
            reason = _describe(exc)
            logger.warning("TLS negotiation failed: %s (peer %s)", reason, self.peer_address)
            self._tls_done.set_exception(ConnectionClosedError(f"TLS negotiation failed: {reason}"))
            self._tls_done.exception()  # the listener's side has nobody awaiting it
            self.abort()
            return
        self.transport = cast("asyncio.Transport", new_transport)
        certificate = self.transport.get_extra_info("peercert")
        self._tls_done.set_result(None)
        self.call(lambda s: s.tls_established(certificate or None))

    def _on_tls_failed(self, event: ev.TlsStartFailed) -> None:
        if self._tls_done is not None and not self._tls_done.done():
            self._tls_done.set_exception(
                ConnectionClosedError(
                    f"TLS refused: {event.code} {event.text}", code=_code(event.code)
                )
            )

    def _on_authenticated(self, event: ev.Authenticated) -> None:
        if not event.server_side and self._auth is not None and not self._auth.done():
            self._auth.set_result(event)

    def _on_auth_failed(self, event: ev.AuthenticationFailed) -> None:
        if event.server_side:
            if self.on_auth_failed is not None:
                self.on_auth_failed(self, event)
            return
        if self._auth is not None and not self._auth.done():
            reason = f"{event.code} {event.text}".rstrip()
            self._auth.set_exception(
                AuthenticationError(
                    f"SASL {event.mechanism} failed: {reason}", code=_code(event.code)
                )
            )

    def _on_session_closed(self, event: ev.SessionClosed) -> None:
        self._end = ConnectionClosedError("session released", code=ReplyCode.SUCCESS)
        if self._release is not None and not self._release.done():
            self._release.set_result(None)
        self._finish(event)

    def _on_terminated(self, event: ev.SessionTerminated) -> None:
        logger.info(
            "BEEP session with %s terminated: %s %s", self.peer_address, event.code, event.reason
        )
        self._end = ConnectionClosedError(event.reason, code=_code(event.code))
        self._finish(event)

    def _finish(self, event: ev.Event) -> None:
        assert self._end is not None  # noqa: S101  (callers set it)
        if not self.closed.done():
            self.closed.set_result(event)
        self._transmit()
        self._fail_all(self._end)
        self.abort()

    def _fail_all(self, error: ConnectionClosedError) -> None:
        futures: list[asyncio.Future[Any] | None] = [
            self.greeting,
            self._tls_done,
            self._auth,
            self._release,
            *self._starting.values(),
        ]
        for channel in self._channels.values():
            pending, channel._pending = channel._pending, {}
            for waiting in pending.values():
                if isinstance(waiting, asyncio.Future):
                    futures.append(waiting)
                else:
                    _call_back(waiting, error)
            futures.append(channel._closed)
            channel._incoming_ready.set()
        for future in futures:
            if future is not None and not future.done():
                future.set_exception(error)
                future.exception()  # mark retrieved: nobody may be waiting
        if not self.closed.done():
            self.closed.set_result(ev.SessionTerminated(code=error.code, reason=str(error)))


def _call_back(callback: ReplyCallback, outcome: Reply | ConnectionClosedError) -> None:
    """Run a :meth:`Channel.send_then` callback; its failure is logged, never raised into
    the protocol's data handling."""
    try:
        callback(outcome)
    except Exception:
        logger.exception("reply callback failed")


def _describe(exc: BaseException) -> str:
    """An exception's reason for a log line, never empty: a peer that resets the
    connection mid-handshake raises errors whose text is ""."""
    text = str(exc).strip()
    if isinstance(exc, ssl.SSLError) and getattr(exc, "reason", None) and not text:
        text = str(exc.reason)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _code(value: int) -> ReplyCode | None:
    try:
        return ReplyCode(value)
    except ValueError:
        return None


_HANDLERS: Final[dict[type[ev.Event], Callable[[BeepConnection, ev.Event], None]]] = {
    ev.GreetingReceived: BeepConnection._on_greeting,  # type: ignore[dict-item]
    ev.ChannelStartRequested: BeepConnection._on_start_requested,  # type: ignore[dict-item]
    ev.ChannelStarted: BeepConnection._on_started,  # type: ignore[dict-item]
    ev.ChannelStartFailed: BeepConnection._on_start_failed,  # type: ignore[dict-item]
    ev.MessageReceived: BeepConnection._on_message,  # type: ignore[dict-item]
    ev.ReplyReceived: BeepConnection._on_reply,  # type: ignore[dict-item]
    ev.ErrorReceived: BeepConnection._on_error,  # type: ignore[dict-item]
    ev.AnswerReceived: BeepConnection._on_answer,  # type: ignore[dict-item]
    ev.AnswersCompleted: BeepConnection._on_answers_done,  # type: ignore[dict-item]
    ev.ChannelClosed: BeepConnection._on_channel_closed,  # type: ignore[dict-item]
    ev.ChannelCloseFailed: BeepConnection._on_close_failed,  # type: ignore[dict-item]
    ev.TlsStartRequired: BeepConnection._on_tls_required,  # type: ignore[dict-item]
    ev.TlsStartFailed: BeepConnection._on_tls_failed,  # type: ignore[dict-item]
    ev.Authenticated: BeepConnection._on_authenticated,  # type: ignore[dict-item]
    ev.AuthenticationFailed: BeepConnection._on_auth_failed,  # type: ignore[dict-item]
    ev.SessionClosed: BeepConnection._on_session_closed,  # type: ignore[dict-item]
    ev.SessionTerminated: BeepConnection._on_terminated,  # type: ignore[dict-item]
}
