"""What the robust tests over a running mesh share (tests/system, tests/services/pubsub)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from apexmesh.aio.tasks import within
from apexmesh.client.robust import RobustClient
from apexmesh.pubsub.robust.stub import Publication
from tests.support.polling import scaled


async def warm_up(
    publisher: RobustClient, subscriber: RobustClient, topic: str, *, attempts: int = 30
) -> None:
    """Publish until one publication reaches ``subscriber``: from then on every pod's
    subscriber cache has her subscription, so every later publication numbers her link
    (a test that counts publications starts after this)."""
    for attempt in range(attempts):
        await publisher.publish(topic, f"warm {attempt}".encode())
        with contextlib.suppress(TimeoutError):
            first = await within(subscriber.next(), timeout=scaled(1.0))
            assert first.payload.startswith(b"warm")
            return
    pytest.fail("the subscriber never received a warm-up publication")


async def publish_at_full_speed(
    publisher: RobustClient,
    topic: str,
    label: str,
    *,
    in_flight: int,
    at_least: int,
    until: float = 0.0,
    timeout: float = 30.0,  # noqa: ASYNC109
) -> list[bytes]:
    """Publish ``label n`` with ``in_flight`` outstanding (each waiting for its
    ``published``), at least ``at_least`` and until ``until`` (monotonic); the payloads
    in source-seq order (every one must get its ``published``)."""
    done: dict[int, bytes] = {}
    window = asyncio.Semaphore(in_flight)

    async def one(payload: bytes) -> None:
        try:
            done[await publisher.publish(topic, payload, timeout=scaled(timeout))] = payload
        finally:
            window.release()

    sends: list[asyncio.Task[None]] = []
    n = 0
    while n < at_least or time.monotonic() < until:
        await window.acquire()
        sends.append(asyncio.create_task(one(f"{label} {n}".encode())))
        n += 1
    await asyncio.gather(*sends)
    return [done[seq] for seq in sorted(done)]


async def receive_all(
    subscriber: RobustClient,
    payloads: list[bytes],
    within: float,
) -> list[Publication]:
    """The subscriber's publications until every one of ``payloads`` arrived, then
    whatever else comes within half a second (a duplicate would come then)."""
    got: list[Publication] = []
    wanted = set(payloads)
    async with asyncio.timeout(scaled(within)):
        while wanted:
            publication = await subscriber.next()
            got.append(publication)
            wanted.discard(publication.payload)
    with contextlib.suppress(TimeoutError):
        while True:
            async with asyncio.timeout(scaled(0.5)):  # (``within`` is the bound here)
                got.append(await subscriber.next())
    return got
