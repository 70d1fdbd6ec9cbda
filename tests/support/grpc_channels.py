"""gRPC client channels for tests, connected and ready (probed, with a deadline)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from tests.support.polling import scaled


@asynccontextmanager
async def ready_channel(port: int, within: float = 5.0) -> AsyncIterator[grpc.aio.Channel]:
    """An insecure loopback channel to ``port``, yielded once it is READY."""
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        async with asyncio.timeout(scaled(within)):
            await channel.channel_ready()
        yield channel
    finally:
        await channel.close()
