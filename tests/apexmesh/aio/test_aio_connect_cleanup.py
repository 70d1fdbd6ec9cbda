"""``connect`` on every path (issue #32): a listener that accepts and never greets, or
hangs up before its greeting, costs the caller an error and no unclosed transport (a
ResourceWarning is an error under the suite's filter, and gc makes it show now)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest

from apexmesh.aio import connect
from apexmesh.aio.connection import ConnectionClosedError

pytestmark = pytest.mark.integration


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()  # accepts, never greets, until the caller gives up
    writer.close()


async def _hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


@pytest.fixture(params=[_silent, _hang_up], ids=["silent", "hang-up"])
async def port(request: pytest.FixtureRequest) -> AsyncIterator[int]:
    server = await asyncio.start_server(request.param, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_connect_without_a_greeting_closes_its_transport(port: int) -> None:
    with pytest.raises((TimeoutError, ConnectionClosedError)):
        await connect("127.0.0.1", port, timeout=0.3)  # no greeting comes: it expires
    await asyncio.sleep(0)  # the transport's connection_lost runs
    gc.collect()
