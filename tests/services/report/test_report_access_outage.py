"""Issue #34: a status report owed to a sender survives an access-service outage.

A real mesh (tests/support/mesh.py: relays, access and report services in-process over
real sockets and gRPC, a real redis-server). Senders attached to relay ``a`` send data
with a statusRequest to barney. The access service is stopped while they send: the data
still reaches barney (its access decision is cached), but the report's own access check
(may apex=report@example.com send to the sender?) cannot be made, and was lost before
the fix (the relay said ``ok`` to the report service after failing the check, or the
report service gave up with 451 after one attempt). The access service comes back on
the same port, and every owed report must arrive, each saying 250 for barney.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Final

import pytest

from apexmesh.client import ApexClient, Attachment, SendResult, connect_endpoint
from apexmesh.store.keys import Keys
from services.access.app import AccessApp
from tests.support.mesh import Mesh, running_mesh
from tests.support.polling import scaled, wait_until
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

#: Senders whose reports are first owed while the access service is down (their
#: report's access decision is not cached yet), and one whose reports came before.
SENDERS: Final = ("wilma@example.com", "pebbles@example.com")
EARLY: Final = "fred@example.com"
PER_SENDER: Final = 3


def refused_for_access(mesh: Mesh) -> float:
    """Copies the example.com relays could not deliver with 421 (the access service not
    available is one reason; nothing else fails here)."""
    return sum(
        relay.registry.get_sample_value("apexmesh_relay_delivery_outcomes_total", {"result": "421"})
        or 0.0
        for relay in (mesh.a, mesh.b)
    )


async def test_every_report_owed_during_an_access_outage_arrives(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with running_mesh(redis_server, keys, tmp_path) as mesh:
        port = mesh.a.edge_port
        clients: list[ApexClient] = []
        restarted: AccessApp | None = None
        try:
            for _ in range(1 + len(SENDERS) + 1):
                client = await connect_endpoint("127.0.0.1", port, timeout=scaled(10.0))
                clients.append(client)
            barney = await clients[0].attach("barney@example.com")
            senders: dict[str, Attachment] = {
                identity: await client.attach(identity)
                for identity, client in zip((EARLY, *SENDERS), clients[1:], strict=True)
            }
            for sender in senders.values():  # barney's decisions for each sender cached
                await sender.send("barney@example.com", b"warm")
            early = [
                await senders[EARLY].send("barney@example.com", b"before", status_request=True)
                for _ in range(PER_SENDER)
            ]
            for result in early:
                await result.reports(1, timeout=scaled(20))

            access_port = mesh.access.grpc_port
            await mesh.access.stop()
            owed: list[tuple[str, SendResult]] = [
                (
                    identity,
                    await senders[identity].send(
                        "barney@example.com", f"during {n}".encode(), status_request=True
                    ),
                )
                for n in range(PER_SENDER)
                for identity in (EARLY, *SENDERS)
            ]
            # The outage is felt: the report of each sender whose report decision was not
            # cached has failed its access check (421) at a relay, at least once.
            await wait_until(
                lambda: refused_for_access(mesh) >= len(SENDERS),
                30,
                every=0.05,  # polling a counter: no event to await
                what="a refused access check for every sender",
            )
            restarted = AccessApp(dataclasses.replace(mesh.access.settings, grpc_port=access_port))
            await restarted.start()

            arrived = await asyncio.gather(
                *(result.reports(1, timeout=scaled(60)) for _, result in owed)
            )
            assert (
                mesh.report_example.registry.get_sample_value("apexmesh_report_retries_total") or 0
            ) > 0
            for (identity, _), reports in zip(owed, arrived, strict=True):
                (report,) = reports
                assert [(str(d.identity), d.reply.code) for d in report.destinations] == [
                    ("barney@example.com", 250)
                ], identity
            received = 0
            async with asyncio.timeout(scaled(20)):
                while received < len(senders) + PER_SENDER + len(owed):  # every data, once
                    await barney.receive()
                    received += 1
        finally:
            for client in clients:
                await client.close(timeout=scaled(5.0))
            if restarted is not None:
                await restarted.stop()
