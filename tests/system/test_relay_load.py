"""Relay pods as processes under the loads of issue #16: ten thousand sessions closing
at once, a thousand endpoints attaching at once over TLS and SCRAM, and the memory a
relay holds once every session is gone.

Each test runs in well under a minute on the 2-core development machine; they carry the
``load`` marker (as well as ``system``), which CI runs like every other.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from redis.asyncio import Redis

from apexmesh.client import ApexClient, ApexRequestError
from apexmesh.store.keys import Keys
from tests.support.deployment import DOMAIN, Deployment, deployment, rss_bytes
from tests.support.polling import scaled, wait_until

pytestmark = [pytest.mark.system, pytest.mark.load]

SESSIONS = 10_000
#: Rounds of SESSIONS sessions opened and closed (the last is compared with the others).
ROUNDS = 3
#: Sessions opened at once while the load is built up (the burst under test is the close).
OPENING = 1000


async def open_sessions(running: Deployment, relay: str, names: Sequence[str]) -> list[ApexClient]:
    """One session per endpoint, attached; opened ``OPENING`` at a time."""
    clients: list[ApexClient] = []

    async def one(name: str) -> ApexClient:
        client = await running.connect(relay)
        await client.attach(name)
        return client

    for start in range(0, len(names), OPENING):
        clients += await asyncio.gather(*(one(n) for n in names[start : start + OPENING]))
    return clients


async def attachments_of(redis: Redis, running: Deployment, relay: str) -> int:
    keys = Keys(running.prefix)
    return int(await redis.scard(keys.pod_attachments(f"relay-{relay}")))


async def attachment_keys(redis: Redis, running: Deployment) -> int:
    return sum([1 async for _ in redis.scan_iter(match=Keys(running.prefix).attachment("*"))])


async def settle_rss(pid: int, within: float = 10.0) -> int:
    """The RSS of ``pid`` once it stops moving (three reads 0.2 s apart within 1 %)."""
    deadline = time.monotonic() + within
    samples = [rss_bytes(pid)]
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        samples.append(rss_bytes(pid))
        last = samples[-3:]
        if len(last) == 3 and max(last) - min(last) <= max(last) // 100:
            break
    return samples[-1]


@pytest.mark.timeout(180)
async def test_10k_sessions_closing_at_once_release_everything_and_memory_comes_back(
    tmp_path: Path,
) -> None:
    """Three rounds of 10,000 attached sessions that all close at once. Every round: the
    relay releases every attachment (the table and the pod's set are empty) with no
    Redis error. The relay's RSS after the last round is within 10 % of the highest
    after an earlier round: what sessions hold is freed when they go.

    A leak grows the RSS every round, so the last round stands above all the earlier
    ones; the highest of them is the baseline because what a round leaves is the
    allocator's high-water mark, which the scheduling of 10,000 closes moves: in one
    loaded run the first round left 339 MiB and the second 376 (quiet runs: 366, 362),
    which a first-round baseline took for a leak."""
    names = [f"e{index}@{DOMAIN}" for index in range(SESSIONS)]
    async with deployment(tmp_path) as running:
        redis = Redis.from_url(running.redis.url)
        pid = running.pid(running.relays["a"])
        after: list[int] = []
        try:
            for round_ in range(ROUNDS):
                started = time.monotonic()
                clients = await open_sessions(running, "a", names)
                assert await attachments_of(redis, running, "a") == SESSIONS
                opened = time.monotonic()
                closing = await asyncio.gather(
                    *(c.close(timeout=scaled(30.0)) for c in clients), return_exceptions=True
                )
                assert [c for c in closing if isinstance(c, BaseException)] == []
                del clients, closing

                async def released_all() -> bool:
                    return not (
                        await attachments_of(redis, running, "a")
                        or await attachment_keys(redis, running)
                    )

                await wait_until(
                    released_all, within=30, every=0.1, what="every attachment released"
                )
                released = time.monotonic()
                gc.collect()
                after.append(await settle_rss(pid))
                print(
                    f"round {round_ + 1}: opened in {opened - started:.1f} s, all released "
                    f"{released - opened:.1f} s after the close; relay RSS "
                    f"{after[-1] / 2**20:.0f} MiB"
                )
        finally:
            await redis.aclose()
        log = running.relays["a"].stderr()
    assert "Too many connections" not in log
    assert "cannot release" not in log
    assert after[-1] <= max(after[:-1]) * 1.10, [f"{a / 2**20:.0f} MiB" for a in after]


ATTACHING = 1_000
#: The issue's bound: every attach of the burst is answered within this time (a timing
#: promise, so scaled by the suite's one factor on a loaded machine: tests/README.md).
ANSWER_WITHIN = scaled(10.0)


@pytest.mark.timeout(180)
async def test_1000_endpoints_attaching_at_once_over_tls_and_scram_are_all_answered(
    tmp_path: Path,
) -> None:
    """1,000 endpoints open their sessions at the same moment, half on each of two relay
    pods, each tuning TLS, authenticating with SCRAM-SHA-256 and attaching: every one is
    answered (``ok``, or an error with its code) within 10 s of the burst's start."""
    users = [f"u{index}@{DOMAIN}" for index in range(ATTACHING)]
    async with deployment(tmp_path, relays=("a", "b"), users=users) as running:
        answered: dict[str, float] = {}
        codes: dict[str, int] = {}
        clients: list[ApexClient] = []
        started = time.monotonic()

        async def one(index: int, user: str) -> None:
            client = await running.connect("ab"[index % 2], user)
            clients.append(client)
            try:
                await client.attach(user)
                codes[user] = 250
            except ApexRequestError as exc:
                codes[user] = exc.code
            answered[user] = time.monotonic() - started

        outcomes = await asyncio.gather(
            *(one(i, u) for i, u in enumerate(users)), return_exceptions=True
        )
        failures = [repr(o) for o in outcomes if isinstance(o, BaseException)]
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close(timeout=scaled(5.0))
        slowest = max(answered.values(), default=0.0)
        print(
            f"{len(answered)} answered ({sum(1 for c in codes.values() if c == 250)} attached), "
            f"slowest after {slowest:.1f} s"
        )
    assert failures == []
    assert len(answered) == ATTACHING
    assert slowest <= ANSWER_WITHIN
    assert set(codes.values()) <= {250, 421, 451, 554}
