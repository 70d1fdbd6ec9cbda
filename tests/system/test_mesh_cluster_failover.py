"""A Redis Cluster failover under the running mesh (issue #30): the primary of the
``{relay}`` slot (attachments and all held data), which also serves the robust topic's
slot, is SIGKILLed while fred sends held data (hold4Endpoint) to dino, who is not
attached, and robust publications that barney follows, one after the other through
relay pod 1 (the scenario: tests/support/store_failover.py).

The mesh is the README's local mesh, every service its own process, on a six-node
cluster (tests/support/cluster_mesh.py); the store-level failover is
tests/apexmesh/store/cluster/test_cluster_failover.py. The Sentinel variant is
test_mesh_sentinel_failover.py.

What is shown: the first acknowledged hold after the kill, and every service's
``/readyz`` answering 200 again, within the issue's 15 s (scaled); then dino attaches on
pod 2 and gets every acknowledged held data exactly once, and barney every acknowledged
robust publication, once and in order. Without WAIT
(``APEXMESH_REDIS_WAIT_REPLICAS=0``, the mesh's default) Redis's asynchronous
replication could lose the last acknowledged holds (docs/redis.md, "What an
acknowledgement promises"); that would fail the test, and has not happened here. WAIT 1
on a cluster needs two replicas per primary (ibid.), nine nodes instead of six.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from apexmesh.ops.localmesh import redis_prefix
from apexmesh.store.connection import keys_for
from tests.support.cluster_mesh import running_cluster, running_mesh
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.store_failover import DINO, acknowledged_data_survives_the_kill

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]


def robust_topic_beside(cluster: RedisClusterNodes, key: str) -> str:
    """A robust topic name whose slot (``{example.com:<topic>}``) the primary of ``key``
    serves too, so that one kill hits the held data and the robust topic."""
    primary = cluster.owner(key)
    for n in range(1000):
        topic = f"failover.robust.{n}"
        if cluster.owner(f"{{example.com:{topic}}}") is primary:
            return topic
    raise LookupError(f"no robust topic name on the primary of {key!r}")


async def test_kill_9_of_the_relay_slots_primary_loses_no_acknowledged_data(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path / "cluster") as cluster:
        keys = keys_for(cluster.url, redis_prefix("example.com"))
        held = keys.held_data(DINO)
        topic = robust_topic_beside(cluster, held)
        async with running_mesh(tmp_path / "mesh", cluster.url) as mesh:
            primary = cluster.owner(held)
            await acknowledged_data_survives_the_kill(mesh, primary, "{relay} primary", topic)
