"""apexctl's Kubernetes context against an emulated API server (kmock, on loopback): it
lists the release's pods by label, reads the admin token from the release's Secret,
and reaches each pod's admin API. The emulated pods stand for the running local mesh's
processes (pod IP 127.0.0.1, their real ports), reached with ``--direct`` (kmock has no
port-forward stream; the port-forward path is the same code up to the socket)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from apexmesh.aio.tasks import within
from tests.support.demo_mesh import DemoMesh
from tests.support.polling import scaled

pytestmark = pytest.mark.system

NAMESPACE = "apex"
RELEASE = "apex"


def pod(target: Any) -> dict[str, Any]:
    http = int(target.admin_url.rpartition(":")[2])
    ports = [{"name": "http", "containerPort": http}]
    if target.edge:
        ports.append({"name": "beep-edge", "containerPort": int(target.edge.rpartition(":")[2])})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": target.name,
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/part-of": "apex-mesh",
                "app.kubernetes.io/instance": RELEASE,
                "app.kubernetes.io/component": target.service,
            },
        },
        "spec": {
            "containers": [
                {
                    "name": target.service,
                    "image": "x",
                    "ports": ports,
                    # as the chart sets it (the domains a pod serves)
                    "env": [{"name": "APEXMESH_DOMAINS", "value": target.domain}],
                }
            ]
        },
        "status": {"phase": "Running", "podIP": "127.0.0.1"},
    }


async def apexctl(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        "apexctl",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await within(process.communicate(), scaled(120))
    return process.returncode or 0, out.decode(), err.decode()


async def test_kubernetes_context_finds_pods_and_token(
    kmock: Any, demo_mesh: DemoMesh, tmp_path: Path
) -> None:
    context = demo_mesh.context()
    for target in context.services:
        kmock.objects["v1/pods", NAMESPACE, target.name] = pod(target)
    kmock.objects["v1/pods", NAMESPACE, "other-app"] = {
        "metadata": {"name": "other-app", "namespace": NAMESPACE, "labels": {}},
        "spec": {"containers": []},
        "status": {"phase": "Running", "podIP": "127.0.0.1"},
    }
    secret = f"{RELEASE}-apex-mesh-admin"  # the chart's FULLNAME-admin
    kmock.objects["v1/secrets", NAMESPACE, secret] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret, "namespace": NAMESPACE},
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
    code, _, err = await apexctl(
        env,
        "context",
        "add",
        "cluster",
        "--kube-context",
        "emulated",
        "--namespace",
        NAMESPACE,
        "--release",
        RELEASE,
        "--direct",
    )
    assert code == 0, err
    code, out, err = await apexctl(env, "--json", "servers", "ls")
    assert code == 0, err
    servers = json.loads(out)
    assert {s["name"] for s in servers} == {t.name for t in context.services}
    assert all(s["ready"] for s in servers)
    code, out, err = await apexctl(env, "--json", "topics", "ls")
    assert code == 0, err
    assert any(t["topic"] == "demo.news" for t in json.loads(out))
    code, out, _ = await apexctl(env, "status")
    assert code == 0
    assert "APEX-MESH OK" in out
    # the tokens came from the release's Secret: the named context holds none
    saved = yaml.safe_load((tmp_path / "apexctl.yaml").read_text(encoding="utf-8"))
    assert "admin_token" not in saved["contexts"]["cluster"]
    assert context.admin_token not in (tmp_path / "apexctl.yaml").read_text(encoding="utf-8")
