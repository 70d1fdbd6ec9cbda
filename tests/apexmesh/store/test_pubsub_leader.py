"""Leader election: the Redis lock (real redis-server) and the Kubernetes Lease adapter.

No Kubernetes API server can run here, so the Lease adapter is driven against a small
in-memory stand-in of ``CoordinationV1Api`` that keeps the API server's one rule that
matters: a write must carry the ``resourceVersion`` it read (409 otherwise), a create of
an existing object is 409, a read of a missing one 404."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from redis.asyncio import Redis

from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import PubsubStore
from apexmesh.store.pubsub_leader import KubernetesLeader, RedisLeader, elector_for


class FakeCoordination:
    """Leases by (namespace, name) with resourceVersion checks."""

    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], client.V1Lease] = {}
        self.version = 0

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        if (namespace, name) not in self.leases:
            raise ApiException(status=404, reason="Not Found")
        return copy.deepcopy(self.leases[(namespace, name)])

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease) -> client.V1Lease:
        assert body.metadata is not None
        assert body.metadata.name is not None
        key = (namespace, body.metadata.name)
        if key in self.leases:
            raise ApiException(status=409, reason="AlreadyExists")
        return self._store(key, body)

    def replace_namespaced_lease(
        self, name: str, namespace: str, body: client.V1Lease
    ) -> client.V1Lease:
        current = self.leases.get((namespace, name))
        if current is None:
            raise ApiException(status=404, reason="Not Found")
        assert current.metadata is not None
        assert body.metadata is not None
        if body.metadata.resource_version != current.metadata.resource_version:
            raise ApiException(status=409, reason="Conflict")
        return self._store((namespace, name), body)

    def _store(self, key: tuple[str, str], body: client.V1Lease) -> client.V1Lease:
        self.version += 1
        stored = copy.deepcopy(body)
        assert stored.metadata is not None
        stored.metadata.resource_version = str(self.version)
        self.leases[key] = stored
        return stored


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.mark.unit
async def test_one_kubernetes_leader_with_takeover_and_resign() -> None:
    api = FakeCoordination()
    clock = Clock()
    a = KubernetesLeader("pod-a", "apex", "apexmesh", api=api, clock=clock)
    b = KubernetesLeader("pod-b", "apex", "apexmesh", api=api, clock=clock)
    assert await a.lead("example.com", 3000)  # creates the Lease
    assert not await b.lead("example.com", 3000)
    assert await b.lead("rubble.com", 3000)  # one Lease per domain
    lease = api.leases[("apex", "apexmesh-pubsub-example-com")]
    assert lease.spec is not None
    assert lease.spec.holder_identity == "pod-a"
    assert lease.spec.lease_duration_seconds == 3
    clock.now += timedelta(seconds=2)
    assert await a.lead("example.com", 3000)  # renewed
    clock.now += timedelta(seconds=3)
    assert not await b.lead("example.com", 3000)  # renewal not overdue yet
    clock.now += timedelta(seconds=1)
    assert await b.lead("example.com", 3000)  # overdue: taken over
    assert not await a.lead("example.com", 3000)
    taken = api.leases[("apex", "apexmesh-pubsub-example-com")]
    assert taken.spec is not None
    assert taken.spec.lease_transitions == 1
    await a.resign("example.com")  # not the holder: nothing happens
    assert not await a.lead("example.com", 3000)
    await b.resign("example.com")
    assert await a.lead("example.com", 3000)  # released: taken at once


@pytest.mark.unit
async def test_a_lost_race_is_not_leadership() -> None:
    api = FakeCoordination()
    clock = Clock()
    a = KubernetesLeader("pod-a", "apex", "apexmesh", api=api, clock=clock)
    assert await a.lead("example.com", 1000)
    clock.now += timedelta(seconds=5)
    # pod-b and pod-c both read the overdue Lease; the second write carries a stale
    # resourceVersion and loses.
    stale = api.read_namespaced_lease("apexmesh-pubsub-example-com", "apex")
    b = KubernetesLeader("pod-b", "apex", "apexmesh", api=api, clock=clock)
    assert await b.lead("example.com", 1000)
    c = KubernetesLeader("pod-c", "apex", "apexmesh", api=api, clock=clock)
    original = api.read_namespaced_lease
    api.read_namespaced_lease = lambda name, namespace: stale  # type: ignore[method-assign]
    assert not await c.lead("example.com", 1000)
    api.read_namespaced_lease = original  # type: ignore[method-assign]


@pytest.mark.integration
async def test_redis_elector(redis: Redis, keys: Keys) -> None:
    a = elector_for("redis", PubsubStore(redis, keys, "pod-a"), "pod-a", keys.prefix)
    b = elector_for("auto", PubsubStore(redis, keys, "pod-b"), "pod-b", keys.prefix)
    assert isinstance(a, RedisLeader)
    assert isinstance(b, RedisLeader)  # not in a cluster
    assert await a.lead("example.com", 5000)
    assert not await b.lead("example.com", 5000)
    await a.resign("example.com")
    assert await b.lead("example.com", 5000)


class UnavailableCoordination(FakeCoordination):
    """An API server in the middle of an upgrade: every call answers 503."""

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        raise ApiException(status=503, reason="Service Unavailable")


@pytest.mark.unit
async def test_an_unavailable_api_server_means_not_leading_and_is_not_fatal() -> None:
    leader = KubernetesLeader("pod-a", "ns", "apexmesh", api=UnavailableCoordination())
    assert await leader.lead("example.com", 3000) is False
    assert await leader.lead("example.com", 3000) is False  # and the next round asks again
