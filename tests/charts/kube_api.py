"""An emulated Kubernetes API the real helm binaries can talk to (kmock, on loopback).

helm 3 needs a reachable API server even for ``helm install --dry-run=client`` (it reads
the server's version and API groups), and ``helm template --dry-run=server`` is how
``lookup`` is tested for real: the chart's generated TLS material and the Redis claim
size depend on what the namespace already holds. kmock's emulator
(tests/support/kubernetes_api.py) serves objects; this subclass adds what helm asks of
discovery: a server version the chart's kubeVersion accepts (kmock hard-codes v1.26),
every kind the chart renders, so helm can map each manifest to its resource, and the core
group's resource list under its real name, ``v1`` (kmock says ``/v1``, which helm's
REST mapper does not match).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import pytest
import yaml
from kmock._internal import rendering

from tests.support.kubernetes_api import KubernetesAPI

#: The version the emulated server reports (the newest kubernetes-validate knows well).
SERVER_VERSION: Final = ("1", "32", "v1.32.0")

#: Every kind the chart can render: (group/version, plural, kind, namespaced).
RESOURCES: Final = (
    ("v1", "namespaces", "Namespace", False),
    ("v1", "secrets", "Secret", True),
    ("v1", "configmaps", "ConfigMap", True),
    ("v1", "services", "Service", True),
    ("v1", "serviceaccounts", "ServiceAccount", True),
    ("v1", "pods", "Pod", True),
    ("v1", "persistentvolumeclaims", "PersistentVolumeClaim", True),
    ("apps/v1", "deployments", "Deployment", True),
    ("apps/v1", "statefulsets", "StatefulSet", True),
    ("batch/v1", "cronjobs", "CronJob", True),
    ("batch/v1", "jobs", "Job", True),
    ("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
    ("autoscaling/v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True),
    ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", True),
    ("rbac.authorization.k8s.io/v1", "roles", "Role", True),
    ("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding", True),
    ("coordination.k8s.io/v1", "leases", "Lease", True),
    ("cert-manager.io/v1", "certificates", "Certificate", True),
    ("monitoring.coreos.com/v1", "servicemonitors", "ServiceMonitor", True),
    ("monitoring.coreos.com/v1", "prometheusrules", "PrometheusRule", True),
)

#: The helm majors the chart is checked with (tools/helm.py's binaries).
MAJORS: Final = (3, 4)

_VERBS: Final = frozenset({"get", "list", "watch", "create", "update", "patch", "delete"})


class ChartAPI(KubernetesAPI):  # type: ignore[misc]
    """kmock's emulator as helm needs it (see the module docstring)."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for group_version, plural, kind, namespaced in RESOURCES:
            self.resources[f"{group_version}/{plural}"] = self.ResourceInfo(
                namespaced=namespaced, kind=kind, singular=kind.lower(), verbs=set(_VERBS)
            )

    async def _serve_version(self, request: rendering.Request) -> dict[str, Any]:
        answer: dict[str, Any] = await super()._serve_version(request)
        if answer.get("groupVersion") == "/v1":
            answer = {**answer, "groupVersion": "v1"}
        return answer

    async def _serve_server_version(self, request: rendering.Request) -> dict[str, Any]:
        major, minor, version = SERVER_VERSION
        answer: dict[str, Any] = await super()._serve_server_version(request)
        return {**answer, "major": major, "minor": minor, "gitVersion": version}


Test = TypeVar("Test", bound=Callable[..., Any])


def against_both_helms(test: Test) -> Test:
    """Mark an async test taking ``major`` and ``kmock``: run once per helm major, against
    a fresh emulated API server (an integration test: real processes, real HTTP)."""
    marked = pytest.mark.parametrize("major", MAJORS)(test)
    marked = pytest.mark.kmock(cls=ChartAPI)(marked)
    return pytest.mark.integration(marked)  # type: ignore[no-any-return]


def kubeconfig(api: Any, path: Path, namespace: str) -> Path:
    """A kubeconfig at ``path`` whose one context is the emulated server ``api``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": str(api.url).rstrip("/")}}],
        "users": [{"name": "tester", "user": {}}],
        "contexts": [
            {
                "name": "kmock",
                "context": {"cluster": "kmock", "user": "tester", "namespace": namespace},
            }
        ],
        "current-context": "kmock",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


__all__ = ["MAJORS", "RESOURCES", "SERVER_VERSION", "ChartAPI", "against_both_helms", "kubeconfig"]
