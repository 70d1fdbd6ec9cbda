"""Render the chart with Helm's own engine (tools/helm.py over helm-python-sdk) for the
chart tests; renders are cached per values, each takes a tenth of a second."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, Final

import jsonschema
import kubernetes_validate
import pytest
import referencing
import yaml
from kubernetes_validate import utils as kv

from tools import helm

ROOT: Final = Path(__file__).resolve().parents[2]
CHART: Final = ROOT / "charts" / "apex-mesh"
CI_VALUES: Final = sorted((CHART / "ci").glob("*.yaml"))
VALUES_DIR: Final = Path(__file__).resolve().parent / "values"

Doc = dict[str, Any]


def values_of(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


@cache
def _render(frozen: str) -> tuple[Doc, ...]:
    return tuple(helm.documents(helm.render(CHART, json.loads(frozen))))


def render(values: dict[str, Any] | None = None) -> list[Doc]:
    """Every manifest the chart renders with ``values`` (hooks included)."""
    return list(_render(json.dumps(values or {}, sort_keys=True)))


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def named(docs: list[Doc], kind: str, name: str) -> Doc:
    (doc,) = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    return doc


WORKLOADS: Final = ("Deployment", "StatefulSet", "CronJob", "Pod")


def pod_spec(doc: Doc) -> Doc:
    """The pod spec of a workload (Deployment, StatefulSet, CronJob or a bare Pod)."""
    if doc["kind"] == "Pod":
        return doc["spec"]
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return doc["spec"]["template"]["spec"]


def pod_labels(doc: Doc) -> dict[str, str]:
    if doc["kind"] == "Pod":
        return doc["metadata"]["labels"]
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    return doc["spec"]["template"]["metadata"]["labels"]


def container(docs: list[Doc], name: str) -> Doc:
    """The one container of the Deployment ``name``."""
    (only,) = pod_spec(named(docs, "Deployment", name))["containers"]
    return only  # type: ignore[no-any-return]


def drain_hook(docs: list[Doc]) -> list[str]:
    """The command of the relay's preStop hook."""
    hook = container(docs, "apex-mesh-relay")["lifecycle"]["preStop"]
    return hook["exec"]["command"]  # type: ignore[no-any-return]


def containers(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    """(workload, container) for every container and init container rendered."""
    for doc in docs:
        if doc["kind"] in WORKLOADS:
            spec = pod_spec(doc)
            for container in (*spec.get("initContainers", ()), *spec["containers"]):
                yield doc, container


def spark_executor_pods(docs: list[Doc]) -> list[Doc]:
    """The executor pods Spark on Kubernetes makes from the chart's pod template (the
    snapshot job's ConfigMap), with the block manager port Spark adds to each (its
    BasicExecutorFeatureStep, from spark.blockManager.port); none in local mode."""
    maps = [d for d in of_kind(docs, "ConfigMap") if "executor-pod.yaml" in d.get("data", {})]
    pods = []
    for config in maps:
        pod = yaml.safe_load(config["data"]["executor-pod.yaml"])
        lines = config["data"]["spark.properties"].splitlines()
        settings = dict(line.split(None, 1) for line in lines if line and line[0] != "#")
        for one in pod["spec"]["containers"]:
            port = {
                "name": "blockmanager",
                "containerPort": int(settings["spark.blockManager.port"]),
            }
            one.setdefault("ports", []).append(port)
        pods.append(pod)
    return pods


@cache
def _validator(kind: str, api_version: str, version: str) -> jsonschema.Draft202012Validator:
    """kubernetes_validate.validate's strict validator for one kind and version, built once
    (the library reads its 4 MB _definitions.json again for every document)."""
    directory = f"kubernetes-json-schema/v{version}-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kv.schema_contents(f"{directory}/{kind.lower()}-{group}.json", version)
    except FileNotFoundError:
        raise kubernetes_validate.SchemaNotFoundError(
            version=version, kind=kind, api_version=api_version
        ) from None
    definitions = kv.schema_contents(f"{directory}/_definitions.json", version)
    registry: referencing.Registry[Any] = referencing.Registry()
    registry = referencing.Resource.from_contents(schema) @ registry
    registry = referencing.Resource.from_contents(definitions) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate_kubernetes(doc: Doc, version: str) -> None:
    """``kubernetes_validate.validate(doc, version, strict=True)`` for a version it ships
    (``X.Y.Z``), with the validators kept: raises kubernetes_validate.ValidationError."""
    try:
        _validator(doc["kind"], doc["apiVersion"], version).validate(doc)
    except jsonschema.ValidationError as exc:
        raise kubernetes_validate.ValidationError(exc, version=version) from exc


@pytest.fixture(params=CI_VALUES, ids=lambda path: path.stem)
def ci_docs(request: pytest.FixtureRequest) -> list[Doc]:
    """The render of each ci/*.yaml value set."""
    return render(values_of(request.param))


@pytest.fixture
def rendered() -> Callable[[dict[str, Any] | None], list[Doc]]:
    return render
