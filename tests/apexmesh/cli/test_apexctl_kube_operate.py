"""apexctl's operator tasks through a Kubernetes context, against the emulated API server
(kmock on loopback, as test_apexctl_kube.py): ``status`` reports the pods Kubernetes
cannot run (Pending and unschedulable, an image it cannot pull, CrashLoopBackOff) with
Kubernetes' reason, as not ready, so a service with no running pod is CRITICAL instead of
missing; ``credentials`` patches the release's SASL Secret; ``drain --undo``,
``held purge``, ``log-level`` and ``certs check`` reach the pods through the context."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from apexmesh.aio.tasks import within
from tests.support.demo_mesh import DemoMesh
from tests.support.polling import scaled
from tests.support.redis_server import free_port

pytestmark = pytest.mark.system

NAMESPACE = "apex"
RELEASE = "apex"
SASL_SECRET = f"{RELEASE}-apex-mesh-relay-sasl"  # the chart's FULLNAME-relay-sasl


def pod(
    name: str,
    service: str,
    domain: str,
    ports: dict[str, int],
    status: dict[str, Any],
    release: str = RELEASE,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/part-of": "apex-mesh",
                "app.kubernetes.io/instance": release,
                "app.kubernetes.io/component": service,
            },
        },
        "spec": {
            "containers": [
                {
                    "name": service,
                    "image": "x",
                    "ports": [{"name": n, "containerPort": p} for n, p in ports.items()],
                    "env": [{"name": "APEXMESH_DOMAINS", "value": domain}],
                }
            ]
        },
        "status": status,
    }


def running() -> dict[str, Any]:
    return {"phase": "Running", "podIP": "127.0.0.1"}


def image_pull() -> dict[str, Any]:
    return {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": "pubsub",
                "ready": False,
                "restartCount": 0,
                "image": "x",
                "imageID": "",
                "state": {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": 'Back-off pulling image "docker.io/apexmesh/pubsub:9.9"',
                    }
                },
            }
        ],
    }


def unschedulable() -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu.",
            }
        ],
    }


def crash_loop() -> dict[str, Any]:
    return {
        "phase": "Running",
        "podIP": "127.0.0.1",
        "containerStatuses": [
            {
                "name": "relay",
                "ready": False,
                "restartCount": 5,
                "image": "x",
                "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}},
                "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}},
            }
        ],
    }


async def apexctl(env: dict[str, str], *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        "apexctl",
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await within(process.communicate(stdin), scaled(120))
    return process.returncode or 0, out.decode(), err.decode()


def cluster(kmock: Any, demo_mesh: DemoMesh, tmp_path: Path) -> dict[str, str]:
    """The demo mesh's processes as the release's pods, its admin Secret, a kubeconfig
    for the emulator; the environment of an operator whose context is that release."""
    context = demo_mesh.context()
    for target in context.services:
        ports = {"http": int(target.admin_url.rpartition(":")[2])}
        if target.edge:
            ports["beep-edge"] = int(target.edge.rpartition(":")[2])
        kmock.objects["v1/pods", NAMESPACE, target.name] = pod(
            target.name, target.service, target.domain, ports, running()
        )
    admin = f"{RELEASE}-apex-mesh-admin"
    kmock.objects["v1/secrets", NAMESPACE, admin] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": admin, "namespace": NAMESPACE},
        "data": {
            "admin-token": base64.b64encode(context.admin_token.encode()).decode(),
            "read-token": base64.b64encode(context.read_token.encode()).decode(),
        },
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": str(kmock.url)}}],
                "users": [{"name": "op", "user": {"token": "t"}}],
                "contexts": [{"name": "emulated", "context": {"cluster": "kmock", "user": "op"}}],
                "current-context": "emulated",
            }
        ),
        encoding="utf-8",
    )
    env = {**demo_mesh.env(), "KUBECONFIG": str(kubeconfig)}
    env["APEXCTL_CONFIG"] = str(tmp_path / "apexctl.yaml")
    env.pop("APEXCTL_CONTEXT")
    return env


async def add_context(env: dict[str, str], name: str, release: str) -> None:
    code, _, err = await apexctl(
        env,
        "context",
        "add",
        name,
        "--kube-context",
        "emulated",
        "--namespace",
        NAMESPACE,
        "--release",
        release,
        "--direct",
    )
    assert code == 0, err


async def test_status_reports_pods_kubernetes_cannot_run(
    kmock: Any, demo_mesh: DemoMesh, tmp_path: Path
) -> None:
    env = cluster(kmock, demo_mesh, tmp_path)
    kmock.objects["v1/pods", NAMESPACE, "apex-pubsub-new"] = pod(
        "apex-pubsub-new", "pubsub", "example.com", {"http": 8403}, image_pull()
    )
    kmock.objects["v1/pods", NAMESPACE, "apex-report-big"] = pod(
        "apex-report-big", "report", "example.com", {"http": 8404}, unschedulable()
    )
    kmock.objects["v1/pods", NAMESPACE, "apex-relay-crashing"] = pod(
        "apex-relay-crashing",
        "relay",
        "example.com",
        {"http": free_port(), "beep-edge": free_port()},
        crash_loop(),
    )
    await add_context(env, "cluster", RELEASE)
    code, out, err = await apexctl(env, "--json", "status")
    assert code == 1, out + err  # WARNING: every service still has a ready pod
    status = json.loads(out)
    rows = {row["name"]: row for row in status["services"]}
    assert not rows["apex-pubsub-new"]["ready"]
    assert "Pending: pubsub: ImagePullBackOff" in rows["apex-pubsub-new"]["reason"]
    assert "Back-off pulling image" in rows["apex-pubsub-new"]["reason"]
    assert "Unschedulable - 0/3 nodes are available" in rows["apex-report-big"]["reason"]
    crashing = rows["apex-relay-crashing"]["reason"]
    assert "CrashLoopBackOff (restarts 5, last exit code 2)" in crashing
    assert status["summary"].startswith(f"{len(rows) - 3}/{len(rows)} services ready")
    code, out, _ = await apexctl(env, "status")
    assert code == 1
    assert "APEX-MESH WARNING" in out
    assert "ImagePullBackOff" in out

    # A release whose every pod is Pending: CRITICAL, each pod named, not "no services".
    kmock.objects["v1/pods", NAMESPACE, "broken-relay"] = pod(
        "broken-relay", "relay", "example.com", {"http": 8401}, image_pull(), release="broken"
    )
    kmock.objects["v1/pods", NAMESPACE, "broken-access"] = pod(
        "broken-access", "access", "example.com", {"http": 8402}, unschedulable(), "broken"
    )
    kmock.objects["v1/secrets", NAMESPACE, "broken-apex-mesh-admin"] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "broken-apex-mesh-admin", "namespace": NAMESPACE},
        "data": {"admin-token": base64.b64encode(b"x" * 24).decode()},
    }
    await add_context(env, "broken", "broken")
    code, out, _ = await apexctl(env, "status")
    assert code == 2, out
    assert "APEX-MESH CRITICAL - 0/2 services ready" in out
    assert "no ready pod: access@example.com, relay@example.com" in out


async def test_credentials_patch_the_release_secret(
    kmock: Any, demo_mesh: DemoMesh, tmp_path: Path
) -> None:
    env = cluster(kmock, demo_mesh, tmp_path)
    kmock.objects["v1/secrets", NAMESPACE, SASL_SECRET] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SASL_SECRET, "namespace": NAMESPACE},
        "data": {
            "credentials": base64.b64encode(b"# endpoints\nhelm-test@example.com:abc\n").decode()
        },
    }
    await add_context(env, "cluster", RELEASE)
    password = tmp_path / "password"
    password.write_text("slate-quarry\n", encoding="utf-8")

    async def stored() -> str:
        url = f"{kmock.url}/api/v1/namespaces/{NAMESPACE}/secrets/{SASL_SECRET}"
        async with httpx.AsyncClient() as http:
            body = (await http.get(url)).json()
        return base64.b64decode(body["data"]["credentials"]).decode()

    code, out, err = await apexctl(
        env, "--json", "credentials", "add", "fred@example.com", "--password-file", str(password)
    )
    assert code == 0, out + err
    assert json.loads(out)["changed"] == f"Secret {NAMESPACE}/{SASL_SECRET}"
    assert await stored() == (
        "# endpoints\nhelm-test@example.com:abc\nfred@example.com:slate-quarry\n"
    )
    code, out, err = await apexctl(env, "--json", "credentials", "rm", "helm-test@example.com")
    assert code == 0, out + err
    assert await stored() == "# endpoints\nfred@example.com:slate-quarry\n"
    code, _, err = await apexctl(env, "credentials", "passwd", "dino@example.com", "--generate")
    assert code == 2
    assert "dino@example.com has no credentials in Secret" in err


async def test_drain_undo_log_level_and_certs_through_the_cluster(
    kmock: Any, demo_mesh: DemoMesh, tmp_path: Path
) -> None:
    env = cluster(kmock, demo_mesh, tmp_path)
    await add_context(env, "cluster", RELEASE)
    pod2 = "relay-example.com-2"
    code, out, err = await apexctl(env, "--json", "drain", pod2)
    try:
        assert code == 0, err
        assert json.loads(out)["draining"] is True
    finally:
        code, out, err = await apexctl(env, "--json", "drain", pod2, "--undo")
    assert code == 0, err
    assert json.loads(out)["draining"] is False
    code, out, err = await apexctl(env, "--json", "log-level", "--service", "report")
    assert code == 0, err
    assert {row["level"] for row in json.loads(out)} <= {"DEBUG", "INFO"}
    code, out, err = await apexctl(env, "--json", "held", "purge", "nobody@example.com", "-y")
    assert code == 0, err
    assert json.loads(out) == {"endpoint": "nobody@example.com", "purged": 0}
    code, out, err = await apexctl(env, "--json", "certs", "check")
    # the cluster context carries no CA file: verified against the system roots, which
    # do not know the demo's CA, so the check is CRITICAL and says why
    assert code == 2, err
    assert all(not row["verified"] and row["problem"] for row in json.loads(out))
