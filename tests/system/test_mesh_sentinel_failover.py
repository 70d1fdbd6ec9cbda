"""A Sentinel failover under the running mesh (issue #30, "The same failover test on
Sentinel"): the primary is SIGKILLed while fred sends held data (hold4Endpoint) to dino,
who is not attached, and robust publications that barney follows, one after the other
through relay pod 1 (the scenario: tests/support/store_failover.py; the cluster's:
test_mesh_cluster_failover.py).

Every service of the README's local mesh is its own process with
``APEXMESH_REDIS_URL=redis+sentinel://...``: one primary, two replicas, three sentinels
(quorum 2, ``down-after-milliseconds 1000``) on loopback (tests/support/redis_cluster.py),
and ``APEXMESH_REDIS_WAIT_REPLICAS=1``, as the chart sets with replicas: a hold is
acknowledged only once ``WAIT`` saw a replica have it, and so is a robust publication
(docs/redis.md, "What an acknowledgement promises"): the promoted replica must have every
acknowledged one.
The store-level Sentinel failover is tests/apexmesh/store/test_sentinel_failover.py.

What is shown: every service follows the promoted replica without a restart, the first
acknowledged hold after the kill and every ``/readyz`` answering 200 again within the
issue's 15 s (scaled); dino then gets every acknowledged held data exactly once, and
barney every acknowledged robust publication, once and in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster_mesh import running_mesh
from tests.support.redis_cluster import SentinelGroup, running_sentinels
from tests.support.store_failover import acknowledged_data_survives_the_kill

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]

ROBUST_TOPIC = "failover.robust"


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelGroup]:
    with running_sentinels(tmp_path / "sentinel") as group:
        yield group


async def test_kill_9_of_the_sentinel_primary_loses_no_acknowledged_data(
    sentinels: SentinelGroup, tmp_path: Path
) -> None:
    settings = {"APEXMESH_REDIS_WAIT_REPLICAS": "1"}
    async with running_mesh(tmp_path / "mesh", sentinels.url, settings=settings) as mesh:
        primary = sentinels.primary
        await acknowledged_data_survives_the_kill(mesh, primary, "Sentinel primary", ROBUST_TOPIC)
