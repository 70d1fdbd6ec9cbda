"""The Dockerfiles and docker-compose.yml say what the chart says: one image per service
on the shared base, the same user, ports and probes; compose runs Redis with AOF, two
relays, two pubsub pods and the snapshot job as a profile, with secrets from files.
(hadolint and the Compose Spec schema run in scripts/test.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from tests.charts.conftest import CHART, ROOT

# Rendered and checked in memory (Helm's engine is a library in this process).
pytestmark = [pytest.mark.chart, pytest.mark.unit]

DOCKER: Final = ROOT / "docker"
SERVICES: Final = ("relay", "access", "pubsub", "report", "presence")
COMPOSE: Final = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
DEFAULTS: Final = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("service", [*SERVICES, "dashboard"])
def test_each_service_image_is_the_base_plus_its_entrypoint(service: str) -> None:
    text = (DOCKER / f"{service}.Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.MULTILINE)
    assert f'"python", "-m", "services.{service}"]' in text
    assert 'ENTRYPOINT ["/usr/bin/tini", "--"' in text
    assert f'"apexmesh.ops.probe", "{service}", "/readyz"' in text
    exposed = {int(p) for p in re.search(r"^EXPOSE (.+)$", text, re.MULTILINE)[1].split()}  # type: ignore[index]
    assert exposed == set(DEFAULTS[service]["ports"].values())


def test_scripts_containers_builds_and_runs_every_image() -> None:
    """Every Dockerfile is built by scripts/containers, every service image is checked
    there, and the container mesh runs the dashboard too."""
    script = (ROOT / "scripts" / "containers").read_text(encoding="utf-8")
    lines = re.MULTILINE
    built = {m[1] for m in re.finditer(r"^build (\w+) docker/\w+\.Dockerfile", script, lines)}
    looped = re.search(r"^for service in ([\w ]+); do\n    build \"\$service\"", script, lines)
    assert looped is not None
    built |= set(looped[1].split())
    assert built == {path.name.removesuffix(".Dockerfile") for path in DOCKER.glob("*.Dockerfile")}
    checked = re.search(r"^for service in ([\w ]+); do\n    image=", script, lines)
    assert checked is not None
    assert {*SERVICES, "dashboard"} <= set(checked[1].split())
    mesh = (ROOT / "scripts" / "container_mesh.py").read_text(encoding="utf-8")
    assert "dashboard=False" not in mesh


def test_the_base_runs_as_a_named_non_root_user_without_build_tools() -> None:
    text = (DOCKER / "base.Dockerfile").read_text(encoding="utf-8")
    final = text.split("FROM runtime AS base", 1)[1]
    assert "useradd --system --uid" in text
    assert re.search(r"^USER 10001:10001$", final, re.MULTILINE)
    assert "apt-get" not in final
    assert "pip" not in final
    assert "pip uninstall" in text  # the venv leaves its installer behind in the build stage


def services() -> dict[str, Any]:
    return COMPOSE["services"]  # type: ignore[no-any-return]


def test_compose_runs_two_relays_and_two_pubsub_pods() -> None:
    names = set(services())
    assert {"relay-1", "relay-2", "pubsub-1", "pubsub-2", "access", "report", "presence"} <= names
    assert {services()[n]["hostname"] for n in ("relay-1", "relay-2", "pubsub-1", "pubsub-2")} == {
        "relay-1",
        "relay-2",
        "pubsub-1",
        "pubsub-2",
    }
    relay_services = services()["relay-1"]["environment"]["APEXMESH_RELAY_SERVICES"]
    assert "pubsub=pubsub-1:7414|pubsub-2:7414" in relay_services


def test_compose_redis_keeps_an_append_only_file_and_needs_a_password() -> None:
    redis = services()["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert "--requirepass" in command
    assert any(v.endswith(":/data") for v in redis["volumes"])


def test_compose_services_are_hardened_checked_and_ordered() -> None:
    for name, service in services().items():
        if name == "base":
            assert service["deploy"]["replicas"] == 0
            continue
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"], name
        assert not str(service["image"]).endswith(":latest"), name
        if service.get("restart") != "no":  # one-shot jobs (snapshot, cluster init)
            assert service["healthcheck"]["test"], name
        for dependency in service.get("depends_on", {}).values():
            assert dependency["condition"] == "service_healthy", name


def test_compose_has_a_three_node_redis_cluster_profile() -> None:
    """docs/redis.md: three cluster-enabled primaries with AOF and a password, joined by
    a one-shot init; the services take the redis+cluster:// URL from the env file that
    APEX_MESH_REDIS_ENV names (scripts/dev-secrets writes both)."""
    nodes = [services()[f"redis-cluster-{n}"] for n in (1, 2, 3)]
    for node in nodes:
        command = " ".join(node["command"])
        assert node["profiles"] == ["redis-cluster"]
        for flag in ("--cluster-enabled yes", "--appendonly yes", "--requirepass", "--masterauth"):
            assert flag in command
        assert node["healthcheck"]["test"]
    init = services()["redis-cluster-init"]
    assert init["profiles"] == ["redis-cluster"]
    assert init["restart"] == "no"
    assert "--cluster create" in init["command"][2]
    assert set(init["depends_on"]) == {"redis-cluster-1", "redis-cluster-2", "redis-cluster-3"}
    relay = services()["relay-1"]
    assert relay["env_file"] == ["${APEX_MESH_REDIS_ENV:-./.dev-secrets/redis.env}"]
    text = (ROOT / "scripts" / "dev_secrets.py").read_text(encoding="utf-8")
    assert "redis+cluster://" in text


def test_compose_snapshot_job_is_a_one_shot_profile() -> None:
    snapshot = services()["snapshot"]
    assert snapshot["profiles"] == ["snapshot"]
    assert snapshot["restart"] == "no"
    assert snapshot["image"].startswith("apex-mesh/spark:")


def test_compose_takes_secrets_from_files_and_commits_none() -> None:
    for secret in COMPOSE["secrets"].values():
        assert secret["file"].startswith("./.dev-secrets/")
    text = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert not re.search(r"(?i)(password|requirepass)\s*[:=]\s*\w{6,}", text)
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert ".dev-secrets/" in ignored
    relay = services()["relay-1"]
    assert set(relay["secrets"]) == {"relay-cert", "relay-key", "sasl-credentials"}
    assert "APEXMESH_DEV" not in relay["environment"]


def test_the_base_image_has_what_the_demo_and_probes_need() -> None:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    dockerignore = [line for line in lines if line and not line.startswith("#")]
    assert dockerignore[0] == "*"
    assert {"!apexmesh", "!services", "!pyproject.toml"} <= set(dockerignore)
    assert Path(ROOT / "apexmesh" / "ops" / "probe.py").is_file()
