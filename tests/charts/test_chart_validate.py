"""The chart passes ``helm lint --strict``, every rendered manifest passes
kubernetes-validate --strict for the two newest Kubernetes versions it knows, and
values.schema.json accepts the good values files and refuses the bad ones (each bad file
says in its first line what it breaks)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.charts.conftest import CHART, CI_VALUES, VALUES_DIR, render, values_of
from tools import helm as tool

# Rendered and checked in memory (Helm's engine is a library in this process).
pytestmark = [pytest.mark.chart, pytest.mark.unit]

SCHEMA = yaml.safe_load((CHART / "values.schema.json").read_text(encoding="utf-8"))
GOOD = sorted((VALUES_DIR / "good").glob("*.yaml"))
BAD = sorted((VALUES_DIR / "bad").glob("*.yaml"))


def newest_kubernetes_versions(count: int = 2) -> list[str]:
    """The newest minor versions kubernetes-validate ships strict schemas for."""
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    found = {
        tuple(int(part) for part in m.groups())
        for d in root.iterdir()
        if (m := re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-local-strict", d.name))
    }
    return [".".join(map(str, v)) for v in sorted(found)[-count:]]


KUBE_VERSIONS = newest_kubernetes_versions()


def test_two_kubernetes_versions_are_known() -> None:
    assert len(KUBE_VERSIONS) == 2
    assert KUBE_VERSIONS[0] < KUBE_VERSIONS[1] or len(KUBE_VERSIONS[0]) < len(KUBE_VERSIONS[1])


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.stem)
def test_helm_lint_strict_is_clean(values: Path) -> None:
    findings = tool.lint(CHART, values_of(values), strict=True)
    assert not tool.failing(findings, strict=True), findings


#: Custom resources kubernetes-validate has no schema for; the fields that matter are
#: asserted in test_chart_render.py and promtool checks the PrometheusRule's rules.
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule", "Certificate"}


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.stem)
def test_every_manifest_is_valid_kubernetes(values: Path, version: str) -> None:
    checked = 0
    for doc in render(values_of(values)):
        if doc["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {exc}")
        checked += 1
    assert checked > 10


def test_an_unknown_field_is_caught_by_the_validator() -> None:
    """The check above can fail: strict validation refuses a misspelt field."""
    (doc,) = [d for d in render(None) if d["kind"] == "Deployment" and "relay" in str(d)][:1]
    doc["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, KUBE_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("path", [*CI_VALUES, *GOOD], ids=lambda p: p.stem)
def test_good_values_pass_the_schema(path: Path) -> None:
    values = values_of(path)
    jsonschema.validate(values, SCHEMA)
    chart = helm.Chart.load(CHART)
    try:
        chart.validate_schema(values)
    finally:
        chart.close()


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_values_fail_the_schema(path: Path) -> None:
    values = values_of(path)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(values, SCHEMA)
    chart = helm.Chart.load(CHART)
    try:
        with pytest.raises(helm.HelmError):
            chart.validate_schema(values)
    finally:
        chart.close()


def _leaves(node: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(node, dict) and node:
        return [leaf for key, value in node.items() for leaf in _leaves(value, (*path, key))]
    return [path]


def test_the_schema_covers_every_value() -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    for path in _leaves(defaults):
        node = SCHEMA
        for key in path:
            assert node.get("type") == "object" or "object" in node.get("type", ()), path
            properties = node.get("properties", {})
            if key not in properties:
                # a free-form map (labels, securityContext ...): declared, not closed
                assert node.get("additionalProperties", True) is not False, path
                break
            node = properties[key]
        else:
            assert "type" in node or "enum" in node, path


def test_there_are_bad_files_for_the_schema_to_refuse() -> None:
    assert len(BAD) >= 6
    assert GOOD
