"""Kill -9 of the pubsub process sequencing a robust topic during a run of publications
(issue #19 "Must show", at a size CI runs in well under a minute): two pubsub processes
behind relays that know both (``pubsub=a|b``), a subscriber's :class:`RobustClient` on
relay a, a publisher on relay b. The owner of the topic's sequencer lease is SIGKILLed
part-way: the other process takes the topic once the lease lapses, and the subscriber's
application receives every publication whose ``published`` came back, in order, exactly
once (what the kill lost on its way repaired by the stub)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from apexmesh.client import PubsubClient
from apexmesh.client.robust import RobustClient
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.store.keys import Keys
from apexmesh.store.robust import RobustKeys
from tests.services.pubsub.conftest import PubsubMesh, started_mesh
from tests.support.mesh import endpoint_client
from tests.support.polling import scaled, wait_until
from tests.support.processes import ServiceProcess
from tests.support.redis_server import RedisServer
from tests.support.robust_clients import warm_up

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

DOMAIN, TOPIC = "example.com", "load"
PUBLICATIONS = 600
KILL_AT = 200
HEARTBEAT_MS = 300
RES = Resolution.BITS32


@contextlib.asynccontextmanager
async def two_processes(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> AsyncIterator[tuple[PubsubMesh, dict[str, ServiceProcess]]]:
    async with started_mesh(
        redis_server, keys, tmp_path, pubsub_in_process=(), both_pods=True
    ) as mesh:
        procs = {
            name: ServiceProcess("services.pubsub", mesh.pubsub_env(name), tmp_path / f"{name}.log")
            for name in ("p1", "p2")
        }
        try:
            for proc in procs.values():
                await asyncio.to_thread(proc.start)
            yield mesh, procs
        finally:
            for proc in procs.values():
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(proc.stop)


async def _owner(redis_server: RedisServer, keys: Keys) -> str:
    """The pod id holding the topic's sequencer lease."""
    redis = Redis.from_url(redis_server.url)

    async def holder() -> bytes | None:
        return await redis.get(RobustKeys(keys).owner(DOMAIN, TOPIC))

    try:
        raw = await wait_until(holder, 10, every=0.05, what="a holder of the sequencer lease")
    finally:
        await redis.aclose()
    return raw.decode().partition("|")[0]


async def test_kill_9_of_the_sequencing_process_loses_no_published_publication(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with (
        two_processes(redis_server, keys, tmp_path) as (mesh, procs),
        endpoint_client(mesh.a.edge_port) as client_a,
        endpoint_client(mesh.b.edge_port) as client_b,
    ):
        owner = PubsubClient(await client_a.attach("mike@example.com"))
        wilma = RobustClient(await client_a.attach("wilma@example.com"))
        fred = RobustClient(await client_b.attach("fred@example.com"))
        try:
            settings = RobustSettings(resolution=RES, heartbeat_ms=HEARTBEAT_MS)
            await owner.create_topic(TOPIC, robust=settings)
            await wilma.follow(
                TOPIC, resolution=RES, heartbeat_ms=HEARTBEAT_MS, repair_timeout_ms=1_000
            )
            await wilma.subscribe(TOPIC, duration=3600)
            await warm_up(fred, wilma, TOPIC, attempts=20)
            killed = await _owner(redis_server, keys)
            ok: list[bytes] = []
            failed = 0
            started = time.monotonic()
            for n in range(PUBLICATIONS):
                if n == KILL_AT:
                    process = procs[killed].process
                    process.kill()  # SIGKILL: no lease given up, nothing flushed
                    await asyncio.to_thread(process.wait)
                payload = f"publication {n}".encode()
                try:
                    await fred.publish(TOPIC, payload, timeout=scaled(3.0))
                except TimeoutError:
                    failed += 1  # not sequenced, or its answer lost: not "ok'd"
                else:
                    ok.append(payload)
            assert len(ok) >= PUBLICATIONS - 10, f"{failed} publications failed"
            got: list[bytes] = []
            async with asyncio.timeout(scaled(60)):
                while not set(ok) <= set(got):
                    publication = await wilma.next()
                    if not publication.payload.startswith(b"warm"):
                        got.append(publication.payload)
            assert len(got) == len(set(got)), "a publication was delivered twice"
            order = [int(p.rsplit(b" ", 1)[1]) for p in got]
            assert order == sorted(order), "publications out of order"
            stub = wilma.stub(TOPIC)
            print(  # the figures of this run, in the test's output
                f"killed {killed} at {KILL_AT}; ok {len(ok)}/{PUBLICATIONS}, "
                f"delivered {len(got)}, link repairs {stub.stats.link_repairs}, "
                f"source repairs {stub.stats.source_repairs}, "
                f"{time.monotonic() - started:.1f} s"
            )
        finally:
            for client in (owner, wilma, fred):
                await client.aclose()
