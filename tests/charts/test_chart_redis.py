"""The chart's own Redis (issue #31): its password never on a command line, and a
``redis.persistence.size`` change that no longer breaks ``helm upgrade``.

- The StatefulSet passed ``--requirepass $(REDIS_PASSWORD)``, so the password was in the
  process's command line (ps, /proc/PID/cmdline). Now redis-server reads it as
  configuration on its standard input; the rendered command is run here with a real
  redis-server (on a Unix socket in a temporary directory, never the system's 6379),
  which must refuse a client without the password, accept one with it, and show the
  password in neither its command line nor its environment.
- ``volumeClaimTemplates`` cannot change, so a new size failed the upgrade. The claim
  template now keeps the size of the StatefulSet that exists (lookup), and NOTES say
  how to grow the volume: tested with the real helm 3 and helm 4 against an emulated API
  server holding that StatefulSet (kube_api.py).
"""

from __future__ import annotations

import asyncio
import copy
import json
import secrets
import subprocess
from pathlib import Path
from typing import Any, Final

import helm_python as helm
import pytest
import redis as redis_py

from tests.charts.conftest import (
    CHART,
    CI_VALUES,
    Doc,
    containers,
    named,
    of_kind,
    render,
    values_of,
)
from tests.charts.kube_api import ChartAPI, against_both_helms, kubeconfig
from tests.support.polling import block_until, scaled
from tests.support.redis_server import redis_binary
from tools import helm as tool

pytestmark = pytest.mark.chart

STATEFULSET: Final = "apex-mesh-redis"
NAMESPACE: Final = tool.NAMESPACE


def redis_container(docs: list[Doc]) -> Doc:
    (only,) = named(docs, "StatefulSet", STATEFULSET)["spec"]["template"]["spec"]["containers"]
    return only  # type: ignore[no-any-return]


@pytest.mark.unit
@pytest.mark.parametrize(
    "values", [None, *CI_VALUES], ids=lambda v: "none" if v is None else v.stem
)
def test_no_password_is_on_any_command_line(values: Path | None) -> None:
    docs = render(None if values is None else values_of(values))
    for workload, container in containers(docs):
        line = json.dumps([container.get("command", []), container.get("args", [])])
        where = f"{workload['metadata']['name']}/{container['name']}"
        assert "PASSWORD)" not in line, f"{where}: a password variable on its command line"
        assert "--requirepass" not in line, where
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            command = container.get(probe, {}).get("exec", {}).get("command", [])
            assert "-a" not in command, f"{where}: {probe} passes a password"


def _running_redis(container: Doc, tmp_path: Path, password: str) -> subprocess.Popen[bytes]:
    """The container's command and arguments, run with the host's redis-server: on a Unix
    socket in ``tmp_path`` instead of port 6379 and /data, nothing else changed."""
    command, args = list(container["command"]), list(container["args"])
    args[args.index("--port") + 1] = "0"
    args[args.index("--dir") + 1] = str(tmp_path)
    args += ["--unixsocket", str(tmp_path / "redis.sock")]
    script = command[2].replace("redis-server", redis_binary(), 1)
    env = {"PATH": "/usr/bin:/bin", "REDIS_PASSWORD": password, "REDISCLI_AUTH": password}
    return subprocess.Popen(
        [*command[:2], script, *command[3:], *args],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _answering(socket: Path, password: str | None, within: float) -> redis_py.Redis:
    def connected() -> redis_py.Redis | None:
        client = redis_py.Redis(unix_socket_path=str(socket), password=password)
        try:
            client.ping()
        except redis_py.exceptions.ConnectionError:
            client.close()
            return None
        return client

    return block_until(connected, within, what=f"redis answering on {socket}")


@pytest.mark.integration
def test_redis_takes_its_password_from_stdin_not_from_its_command_line(tmp_path: Path) -> None:
    password = secrets.token_urlsafe(24)
    server = _running_redis(redis_container(render(None)), tmp_path, password)
    try:
        client = _answering(tmp_path / "redis.sock", password, 15)
        try:
            assert client.set("k", "v")
        finally:
            client.close()
        anonymous = redis_py.Redis(unix_socket_path=str(tmp_path / "redis.sock"))
        try:
            with pytest.raises(redis_py.exceptions.AuthenticationError):
                anonymous.get("k")
        finally:
            anonymous.close()
        proc = Path("/proc") / str(server.pid)
        # sh exec'd env, which exec'd redis-server: the same process
        assert (proc / "exe").resolve().name.startswith("redis")
        assert password.encode() not in (proc / "cmdline").read_bytes()
        assert password.encode() not in (proc / "environ").read_bytes()
    finally:
        server.terminate()
        server.wait(timeout=scaled(30))


# --------------------------------------------------------------------------- size


def _existing_statefulset(size: str) -> Doc:
    """The StatefulSet as a first install made it (owned by the release, as helm marks
    what it applies), with a claim template of ``size``."""
    # a copy: renders are cached, and the golden and other tests read them after
    statefulset = copy.deepcopy(named(render(None), "StatefulSet", STATEFULSET))
    statefulset["metadata"]["annotations"] = {
        "meta.helm.sh/release-name": tool.RELEASE,
        "meta.helm.sh/release-namespace": NAMESPACE,
    }
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    claim["spec"]["resources"]["requests"]["storage"] = size
    return statefulset


async def _dry_run(api: Any, major: int, tmp_path: Path, *sets: str) -> dict[str, Any]:
    """``helm install --dry-run=server`` against ``api``: the release as JSON (manifest,
    NOTES), lookup answered by the emulated API, nothing written."""
    helm_path = tool.binary(major)
    assert helm_path is not None, f"helm{major} is missing: scripts/install-helm installs it"
    config = kubeconfig(api, tmp_path / f"kubeconfig-{major}", NAMESPACE)
    args = ["install", tool.RELEASE, str(CHART), "-n", NAMESPACE, "--dry-run=server"]
    args += ["--disable-openapi-validation", "--output", "json"]
    for expression in sets:
        args += ["--set", expression]
    done = await asyncio.to_thread(tool.run_binary, helm_path, args, kubeconfig=config)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _claim_size(release: dict[str, Any]) -> str:
    statefulset = named(tool.parse(release["manifest"]), "StatefulSet", STATEFULSET)
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    return claim["spec"]["resources"]["requests"]["storage"]  # type: ignore[no-any-return]


@against_both_helms
async def test_a_new_size_keeps_the_claim_template_and_says_how_to_grow(
    major: int, kmock: Any, tmp_path: Path
) -> None:
    kmock.objects["apps/v1/statefulsets", NAMESPACE, STATEFULSET] = _existing_statefulset("8Gi")
    release = await _dry_run(kmock, major, tmp_path, "redis.persistence.size=20Gi")
    assert _claim_size(release) == "8Gi"  # what the StatefulSet has: the upgrade goes through
    notes = release["info"]["notes"]
    assert "redis.persistence.size is 20Gi" in notes
    assert "kubectl -n apex-mesh patch pvc data-apex-mesh-redis-0" in notes
    assert '"storage":"20Gi"' in notes
    assert "delete statefulset apex-mesh-redis --cascade=orphan" in notes
    # after the StatefulSet is deleted (orphaning its pod), the new size is rendered
    kmock.objects["apps/v1/statefulsets", NAMESPACE, STATEFULSET].delete()
    release = await _dry_run(kmock, major, tmp_path, "redis.persistence.size=20Gi")
    assert _claim_size(release) == "20Gi"
    assert "WARNING" not in release["info"]["notes"]


@pytest.mark.integration
@pytest.mark.kmock(cls=ChartAPI)
async def test_the_same_size_says_nothing(kmock: Any, tmp_path: Path) -> None:
    kmock.objects["apps/v1/statefulsets", NAMESPACE, STATEFULSET] = _existing_statefulset("8Gi")
    release = await _dry_run(kmock, 4, tmp_path)
    assert _claim_size(release) == "8Gi"
    assert "redis.persistence.size" not in release["info"]["notes"]


@pytest.mark.unit
def test_values_and_docs_say_the_size_is_fixed_once_installed() -> None:
    text = (CHART / "values.yaml").read_text(encoding="utf-8")
    start = text.index("  # The data volume: a PVC per pod")
    block = text[start : text.index("    size: 8Gi", start)]
    assert "volumeClaimTemplates" in block
    assert "--cascade=orphan" in block
    operations = (CHART.parents[1] / "docs" / "operations.md").read_text(encoding="utf-8")
    assert "redis.persistence.size" in operations
    assert "--cascade=orphan" in operations


def _client_env(docs: list[Doc]) -> dict[str, dict[str, Any]]:
    """The Redis environment of every Redis client of the release, one mapping each."""
    seen: dict[str, dict[str, Any]] = {}
    for workload, container in containers(docs):
        env = {e["name"]: e for e in container.get("env", [])}
        if "APEXMESH_REDIS_URL" in env:
            seen[f"{workload['metadata']['name']}/{container['name']}"] = env
    assert seen
    return seen


@pytest.mark.unit
def test_an_external_sentinel_or_cluster_is_reached_by_its_url_form() -> None:
    """docs/redis.md: externalRedis.architecture picks the URL every client is given:
    redis+sentinel:// (the sentinels, the primary's name) or redis+cluster:// (some
    nodes); waitReplicas makes acknowledgements wait for replicas (sentinel)."""
    base = {"redis": {"enabled": False}}
    sentinel = render(
        {
            **base,
            "externalRedis": {
                "architecture": "sentinel",
                "hosts": ["s-0.s:26379", "s-1.s:26379", "s-2.s:26379"],
                "sentinelPrimary": "apexmesh",
                "existingSecret": "pw",
                "waitReplicas": 1,
            },
        }
    )
    for where, env in _client_env(sentinel).items():
        assert env["APEXMESH_REDIS_URL"]["value"] == (
            "rediss+sentinel://:$(APEXMESH_REDIS_PASSWORD)@s-0.s:26379,s-1.s:26379,s-2.s:26379"
            "/apexmesh/0"
        ), where
        assert env["APEXMESH_REDIS_WAIT_REPLICAS"]["value"] == "1", where
        assert env["APEXMESH_REDIS_WAIT_TIMEOUT_MS"]["value"] == "1000", where
    cluster = render(
        {
            **base,
            "externalRedis": {
                "architecture": "cluster",
                "hosts": ["c-0.c:6379", "c-1.c:6379"],
                "tls": False,
                "existingSecret": "pw",
            },
        }
    )
    for where, env in _client_env(cluster).items():
        url = env["APEXMESH_REDIS_URL"]["value"]
        assert url == "redis+cluster://:$(APEXMESH_REDIS_PASSWORD)@c-0.c:6379,c-1.c:6379", where
        assert "APEXMESH_REDIS_WAIT_REPLICAS" not in env, where
    assert not of_kind(cluster, "StatefulSet")
    with pytest.raises(helm.HelmError, match=r"externalRedis\.hosts"):
        render({**base, "externalRedis": {"architecture": "cluster", "existingSecret": "pw"}})
