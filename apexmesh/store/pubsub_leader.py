"""Who leads a domain's pubsub pods: a Redis lock locally, a Kubernetes Lease in a cluster.

The leader ends the domain's leases and redoes orphaned journal entries (docs/pubsub.md).
Both electors offer ``lead(domain, lease_ms) -> bool`` (take or keep leadership for one
lease) and ``resign(domain)``:

- :class:`RedisLeader`: the ``pubsub_leader`` key of :mod:`apexmesh.store.pubsub`
  (SET NX PX, renewed and released by compare).
- :class:`KubernetesLeader`: a ``coordination.k8s.io/v1`` Lease per domain in the pod's
  namespace, through the ``kubernetes`` client (its calls are blocking: they run in a
  thread). The rule is :func:`apexmesh.pubsub.lease.decide`; every write carries the
  ``resourceVersion`` read, so a race is lost with 409, never won twice.

:func:`elector_for` picks one from the setting: ``kubernetes`` when asked for, or with
``auto`` when running in a cluster (``KUBERNETES_SERVICE_HOST`` set).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Protocol

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from apexmesh.pubsub.lease import LeaseRecord, decide, lease_name
from apexmesh.store.pubsub import PubsubStore

_log = logging.getLogger(__name__)

#: Where a pod finds its namespace (the service account mount).
NAMESPACE_FILE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class Elector(Protocol):
    async def lead(self, domain: str, lease_ms: int) -> bool: ...
    async def resign(self, domain: str) -> None: ...


class RedisLeader:
    """Leadership through the store's lock."""

    def __init__(self, store: PubsubStore) -> None:
        self._store = store

    async def lead(self, domain: str, lease_ms: int) -> bool:
        return await self._store.lead(domain, lease_ms)

    async def resign(self, domain: str) -> None:
        await self._store.resign(domain)


def load_config() -> None:
    """The pod's service account inside a cluster; elsewhere the kubeconfig
    (``$KUBECONFIG`` or ``~/.kube/config``): a pubsub pod run outside the cluster, or
    against an emulated API in tests (tests/apexmesh/store/test_pubsub_leader_kubernetes.py)."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]


def _ms(when: datetime | None) -> int:
    if when is None:
        return 0
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


class KubernetesLeader:
    """Leadership through one Lease per domain.

    ``api`` is a ``kubernetes.client.CoordinationV1Api`` (built from the in-cluster
    configuration when not given, else from the kubeconfig: :func:`load_config`);
    ``clock`` returns the time, for tests."""

    def __init__(
        self,
        pod_id: str,
        namespace: str,
        prefix: str,
        *,
        api: Any = None,
        clock: Any = None,
    ) -> None:
        self.pod_id = pod_id
        self.namespace = namespace
        self.prefix = prefix
        if api is None:
            load_config()
            api = client.CoordinationV1Api()
        self._api = api
        self._clock = clock or (lambda: datetime.now(UTC))

    async def lead(self, domain: str, lease_ms: int) -> bool:
        """Take or keep the Lease; an API server that fails or cannot be reached (an
        upgrade, a 5xx, a refused connection) means not leading this round, and the next
        round tries again: the caller's renewal loop must not die of it."""
        try:
            return await asyncio.to_thread(self._lead, domain, lease_ms)
        except (ApiException, HTTPError) as exc:
            _log.warning("Lease %s: %s", lease_name(self.prefix, domain), exc)
            return False

    async def resign(self, domain: str) -> None:
        await asyncio.to_thread(self._resign, domain)

    def _read(self, name: str) -> Any:

        try:
            return self._api.read_namespaced_lease(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _lead(self, domain: str, lease_ms: int) -> bool:

        name = lease_name(self.prefix, domain)
        now = self._clock()
        lease = self._read(name)
        record = None
        if lease is not None and lease.spec is not None:
            spec = lease.spec
            record = LeaseRecord(
                holder=spec.holder_identity or "",
                renew_ms=_ms(spec.renew_time),
                duration_ms=int(spec.lease_duration_seconds or 0) * 1000,
            )
        action = decide(record, self.pod_id, _ms(now))
        if action == "follow":
            return False
        seconds = max(1, math.ceil(lease_ms / 1000))
        transitions = 0 if lease is None or lease.spec is None else lease.spec.lease_transitions
        acquired = now
        if action == "renew" and lease is not None and lease.spec is not None:
            acquired = lease.spec.acquire_time or now
        spec = client.V1LeaseSpec(
            holder_identity=self.pod_id,
            lease_duration_seconds=seconds,
            acquire_time=acquired,
            renew_time=now,
            lease_transitions=(transitions or 0) + (1 if action == "take" else 0),
        )
        try:
            if action == "create":
                body = client.V1Lease(metadata=client.V1ObjectMeta(name=name), spec=spec)
                self._api.create_namespaced_lease(self.namespace, body)
            else:
                meta = client.V1ObjectMeta(
                    name=name, resource_version=lease.metadata.resource_version
                )
                self._api.replace_namespaced_lease(
                    name, self.namespace, client.V1Lease(metadata=meta, spec=spec)
                )
        except ApiException as exc:
            if exc.status in (404, 409):  # another pod wrote first
                return False
            raise
        if action != "renew":
            _log.info("pod %s leads %s (Lease %s/%s)", self.pod_id, domain, self.namespace, name)
        return True

    def _resign(self, domain: str) -> None:

        name = lease_name(self.prefix, domain)
        lease = self._read(name)
        if lease is None or lease.spec is None or lease.spec.holder_identity != self.pod_id:
            return
        spec = client.V1LeaseSpec(
            holder_identity="",
            lease_duration_seconds=lease.spec.lease_duration_seconds,
            lease_transitions=lease.spec.lease_transitions,
        )
        meta = client.V1ObjectMeta(name=name, resource_version=lease.metadata.resource_version)
        try:
            self._api.replace_namespaced_lease(
                name, self.namespace, client.V1Lease(metadata=meta, spec=spec)
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise


def elector_for(
    mode: str, store: PubsubStore, pod_id: str, prefix: str, namespace: str = ""
) -> Elector:
    """``redis``, ``kubernetes``, or ``auto`` (Kubernetes inside a cluster)."""
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if mode == "kubernetes" or (mode == "auto" and in_cluster):
        if not namespace:
            namespace = NAMESPACE_FILE.read_text(encoding="utf-8").strip()
        return KubernetesLeader(pod_id, namespace, prefix)
    return RedisLeader(store)


__all__ = ["Elector", "KubernetesLeader", "RedisLeader", "elector_for"]
