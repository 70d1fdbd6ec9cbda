"""How the benches load a system, and what they count: the same for apex-mesh and Redis.

- **Closed window** (:func:`windowed`): a publisher keeps ``depth`` publications in
  flight (sent, not yet answered), as Redis and NATS clients do; it never waits for a
  delivery. apex-mesh: one BEEP session, the relay's ``ok`` answers a publication.
  Redis: one connection, pipelines of ``depth`` PUBLISH commands (:class:`RedisSide`).
- **Open loop** (:func:`offered`): publication ``i`` is due at ``start + i / rate``
  whatever happened before; its latency counts from when it was due, so a sender that
  is slowed (flow control) shows as latency instead of hiding it.
- Every publication carries the time it was sent (or due) and its index
  (:func:`stamp`); :class:`Tally` counts each delivery per publication and keeps the
  latencies. A scenario prints delivered / expected, and checks that every publication
  the system acknowledged reached every one of its subscribers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import RedisError

CONTENT_OCTETS = 256
#: Publications in flight per publisher.
IN_FLIGHT = 100
#: Seconds a scenario waits for its last deliveries.
DRAIN_SECONDS = 120.0


def stamp(index: int, sent: float) -> bytes:
    """256 octets: the send (or due) time, ``time.perf_counter()``, and the index."""
    head = f"{sent:<24.9f}{index:<10}".encode()
    return head + b"x" * (CONTENT_OCTETS - len(head))


def unstamp(content: bytes) -> tuple[float, int] | None:
    try:
        return float(content[:24]), int(content[24:34])
    except ValueError:
        return None  # not a publication of the bench (a late reply)


def percentile(ordered: Sequence[float], fraction: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, int(len(ordered) * fraction + 0.5) - 1))]


@dataclass
class Tally:
    """Deliveries of one scenario: ``fanout[i]`` subscribers expect publication ``i``."""

    fanout: Sequence[int]
    delivered: int = 0
    counts: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    last: float = 0.0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.fanout)
        self.expected = sum(self.fanout)
        if self.expected == 0:
            self.done.set()

    def seen(self, content: bytes) -> None:
        found = unstamp(content)
        if found is None:
            return
        sent, index = found
        now = time.perf_counter()
        if 0 <= index < len(self.counts):
            self.counts[index] += 1
            self.delivered += 1
            self.latencies.append(now - sent)
            self.last = now
            if self.delivered >= self.expected:
                self.done.set()

    async def drained(self, within: float = DRAIN_SECONDS) -> None:
        """Wait for every expected delivery (or the deadline: then fewer are counted)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self.done.wait()

    def missing(self, acknowledged: Sequence[int]) -> list[int]:
        """Acknowledged publications that did not reach every subscriber."""
        return [i for i in acknowledged if self.counts[i] < self.fanout[i]]

    def duplicates(self) -> int:
        return sum(max(0, c - f) for c, f in zip(self.counts, self.fanout, strict=True))

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.latencies)
        return {
            "p50": percentile(ordered, 0.5) * 1000,
            "p99": percentile(ordered, 0.99) * 1000,
            "p999": percentile(ordered, 0.999) * 1000,
        }


async def windowed(start: Callable[[int], Awaitable[Any]], count: int, depth: int) -> list[int]:
    """Run ``start(i)`` for every ``i`` with at most ``depth`` unanswered; the indices
    answered without error (acknowledged)."""
    window = asyncio.Semaphore(depth)
    acknowledged: list[int] = []
    failures: list[BaseException] = []

    async def one(index: int) -> None:
        try:
            await start(index)
            acknowledged.append(index)
        except Exception as exc:  # noqa: BLE001 - counted: a refused publication
            failures.append(exc)
        finally:
            window.release()

    tasks = []
    for index in range(count):
        await window.acquire()
        tasks.append(asyncio.ensure_future(one(index)))
    await asyncio.gather(*tasks)
    if failures:
        print(f"  {len(failures)} publications refused, e.g. {failures[0]!r}", flush=True)
    return sorted(acknowledged)


async def offered(
    start: Callable[[int, float], Awaitable[Any]], count: int, rate: float
) -> list[int]:
    """Open loop: ``start(i, due)`` at ``due = t0 + i / rate`` whatever the answers; the
    indices acknowledged."""
    acknowledged: list[int] = []
    failures: list[BaseException] = []

    async def one(index: int, due: float) -> None:
        try:
            await start(index, due)
            acknowledged.append(index)
        except Exception as exc:  # noqa: BLE001 - counted
            failures.append(exc)

    tasks = []
    began = time.perf_counter()
    for index in range(count):
        due = began + index / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(index, due)))
    await asyncio.gather(*tasks)
    if failures:
        print(f"  {len(failures)} publications refused, e.g. {failures[0]!r}", flush=True)
    return sorted(acknowledged)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisSide:
    """The Redis baseline: a redis-server of the bench's own (never the system one),
    subscribers one connection each, one publisher connection (pipelines)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.server: asyncio.subprocess.Process | None = None
        self.publisher: Redis | None = None
        self._subscribers: list[Any] = []
        self._connections: list[Redis] = []
        self._readers: list[asyncio.Task[None]] = []

    @property
    def pid(self) -> int:
        """The redis-server's process id (its CPU is the baseline server's)."""
        assert self.server is not None
        return self.server.pid

    async def __aenter__(self) -> RedisSide:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/install installs it)")
        self.server = await asyncio.create_subprocess_exec(
            binary,
            *("--bind", "127.0.0.1", "--port", str(self.port), "--save", ""),
            *("--appendonly", "no", "--maxclients", "20000"),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        pool = BlockingConnectionPool(host="127.0.0.1", port=self.port, max_connections=8)
        self.publisher = Redis.from_pool(pool)
        for _ in range(200):
            try:
                await self.publisher.ping()
                break
            except (OSError, RedisError):
                await asyncio.sleep(0.05)  # not listening yet
        return self

    async def subscribe(self, channels: Sequence[str | Sequence[str]], tally: Tally) -> None:
        """One connection per entry, subscribed to its channel (or each of its channels:
        one connection, several subscriptions, as a BEEP session with several topics);
        every message goes to ``tally``."""

        async def reader(pubsub: Any) -> None:
            while True:
                item = await pubsub.get_message(timeout=None)
                if item is not None and item["type"] == "message":
                    tally.seen(bytes(item["data"]))

        for start in range(0, len(channels), 500):
            batch = channels[start : start + 500]
            opened = []
            for channel in batch:
                connection = Redis(host="127.0.0.1", port=self.port)
                self._connections.append(connection)
                pubsub = connection.pubsub(ignore_subscribe_messages=True)
                names = (channel,) if isinstance(channel, str) else tuple(channel)
                opened.append(pubsub.subscribe(*names))
                self._subscribers.append(pubsub)
            await asyncio.gather(*opened)
        self._readers = [asyncio.ensure_future(reader(p)) for p in self._subscribers]

    async def unsubscribe_all(self) -> None:
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        for pubsub in self._subscribers:
            await pubsub.aclose()
        for connection in self._connections:
            await connection.aclose()
        self._readers, self._subscribers, self._connections = [], [], []

    async def publish_windowed(
        self, channel_of: Callable[[int], str], count: int, depth: int
    ) -> list[int]:
        """Pipelines of ``depth`` PUBLISH on one connection, one after the other; the
        indices some subscriber received (PUBLISH answers how many)."""
        assert self.publisher is not None
        acknowledged: list[int] = []
        for start in range(0, count, depth):
            indices = range(start, min(count, start + depth))
            async with self.publisher.pipeline(transaction=False) as pipe:
                for index in indices:
                    pipe.publish(channel_of(index), stamp(index, time.perf_counter()))
                answers = await pipe.execute()
            acknowledged += [i for i, n in zip(indices, answers, strict=True) if int(n) > 0]
        return acknowledged

    async def publish_one(self, channel: str, index: int, due: float) -> None:
        assert self.publisher is not None
        await self.publisher.publish(channel, stamp(index, due))

    async def __aexit__(self, *_exc: object) -> None:
        await self.unsubscribe_all()
        if self.publisher is not None:
            await self.publisher.aclose()
        if self.server is not None and self.server.returncode is None:
            self.server.terminate()
            await self.server.wait()


__all__ = [
    "CONTENT_OCTETS",
    "IN_FLIGHT",
    "RedisSide",
    "Tally",
    "cpu_seconds",
    "offered",
    "percentile",
    "stamp",
    "unstamp",
    "windowed",
]
