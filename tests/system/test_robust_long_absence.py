"""A robust subscriber away for 20,000 publications sent at full speed gets every one of
them, in order, once (issue #29 "Must show": "a new test with 20,000 away"; "a repair
larger than any window or batch bound").

Two relay pods and two pubsub pods as processes, a real redis-server. Wilma follows a
robust topic through relay ``a`` and closes her session; her link context stays (the
pods number her link with heartbeats while she is away: docs/robust.md "Link context,
as served"). Fred publishes 20,000 with 100 in flight, each waiting for its
``published``. She attaches again through relay ``b`` (:meth:`RobustClient.reattach`):
her first delivery shows the hole and her stub repairs it by link range.

The repair is larger than every bound it passes through: the SDK's attachment queue
(1,024), the relay's in-flight (256) and waiting (4,096) bounds for one endpoint, the
relay's in-flight bound to another pod (8,192), the store's pages and the fan-out's
chunks (1,000), the service's window of redeliveries. Before issue #29 a repair of more
than the first two together delivered nothing: the SDK's reader waited for the relay's
``ok`` to its gap request, which came behind the redeliveries it no longer read.
"""

from __future__ import annotations

import contextlib
import functools
import time
from pathlib import Path

import pytest

from apexmesh.client import PubsubClient
from apexmesh.client.attachment import DEFAULT_QUEUE_LIMIT
from apexmesh.client.robust import RobustClient
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.store.robust_reads import PAGE
from services.pubsub.robust_repairs import WINDOW
from tests.support.deployment import DOMAIN, deployment
from tests.support.robust_clients import publish_at_full_speed, receive_all, warm_up

pytestmark = [pytest.mark.system, pytest.mark.load, pytest.mark.timeout(600)]

TOPIC = "news"
AWAY = 20_000
IN_FLIGHT = 100
HEARTBEAT_MS = 1_000
RES = Resolution.BITS32
#: The relay's bounds for one endpoint and one pod stream (docs/relay.md).
RELAY_BOUNDS = (256, 4_096, 8_192)


async def test_a_subscriber_away_for_20000_publications_gets_them_all_in_order_once(
    tmp_path: Path,
) -> None:
    assert max(DEFAULT_QUEUE_LIMIT, *RELAY_BOUNDS, PAGE, WINDOW) < AWAY
    async with (
        deployment(tmp_path, relays=("a", "b"), pubsub=("p1", "p2")) as running,
        contextlib.AsyncExitStack() as stack,
    ):
        connect = functools.partial(running.connect_closed_by, stack)
        via_b = await connect("b")
        fred = RobustClient(await via_b.attach(f"fred@{DOMAIN}"))
        stack.push_async_callback(fred.aclose)
        owner = PubsubClient(await via_b.attach(f"mike@{DOMAIN}"))
        stack.push_async_callback(owner.aclose)
        wilma_session = await running.connect("a")  # closed by the test: her absence
        wilma = RobustClient(await wilma_session.attach(f"wilma@{DOMAIN}"))
        stack.push_async_callback(wilma.aclose)
        settings = RobustSettings(resolution=RES, heartbeat_ms=HEARTBEAT_MS)
        assert (await owner.create_topic(TOPIC, robust=settings)).code == 250
        stub = await wilma.follow(TOPIC, resolution=RES, heartbeat_ms=HEARTBEAT_MS)
        await wilma.subscribe(TOPIC, duration=3600)
        await warm_up(fred, wilma, TOPIC)

        await wilma_session.close()
        left = time.monotonic()
        away = await publish_at_full_speed(fred, TOPIC, "away", in_flight=IN_FLIGHT, at_least=AWAY)
        published_in = time.monotonic() - left

        returned = time.monotonic()
        await wilma.reattach(await (await connect("b")).attach(f"wilma@{DOMAIN}"))
        got = await receive_all(wilma, away, within=300)
        repaired_in = time.monotonic() - returned

        payloads = [p.payload for p in got if not p.payload.startswith(b"warm")]
        seqs = [p.source_seq for p in got]
        print(  # the figures of this run, in the test's output
            f"{len(away)} published while away in {published_in:.1f} s "
            f"({len(away) / published_in:.0f}/s); delivered {len(payloads)} "
            f"({len(payloads) - len(set(payloads))} twice) {repaired_in:.1f} s after her "
            f"return ({len(payloads) / repaired_in:.0f}/s); gaps {stub.stats.gaps_detected}, "
            f"link repairs {stub.stats.link_repairs}, source repairs "
            f"{stub.stats.source_repairs}, refused {stub.stats.refused}, duplicates dropped "
            f"{stub.stats.duplicates}"
        )
        assert len(away) == AWAY
        assert payloads == away, "every publication, in order, once"
        assert seqs == sorted(set(seqs))
        assert stub.stats.refused == 0
