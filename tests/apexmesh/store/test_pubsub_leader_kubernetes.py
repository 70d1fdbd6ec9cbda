"""Pubsub leader election through a Kubernetes Lease, two real pubsub processes.

The Kubernetes API is kmock's emulator on loopback (shared/ECOSYSTEM.md section 3), with
PUT and resourceVersion added (tests/support/kubernetes_api.py): an in-memory API server
speaking real HTTP, reached by the official ``kubernetes`` client through a kubeconfig,
as a pod outside the cluster would. Two ``python -m
services.pubsub`` processes elect a leader for example.com; the leader is SIGKILLed (it
releases nothing) and the other must take the Lease over within the lease time plus one
renewal period.
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from apexmesh.pubsub.lease import lease_name
from apexmesh.store.keys import Keys
from tests.support.kubernetes_api import KubernetesAPI
from tests.support.polling import scaled, wait_until
from tests.support.processes import ServiceProcess
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

NAMESPACE = "apex"
DOMAIN = "example.com"
LEASE_MS = 2000
#: The pods renew every third of the lease (services/pubsub/app.py).
RENEW_SECONDS = LEASE_MS / 3000
#: What a loaded two-core machine may add: process scheduling, HTTP round trips.
SLACK_SECONDS = 1.5


def kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "emulated", "cluster": {"server": url}}],
                "users": [{"name": "pubsub", "user": {"token": "not-checked"}}],
                "contexts": [
                    {
                        "name": "emulated",
                        "context": {
                            "cluster": "emulated",
                            "user": "pubsub",
                            "namespace": NAMESPACE,
                        },
                    }
                ],
                "current-context": "emulated",
            }
        ),
        encoding="utf-8",
    )
    return path


def pubsub_env(pod: str, redis_server: RedisServer, keys: Keys, config: Path) -> dict[str, str]:
    return {
        "APEXMESH_DEV": "1",
        "APEXMESH_REDIS_URL": redis_server.url,
        "APEXMESH_REDIS_PREFIX": keys.prefix,
        "APEXMESH_PUBSUB_DOMAINS": DOMAIN,
        "APEXMESH_PUBSUB_POD_ID": pod,
        # Neither is dialled for leadership; the channels are lazy.
        "APEXMESH_ACCESS_ADDRESS": "127.0.0.1:9",
        "APEXMESH_RELAY_ADDRESSES": "127.0.0.1:9",
        "APEXMESH_PUBSUB_GRPC_PORT": "0",
        "APEXMESH_PUBSUB_HTTP_PORT": "0",
        "APEXMESH_PUBSUB_LEASE_MS": str(LEASE_MS),
        "APEXMESH_PUBSUB_LEADER_ELECTION": "kubernetes",
        "APEXMESH_PUBSUB_NAMESPACE": NAMESPACE,
        "KUBECONFIG": str(config),
    }


def read_lease(api: client.CoordinationV1Api, name: str) -> Any:
    try:
        return api.read_namespaced_lease(name, NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


async def holder_becomes(
    api: client.CoordinationV1Api, name: str, wanted: set[str], within: float
) -> Any:
    lease: Any = None

    async def held() -> bool:
        nonlocal lease
        lease = await asyncio.to_thread(read_lease, api, name)
        return lease is not None and lease.spec.holder_identity in wanted

    try:
        await wait_until(held, within, every=0.05, what=f"Lease {name} held by one of {wanted}")
    except TimeoutError:
        holder = None if lease is None else lease.spec.holder_identity
        raise AssertionError(f"Lease {name} held by {holder!r}, not one of {wanted}") from None
    return lease


async def leader_gauge(process: ServiceProcess) -> float:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{process.info['http_port']}/metrics")).text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("apexmesh_pubsub_leader ")]
    return float(line.split()[1])


@pytest.mark.timeout(90)
@pytest.mark.kmock(cls=KubernetesAPI)
async def test_the_other_pod_takes_the_lease_within_the_lease_time(
    kmock: Any, redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", str(kmock.url))
    api = client.CoordinationV1Api(
        client.ApiClient(client.Configuration(host=str(kmock.url).rstrip("/")))
    )
    name = lease_name(keys.prefix, DOMAIN)
    pods = {
        pod: ServiceProcess(
            "services.pubsub",
            pubsub_env(pod, redis_server, keys, config),
            tmp_path / f"{pod}.log",
        )
        for pod in ("pubsub-a", "pubsub-b")
    }
    try:
        # The API server runs on this test's event loop: start the processes off it.
        await asyncio.gather(*(asyncio.to_thread(p.start) for p in pods.values()))
        lease = await holder_becomes(api, name, set(pods), within=10)
        leader = lease.spec.holder_identity
        (follower,) = set(pods) - {leader}
        assert lease.spec.lease_duration_seconds == math.ceil(LEASE_MS / 1000)
        # Exactly one leads, and each pod says so on /metrics.
        # Time passing is what is tested: the lease stays with the leader over three
        # renewals (read from the API server off the loop, so not a still_true condition).
        await asyncio.sleep(3 * RENEW_SECONDS)
        assert (await asyncio.to_thread(read_lease, api, name)).spec.holder_identity == leader
        assert await leader_gauge(pods[leader]) == 1.0
        assert await leader_gauge(pods[follower]) == 0.0
        transitions = lease.spec.lease_transitions or 0

        process = pods[leader].process
        process.kill()
        await asyncio.to_thread(process.wait)
        killed = time.monotonic()
        last = await asyncio.to_thread(read_lease, api, name)
        assert last.spec.holder_identity == leader  # SIGKILL released nothing

        limit = scaled(LEASE_MS / 1000 + RENEW_SECONDS + SLACK_SECONDS)
        taken = await holder_becomes(api, name, {follower}, within=limit + 5)
        took = time.monotonic() - killed
        assert took <= limit, f"takeover after {took:.2f}s, limit {limit:.2f}s"
        # In the Lease's own clock: taken once the old renewal had expired, not before.
        renewed = last.spec.renew_time.astimezone(UTC)
        acquired = taken.spec.acquire_time.astimezone(UTC)
        gap = (acquired - renewed).total_seconds()
        assert LEASE_MS / 1000 <= gap <= limit, gap
        assert taken.spec.lease_transitions == transitions + 1
        assert taken.spec.renew_time.astimezone(UTC) <= datetime.now(UTC)
        assert await leader_gauge(pods[follower]) == 1.0
    finally:
        for process in pods.values():
            await asyncio.to_thread(process.stop)
