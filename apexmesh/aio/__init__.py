"""asyncio adapter for the sans-I/O BEEP core: connections, channels, connect and listen."""

from __future__ import annotations

from apexmesh.aio.connection import (
    AcceptChannel,
    AuthenticationError,
    BeepConnection,
    Channel,
    ChannelStartError,
    ConnectionClosedError,
    ConnectionSaslFactory,
    Incoming,
    RejectChannel,
    Reply,
    ReplyCallback,
    StartHandler,
)
from apexmesh.aio.endpoints import connect, listen

__all__ = [
    "AcceptChannel",
    "AuthenticationError",
    "BeepConnection",
    "Channel",
    "ChannelStartError",
    "ConnectionClosedError",
    "ConnectionSaslFactory",
    "Incoming",
    "RejectChannel",
    "Reply",
    "ReplyCallback",
    "StartHandler",
    "connect",
    "listen",
]
