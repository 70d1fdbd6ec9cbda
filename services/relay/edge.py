"""The relay's BEEP side: APEX channels in the endpoint-relay and relay-relay modes.

One :class:`ApexChannel` serves one BEEP channel bound to the APEX profile (RFC 3340
section 4.2). It runs attach (4.4.1), bind (4.4.2) and terminate (4.4.3) itself, with the
per-channel transaction table of :mod:`apexmesh.apex.associations`, hands data (4.4.4)
to the :class:`~services.relay.router.Router`, and delivers data to the endpoints attached
over it. The piggybacked attach or bind of the channel start is processed before the
channel is accepted, so its answer travels in the start's positive reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from apexmesh.aio import (
    BeepConnection,
    Channel,
    ConnectionClosedError,
    Incoming,
    Reply,
)
from apexmesh.apex.associations import Associations, Attachment, Binding
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import parse_payload
from apexmesh.apex.data import Data
from apexmesh.apex.elements import (
    ApexMessage,
    Attach,
    Bind,
    Error,
    Ok,
    Terminate,
    parse_message,
)
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import select_local_options
from apexmesh.apex.party import overrides
from apexmesh.beep.errors import BeepError
from apexmesh.beep.mime import beep_xml
from apexmesh.ops.logs import correlation_id, new_correlation_id
from apexmesh.relay.outcomes import (
    ENDPOINT_DETACHED,
    Outcome,
    code_of,
    outcome_from_reply,
)
from services.relay.flow import ChannelFlow, Taken
from services.relay.futures import resolver

if TYPE_CHECKING:
    from apexmesh.apex.endpoint import Endpoint
    from services.relay.router import Router

_log = logging.getLogger(__name__)

APEX_PROFILE = "http://iana.org/beep/APEX"
_OK = beep_xml(Ok().to_xml())


class Mode(enum.Enum):
    """RFC 3340 section 2.1: who is on the other side of the BEEP session."""

    EDGE = "endpoint-relay"
    MESH = "relay-relay"


def error_payload(code: int, text: str) -> bytes:
    """A BEEP payload holding an APEX ``error`` element."""
    return beep_xml(Error(code=code_of(code), text=text).to_xml())


class ApexChannel:
    """One APEX channel of one BEEP session. See the module docstring."""

    def __init__(
        self,
        router: Router,
        conn: BeepConnection,
        mode: Mode,
        session: set[ApexChannel] | None = None,
    ) -> None:
        self.router = router
        self.conn = conn
        self.mode = mode
        self.associations = Associations()
        #: The APEX channels of the same BEEP session, this one included: ``terminate``
        #: with transID 0 ends the associations of all of them (section 4.4.3 step 1).
        self.session = session if session is not None else set()
        self.session.add(self)
        self.channel: Channel | None = None
        self._ready = asyncio.Event()
        self._closed = False
        #: What this pod holds for the endpoints attached over the channel (bounded).
        self.flow = ChannelFlow(router.flow_limits, conn.loop, on_shed=self._shed)
        #: Endpoint attached by the channel start's piggybacked attach: its held data is
        #: delivered once the channel serves.
        self._piggybacked: Endpoint | None = None
        #: Domains whose originators the peer may relay for without binding: on a link
        #: this relay initiated, the listening relay's own domain (section 4.5.2).
        self.peer_domains: frozenset[str] = frozenset()
        #: Called when the peer's terminate left no association on the channel (a link
        #: this relay initiated is then given up).
        self.on_unbound: Callable[[], None] | None = None

    # ---------------------------------------------------------------- channel start

    async def on_start(self, content: str | None) -> str | None:
        """Process the element piggybacked on the channel start; return the answer."""
        if content is None:
            return None
        try:
            element = parse_message(content)
        except ApexError as exc:
            return Error.from_exception(exc).to_xml().decode()
        if isinstance(element, Attach | Bind):
            answer = await self._associate(element)
            if isinstance(element, Attach) and element_is_ok(answer):
                self._piggybacked = element.endpoint
            return answer.decode()
        return (
            Error(
                code=ApexReplyCode.PARAMETER_SYNTAX_ERROR,
                text="only attach or bind may be piggybacked",
            )
            .to_xml()
            .decode()
        )

    async def serve(self, channel: Channel) -> None:
        """Process the MSGs of the channel in order until the session ends."""
        self.channel = channel
        self._ready.set()
        if self._piggybacked is not None:
            self.router.attached_ready(self._piggybacked)
        try:
            while True:
                incoming = await channel.receive()
                # One correlation id per message received (apexmesh/ops/logs.py): every
                # log line and gRPC call about it, here and in other services, has it.
                cid = correlation_id.set(new_correlation_id())
                try:
                    waiting = self._handle(incoming)
                    if waiting is not None:
                        await waiting
                except (ConnectionClosedError, BeepError):
                    raise
                except Exception:  # noqa: BLE001  (Redis or a bug: answer, keep serving)
                    _log.exception("processing an APEX message failed")
                    with contextlib.suppress(BeepError):  # unless it was answered already
                        incoming.error(error_payload(ApexReplyCode.ACTION_ABORTED, "local error"))
                finally:
                    correlation_id.reset(cid)
        except (ConnectionClosedError, BeepError):
            pass
        finally:
            await self.release()
            self.router.forget(self)

    @property
    def closed_by_peer(self) -> bool:
        """True once the BEEP channel is closed while the session goes on.

        A peer may close its APEX channel and keep the session (RFC 3080 section
        2.3.1.3); the channel's receiver is not woken for that, so the relay's lease loop
        asks here and releases the attachments made over the channel.
        """
        channel = self.channel
        return channel is not None and not self.conn.session.is_open(channel.number)

    async def release(self) -> None:
        """The channel is gone: release every attachment made over it."""
        if self._closed:
            return
        self._closed = True
        self.flow.close()
        self.session.discard(self)
        for association in self.associations.terminate(0):
            await self.router.detached(self, association)

    async def abandon(self) -> None:
        """The channel was never accepted (the session ended while its start was being
        decided): release what its piggybacked attach claimed."""
        await self.release()
        self.router.forget(self)

    # ---------------------------------------------------------------- incoming MSGs

    def _handle(self, incoming: Incoming) -> Awaitable[None] | None:
        """Process one MSG. Data is answered on return unless its options must be
        looked at first; what must wait (those, attach, bind, terminate) comes back as
        an awaitable, which the channel awaits before its next MSG."""
        try:
            payload = parse_payload(incoming.payload)
            element = parse_message(payload.control, self.router.memo)
        except ApexError as exc:
            incoming.error(beep_xml(Error.from_exception(exc).to_xml()))
            return None
        if isinstance(element, Data):
            try:
                answer = self.router.accept(element, payload, incoming.payload, self)
            except ApexError as exc:  # steps 1-3 refused it: the one place it is answered
                _answer_data(incoming, exc)
                return None
            if answer is None:
                _answer_data(incoming, None)
                return None
            if isinstance(answer, asyncio.Future):
                # Answered once the data is in custody (services/relay/jobs.py); the
                # channel reads on meanwhile, its window closing while answers wait.
                answer.add_done_callback(functools.partial(_answer_settled, incoming))
                return None
            return _answer_data_later(incoming, answer)
        return self._handle_operation(incoming, element)

    async def _handle_operation(self, incoming: Incoming, element: ApexMessage) -> None:
        """attach, bind and terminate (and anything else, refused)."""
        if isinstance(element, Attach | Bind):
            result = await self._associate(element)
            if element_is_ok(result):
                incoming.reply(beep_xml(result))
                if isinstance(element, Attach):
                    self.router.attached_ready(element.endpoint)  # held data, after the ok
            else:
                incoming.error(beep_xml(result))
            return
        if isinstance(element, Terminate):
            if element.trans_id == 0:
                # Step 1: every association of this application over the BEEP session,
                # on whichever of its APEX channels it was made.
                for channel in sorted(self.session, key=lambda c: c is not self):
                    for association in channel.associations.terminate(0):
                        await self.router.detached(channel, association)
                incoming.reply(_OK)
                self._check_unbound()
                return
            try:
                ended = self.associations.terminate(element.trans_id)
            except ApexError as exc:
                incoming.error(beep_xml(Error.from_exception(exc).to_xml()))
                return
            for association in ended:
                await self.router.detached(self, association)
            incoming.reply(_OK)
            self._check_unbound()
            return
        incoming.error(
            error_payload(
                ApexReplyCode.PARAMETER_SYNTAX_ERROR,
                f"unexpected {type(element).__name__.lower()} element",
            )
        )

    async def _associate(self, element: Attach | Bind) -> bytes:
        """Run attach (4.4.1) or bind (4.4.2); return the ok or error element."""
        try:
            self.associations.begin(element.trans_id)
        except ApexError as exc:
            return Error.from_exception(exc).to_xml()
        try:
            if isinstance(element, Attach):
                self._require(Mode.EDGE, "attach")
                await self.router.attach(self, element)
                selection = select_local_options(element.options, self.router.options)
                association: Attachment | Binding = Attachment(element.trans_id, element.endpoint)
                await self.router.claim(
                    self,
                    element.endpoint,
                    element.trans_id,
                    override=overrides(selection.process),
                )
            else:
                self._require(Mode.MESH, "bind")
                self.router.bind(self, element)
                select_local_options(element.options, self.router.options)
                association = Binding(element.trans_id, element.relay)
        except ApexError as exc:
            self.associations.abandon(element.trans_id)
            return Error.from_exception(exc).to_xml()
        self.associations.complete(association)
        return Ok().to_xml()

    def _check_unbound(self) -> None:
        if self.on_unbound is not None and not len(self.associations):
            self.on_unbound()

    def _require(self, mode: Mode, operation: str) -> None:
        if self.mode is not mode:
            service = "apex-edge" if mode is Mode.EDGE else "apex-mesh"
            raise ApexError(
                ApexReplyCode.ACTION_NOT_TAKEN, f"{operation} is for the {service} service"
            )

    # ---------------------------------------------------------------- outgoing data

    def deliver(self, payload: bytes) -> asyncio.Future[Outcome]:
        """Send data to the endpoint attached over this channel (4.4.4.1 step 5.3),
        within the channel's bounds; the future settles with the endpoint's answer."""
        result: asyncio.Future[Outcome] = self.conn.loop.create_future()
        self.queue_data(payload, resolver(result))
        return result

    def queue_data(self, payload: bytes, settle: Settle) -> Taken | asyncio.Future[Taken]:
        """Send data to the endpoint once the channel has room (services/relay/flow.py);
        ``settle`` gets the endpoint's answer, or why none will come (once, from the
        loop). Returns None when the data is queued now, the outcome when it is refused
        now (shed, channel gone), else a future of either once decided: the copy's
        custody (services/relay/jobs.py)."""
        if self.channel is None or self._closed:
            self.conn.loop.call_soon(settle, ENDPOINT_DETACHED)
            return ENDPOINT_DETACHED
        octets = len(payload)
        taken = self.flow.take(octets)
        if taken is None:
            self.transmit(payload, octets, settle)
        elif isinstance(taken, Outcome):
            self.conn.loop.call_soon(settle, taken)
        else:
            taken.add_done_callback(functools.partial(self._room_for, payload, octets, settle))
        return taken

    def _room_for(
        self, payload: bytes, octets: int, settle: Settle, taken: asyncio.Future[Taken]
    ) -> None:
        outcome = taken.result()
        if outcome is None:
            self.transmit(payload, octets, settle)
        else:
            settle(outcome)

    def transmit(self, payload: bytes, octets: int, settle: Settle) -> None:
        """Send data for which room of ``octets`` was taken from :attr:`flow`; the room
        is given back with the endpoint's answer (or the session's end)."""
        channel = self.channel
        if channel is None or self._closed:
            self.flow.release(octets)
            self.conn.loop.call_soon(settle, ENDPOINT_DETACHED)
            return
        try:
            channel.send_then(payload, functools.partial(self._answered, octets, settle))
        except BeepError:  # the session ended, or the peer closed the channel
            self.flow.release(octets)
            self.conn.loop.call_soon(settle, ENDPOINT_DETACHED)

    def _answered(self, octets: int, settle: Settle, reply: Reply | ConnectionClosedError) -> None:
        """The endpoint answered a data (or the session ended before it did)."""
        self.flow.release(octets)
        settle(outcome_from_reply(reply) if isinstance(reply, Reply) else ENDPOINT_DETACHED)

    def _shed(self, count: int) -> None:
        self.router.shed(self, count)

    async def terminate(
        self, attachment: Attachment, code: int, text: str, *, wait: bool = True
    ) -> None:
        """Relay-initiated terminate of one attachment (4.4.3).

        The attachment is released before the terminate is sent; with ``wait`` false the
        application's answer is not awaited (attachOverride, RFC 3342 section 1: the
        terminate runs concurrently with the overriding attach).
        """
        self.associations.remove(attachment)
        await self.router.detached(self, attachment)
        channel = self.channel
        if channel is None or self._closed or self.closed_by_peer:
            return
        # Any three-digit code is carried as given (e.g. 556 of attachOverride); the
        # terminate element's code is %XYZ;, not only the codes of section 10.
        element = Terminate(
            trans_id=attachment.trans_id,
            code=code if 200 <= code <= 599 else code_of(code),
            text=text,
        )
        if not wait:
            try:
                reply = channel.send(beep_xml(element.to_xml()))
            except BeepError:  # session ended, or channel closed meanwhile
                return
            reply.add_done_callback(_consume)
            return
        with contextlib.suppress(BeepError):  # session ended, or channel closed meanwhile
            await channel.request(beep_xml(element.to_xml()))


#: Called with a delivery's outcome.
Settle = Callable[[Outcome], None]


def _answer_data(incoming: Incoming, refusal: ApexError | None) -> None:
    """Step 3 of 4.4.4.1: ``ok``, or the error that refused the data."""
    if refusal is None:
        incoming.reply(_OK)
    else:
        incoming.error(beep_xml(Error.from_exception(refusal).to_xml()))


async def _answer_data_later(
    incoming: Incoming, answer: Awaitable[asyncio.Future[None] | None]
) -> None:
    """Options processed before ``ok`` (holds written): the answer now, or once the data
    is in custody."""
    try:
        result = await answer
    except ApexError as exc:
        _answer_data(incoming, exc)
        return
    if isinstance(result, asyncio.Future):
        result.add_done_callback(functools.partial(_answer_settled, incoming))
    else:
        _answer_data(incoming, None)


def _answer_settled(incoming: Incoming, answer: asyncio.Future[None]) -> None:
    """The data is in custody (or refused): answer it now."""
    refusal: ApexError | None = None
    if answer.cancelled():
        refusal = ApexError(ApexReplyCode.ACTION_ABORTED, "local error")
    elif (error := answer.exception()) is not None:
        if isinstance(error, ApexError):
            refusal = error
        else:
            _log.error("answering a data failed", exc_info=error)
            refusal = ApexError(ApexReplyCode.ACTION_ABORTED, "local error")
    with contextlib.suppress(BeepError):  # the session ended meanwhile
        _answer_data(incoming, refusal)


def _consume(future: asyncio.Future[Reply]) -> None:
    """Retrieve the outcome of a terminate nobody awaits (no 'never retrieved' noise)."""
    if not future.cancelled():
        future.exception()


def element_is_ok(xml: bytes) -> bool:
    """True for a serialized ``ok`` element (as built by this module)."""
    return xml.startswith(b"<ok")
