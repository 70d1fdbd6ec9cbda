"""Kill -9 of a robust subscriber's relay *process* during a run of publications (issue
#19 "Must show", at a size CI runs in well under a minute).

Two relay pods and two pubsub pods as processes (tests/support/deployment.py), a real
redis-server. Wilma's :class:`RobustClient` is attached through relay ``a`` and, given
``reattach=``, attaches again through relay ``b`` by itself when her session ends; Fred
publishes to the robust topic through relay ``b``, many publications in flight. Relay
``a`` is SIGKILLed part-way: what it held for Wilma (in its send queue, on the wire) is
gone, and what is sequenced while she has no attachment fails at the relays. Her stub
sees the hole at her first delivery on relay ``b`` (or by overdue heartbeats) and
repairs it by link range, so her application receives every publication that got its
``published`` answer, in source-seq order, exactly once.

Why a process: in-process relays (tests/services/pubsub/conftest.py) can only be
"killed" by cutting a connection, which leaves the relay's own queues and its Redis
registration running; a SIGKILL ends them without a goodbye, as a pod's OOM kill does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import time
from pathlib import Path

import pytest

from apexmesh.client import PubsubClient
from apexmesh.client.attachment import Attachment
from apexmesh.client.robust import RobustClient
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from tests.support.deployment import DOMAIN, Deployment, deployment
from tests.support.polling import scaled
from tests.support.robust_clients import receive_all, warm_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(150)]

#: The seed's access entries let anyone subscribe and publish to ``news`` only.
TOPIC = "news"
PUBLICATIONS = 400
KILL_AT = 150
#: Publications in flight (each waits for its ``published`` answer).
IN_FLIGHT = 20
HEARTBEAT_MS = 300
RES = Resolution.BITS32


async def publish_all(running: Deployment, fred: RobustClient) -> dict[bytes, int]:
    """Publish ``PUBLICATIONS`` with ``IN_FLIGHT`` outstanding, SIGKILL relay ``a`` at
    ``KILL_AT``; the payloads that got ``published``, with their source seqs."""
    ok: dict[bytes, int] = {}
    window = asyncio.Semaphore(IN_FLIGHT)

    async def one(payload: bytes) -> None:
        try:
            ok[payload] = await fred.publish(TOPIC, payload, timeout=scaled(10.0))
        except TimeoutError:
            pass  # not sequenced, or its answer lost: not promised to anyone
        finally:
            window.release()

    sends: list[asyncio.Task[None]] = []
    for n in range(PUBLICATIONS):
        if n == KILL_AT:
            relay = running.relays["a"].process
            relay.send_signal(signal.SIGKILL)  # no goodbye, nothing flushed
            await asyncio.to_thread(relay.wait, scaled(10))
        await window.acquire()
        sends.append(asyncio.create_task(one(f"publication {n}".encode())))
    await asyncio.gather(*sends)
    return ok


async def test_kill_9_of_the_subscribers_relay_process_loses_nothing_published(
    tmp_path: Path,
) -> None:
    async with (
        deployment(tmp_path, relays=("a", "b"), pubsub=("p1", "p2")) as running,
        contextlib.AsyncExitStack() as stack,
    ):
        connect = functools.partial(running.connect_closed_by, stack)

        via_b = await connect("b")

        async def reattach() -> Attachment:
            # Relay a is dead: Wilma comes back through relay b, on a session of her own.
            return await (await connect("b")).attach(f"wilma@{DOMAIN}")

        fred = RobustClient(await via_b.attach(f"fred@{DOMAIN}"))
        stack.push_async_callback(fred.aclose)
        wilma = RobustClient(
            await (await connect("a")).attach(f"wilma@{DOMAIN}"), reattach=reattach
        )
        stack.push_async_callback(wilma.aclose)
        settings = RobustSettings(resolution=RES, heartbeat_ms=HEARTBEAT_MS)
        owner = PubsubClient(await via_b.attach(f"mike@{DOMAIN}"))
        stack.push_async_callback(owner.aclose)
        assert (await owner.create_topic(TOPIC, robust=settings)).code == 250
        stub = await wilma.follow(
            TOPIC, resolution=RES, heartbeat_ms=HEARTBEAT_MS, repair_timeout_ms=1_000
        )
        await wilma.subscribe(TOPIC, duration=3600)
        await warm_up(fred, wilma, TOPIC)

        started = time.monotonic()
        ok = await publish_all(running, fred)
        published = time.monotonic() - started
        got = await receive_all(wilma, list(ok), within=60)
        elapsed = time.monotonic() - started

        payloads = [p.payload for p in got if not p.payload.startswith(b"warm")]
        seqs = [p.source_seq for p in got]
        duplicates = len(payloads) - len(set(payloads))
        print(  # the figures of this run, in the test's output
            f"relay a killed at {KILL_AT}: published {len(ok)}/{PUBLICATIONS} "
            f"in {published:.1f} s; delivered {len(payloads)} ({duplicates} twice), "
            f"reattached {wilma.reattached}; gaps detected {stub.stats.gaps_detected}, "
            f"link repairs {stub.stats.link_repairs}, source repairs "
            f"{stub.stats.source_repairs}, refused {stub.stats.refused}; {elapsed:.1f} s"
        )
        assert len(ok) >= PUBLICATIONS - IN_FLIGHT, "most publications must get published"
        assert duplicates == 0, "a publication was delivered twice"
        assert seqs == sorted(set(seqs)), "publications out of source-seq order"
        assert all(ok[p.payload] == p.source_seq for p in got if p.payload in ok)
        assert wilma.reattached == 1
        assert stub.stats.refused == 0
