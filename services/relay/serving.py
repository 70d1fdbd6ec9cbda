"""How APEX channels of a relay come to be served (RFC 3340 sections 2.1 and 4.2): the
BEEP start policy of the relay's listeners (the APEX profile only, its piggybacked
attach or bind answered in the start's reply) and the channel of a relay-relay link this
relay opened. Both hand the channel to an :class:`~services.relay.edge.ApexChannel`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from apexmesh.aio import AcceptChannel, BeepConnection, Channel, RejectChannel
from apexmesh.apex.associations import Binding
from apexmesh.beep import events as ev
from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.errors import BeepError
from services.relay.edge import APEX_PROFILE, ApexChannel, Mode

if TYPE_CHECKING:
    from services.relay.router import Router


async def serve_link(
    router: Router,
    conn: BeepConnection,
    channel: Channel,
    binding: Binding,
    *,
    peer_domain: str | None,
    on_unbound: Callable[[], None],
) -> None:
    """Serve the APEX channel of a relay-relay link this relay initiated (RFC 3340
    section 2.1: in the relay-relay mode either relay may send data and terminate).

    ``binding`` is this relay's own bind over the channel, so the peer can terminate it by
    its transID (or all with 0), after which ``on_unbound`` runs. Data the peer sends is
    processed like data from any relay (4.4.4.1): its originators must be of a domain the
    peer may speak for, ``peer_domain`` when the link's peer is known to serve it (a
    certificate checked for that domain, or an operator's static route), else a trusted
    domain.
    """
    handler = ApexChannel(router, conn, Mode.MESH)
    handler.associations.begin(binding.trans_id)
    handler.associations.complete(binding)
    if peer_domain is not None:
        handler.peer_domains = frozenset({peer_domain})
    handler.on_unbound = on_unbound
    await handler.serve(channel)


def start_handler(router: Router, mode: Mode):  # type: ignore[no-untyped-def]
    """The BEEP start policy of a relay listener: the APEX profile only."""
    #: The APEX channels of each open BEEP session (see ApexChannel.session).
    sessions: dict[BeepConnection, set[ApexChannel]] = {}

    def channels_of(conn: BeepConnection) -> set[ApexChannel]:
        channels = sessions.get(conn)
        if channels is None:
            channels = sessions[conn] = set()
            conn.closed.add_done_callback(lambda _: sessions.pop(conn, None))
        return channels

    async def on_start(
        conn: BeepConnection, request: ev.ChannelStartRequested
    ) -> AcceptChannel | RejectChannel:
        offer = next((p for p in request.profiles if p.uri == APEX_PROFILE), None)
        if offer is None:
            return RejectChannel(
                code=ReplyCode.ACTION_NOT_TAKEN, text="all requested profiles are unsupported"
            )
        try:
            data = offer.data
            content = None if data is None else data.decode("utf-8")
        except (BeepError, UnicodeDecodeError):
            return RejectChannel(
                code=ReplyCode.PARAMETER_SYNTAX_ERROR,
                text="initialization message is not UTF-8 text",
            )
        handler = ApexChannel(router, conn, mode, channels_of(conn))
        try:
            answer = await handler.on_start(content)
        except BaseException:
            # A failure (Redis) or cancellation after the piggybacked attach claimed its
            # endpoint: the claim is released before the start is answered with an error.
            await asyncio.shield(handler.abandon())
            raise
        return AcceptChannel(
            profile=APEX_PROFILE, content=answer, serve=handler.serve, abandon=handler.abandon
        )

    return on_start
