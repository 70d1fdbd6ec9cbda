"""hold4Endpoint (RFC 3342 section 3) with relay pods as real processes: data a relay
answered ``ok`` for is in Redis, not in the relay's memory, so killing that relay with
SIGKILL loses none of it; the endpoint attaching on another pod gets all of it, in
order, exactly once, and Redis holds nothing for it afterwards. A full quota answers the
sender 450 rather than dropping the data silently.

The access and report services and the in-process pods of tests/support/mesh.py serve
the domain beside the relay processes started here (tests/support/processes.py), as in
test_relay_pods.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from apexmesh.aio.tasks import within
from apexmesh.client import ApexRequestError, Attachment, SessionClosedError, connect_endpoint
from apexmesh.store.held import HeldStore
from apexmesh.store.keys import Keys
from tests.support.mesh import Mesh, endpoint_client
from tests.support.polling import scaled, wait_until
from tests.support.processes import ServiceProcess

pytestmark = pytest.mark.integration

MESSAGES = 10_000
SIZE = 256
#: Sends in flight at once (the relay still handles them in order, one channel).
WINDOW = 128
ENDPOINT = "barney@example.com"


def content(seq: int) -> bytes:
    """256 octets carrying the sequence number."""
    return f"seq={seq:08d};".encode().ljust(SIZE, b".")


def seq_of(body: bytes) -> int:
    assert body.startswith(b"seq="), body[:32]
    assert len(body) == SIZE
    return int(body[4:12])


@asynccontextmanager
async def relay_process(
    mesh: Mesh, tmp_path: Path, name: str, **extra: str
) -> AsyncIterator[tuple[ServiceProcess, dict[str, Any]]]:
    env = {**mesh.relay_env(name, lease_ms=2_000), **extra}
    process = ServiceProcess("services.relay", env, tmp_path / f"{name}.log")
    info = await asyncio.to_thread(process.start)
    try:
        yield process, info
    finally:
        await asyncio.to_thread(process.stop)


async def send_all(fred: Attachment, count: int, make: Callable[[int], bytes]) -> None:
    """Send ``count`` held data in order, WINDOW in flight; every one must get ``ok``."""
    window = asyncio.Semaphore(WINDOW)
    sends: list[asyncio.Future[object]] = []

    async def one(seq: int) -> None:
        try:
            await fred.send(ENDPOINT, make(seq), hold=True)
        finally:
            window.release()

    for seq in range(count):
        await window.acquire()
        # Tasks start in creation order and a send writes its MSG before it first
        # awaits, so the MSGs leave in sequence order.
        sends.append(asyncio.ensure_future(one(seq)))
    await asyncio.gather(*sends)  # raises if any send got an error instead of ok


async def no_held_keys(redis: Redis, keys: Keys) -> list[str]:
    names = (
        keys.held_queue(ENDPOINT),
        keys.held_data(ENDPOINT),
        keys.held_meta(ENDPOINT),
    )
    return [name for name in names if await redis.exists(name)]


@pytest.mark.timeout(150)  # ~15 s here; room for a loaded 2-core machine
async def test_10k_held_survive_sigkill_and_drain_once_in_order_on_the_other_pod(
    mesh: Mesh, redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    store = HeldStore(redis, keys)
    async with relay_process(mesh, tmp_path, "example-proc-a") as (pod_a, info_a):
        client = await connect_endpoint("127.0.0.1", info_a["edge_port"], timeout=scaled(5.0))
        try:
            fred = await client.attach("fred@example.com")
            await send_all(fred, MESSAGES, content)
            # Every send got ok: each is in Redis before its ok (the byte count is of the
            # whole held payload, MIME headers included).
            held = await store.usage(ENDPOINT)
            assert held[0] == MESSAGES
            pod_a.process.send_signal(signal.SIGKILL)
            assert await asyncio.to_thread(pod_a.process.wait, scaled(10)) == -signal.SIGKILL
            assert await asyncio.to_thread(pod_a.stop) == -signal.SIGKILL  # closes its pipe
        finally:
            with contextlib.suppress(SessionClosedError):
                await client.close(timeout=scaled(2.0))
        # Nothing was lost with the process.
        assert await store.usage(ENDPOINT) == held

        # Restarted (same settings); it must neither lose nor deliver anything itself.
        await asyncio.to_thread(pod_a.start)

        async with (
            relay_process(mesh, tmp_path, "example-proc-b") as (_, info_b),
            endpoint_client(info_b["edge_port"]) as other,
        ):
            barney = await other.attach(ENDPOINT)
            got: list[int] = []
            async with asyncio.timeout(scaled(90)):
                while len(got) < MESSAGES:
                    got.append(seq_of((await barney.receive()).content))
            assert got == list(range(MESSAGES))  # all, in order, none twice

            # Entries are removed after barney's ok, a moment after he got them.
            async def emptied() -> bool:
                return await store.usage(ENDPOINT) == (0, 0)

            await wait_until(emptied, 10, every=0.05, what="the held entries removed")
            assert await no_held_keys(redis, keys) == []
            # Exactly once: nothing more comes after the last one (no redelivery).
            assert barney.receive_nowait() is None
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(scaled(0.5)):
                    await barney.receive()


async def test_quota_of_a_relay_process_answers_450(
    mesh: Mesh, redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    store = HeldStore(redis, keys)
    quota = {"APEXMESH_RELAY_HOLD_ENDPOINT_COUNT": "5"}
    async with (
        relay_process(mesh, tmp_path, "example-quota", **quota) as (_, info),
        endpoint_client(info["edge_port"]) as client,
    ):
        fred = await client.attach("fred@example.com")
        await send_all(fred, 5, content)
        with pytest.raises(ApexRequestError) as refused:
            await fred.send(ENDPOINT, content(5), hold=True)
        assert refused.value.code == 450
        # Refused, not dropped after an ok, and nothing of it was kept.
        assert (await store.usage(ENDPOINT))[0] == 5
    async with endpoint_client(mesh.b.edge_port) as other:
        barney = await other.attach(ENDPOINT)
        got = [seq_of((await within(barney.receive(), scaled(5))).content) for _ in range(5)]
        assert got == [0, 1, 2, 3, 4]
