"""The local mesh of the README's run command (apexmesh/ops/localmesh.py), every service
its own process, TLS and SASL on, with its state on a real Redis Cluster instead of its
own redis-server (issue #30): the services get ``APEXMESH_REDIS_URL=redis+cluster://...``
and so a cluster client and hash-tagged keys (docs/redis.md, "Slot groups").

The cluster is the caller's (:class:`~tests.support.redis_cluster.RedisClusterNodes`,
six nodes on kernel-chosen loopback ports, no password: hence ``APEXMESH_DEV=1``), so
that a test can kill one of its nodes while the mesh runs; a Sentinel group's URL
(:class:`~tests.support.redis_cluster.SentinelGroup`) works the same way. Only how Redis
starts differs from :class:`LocalMesh`; the services, their settings and the demo's cast
are the same.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path

from apexmesh.client import ApexClient
from apexmesh.ops.localmesh import LocalMesh, Relay
from scripts.demo import endpoint
from tests.support.redis_cluster import RedisClusterNodes


class ClusterLocalMesh(LocalMesh):
    """:class:`LocalMesh` whose services keep their state on the Redis Cluster at
    ``cluster_url``; it starts and stops no Redis of its own."""

    def __init__(
        self,
        workdir: Path,
        cluster_url: str,
        *,
        topics: Sequence[str] = (),
        settings: Mapping[str, str] | None = None,
        dev: bool = False,
    ) -> None:
        # No dashboard: nothing here reads it, and it is one process less to start.
        # APEXMESH_DEV=1 because the cluster has no password, which the services refuse
        # otherwise (apexmesh/ops/settings.py); as in tests/support/deployment.py, it
        # only allows plaintext and anonymous attach: the relays still offer TLS and
        # SASL and the demo's endpoints still use both. ``dev`` is LocalMesh's (plain
        # BEEP, anonymous attach), for bench/pubsub_fanout.py --redis cluster.
        super().__init__(
            workdir,
            dev=dev,
            topics=topics,
            dashboard=False,
            settings={"APEXMESH_DEV": "1", **(settings or {})},
        )
        self.cluster_url = cluster_url

    @property
    def redis_url(self) -> str:
        """The cluster (what the services and the snapshot job are given)."""
        return self.cluster_url

    async def _start_redis(self) -> None:
        """Nothing to start: the cluster is up before the mesh (the caller's)."""


@contextlib.contextmanager
def running_cluster(directory: Path) -> Iterator[RedisClusterNodes]:
    """Six nodes (three primaries, three replicas), stopped on exit."""
    cluster = RedisClusterNodes(directory)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@contextlib.asynccontextmanager
async def running_mesh(
    workdir: Path,
    redis_url: str,
    *,
    topics: Sequence[str] = (),
    settings: Mapping[str, str] | None = None,
) -> AsyncIterator[ClusterLocalMesh]:
    """The mesh on the Redis of ``redis_url`` (a cluster's, or a Sentinel group's:
    ``redis+sentinel://``); on exit every service is stopped, and each must have exited
    0 on its SIGTERM (none crashed; as test_mesh.py checks)."""
    mesh = ClusterLocalMesh(workdir, redis_url, topics=topics, settings=settings)
    await mesh.start()
    try:
        yield mesh
    finally:
        await mesh.stop()
    codes = mesh.exit_codes()
    assert all(code == 0 for code in codes.values()), codes


async def session(
    stack: contextlib.AsyncExitStack, mesh: LocalMesh, relay: Relay, name: str
) -> ApexClient:
    """A TLS + SCRAM-SHA-256 session of ``name`` on ``relay`` (scripts/demo.py's),
    closed with ``stack``."""
    context = ssl.create_default_context(cafile=str(mesh.ca_file))
    client = await endpoint(mesh, relay, name, context)
    stack.push_async_callback(client.close)
    return client


__all__ = ["ClusterLocalMesh", "running_cluster", "running_mesh", "session"]
