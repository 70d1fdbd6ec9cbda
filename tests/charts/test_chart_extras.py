"""extraVolumes, extraVolumeMounts, sidecars and initContainers on every component
(issue #31): the usual values names, in values.schema.json, templated with tpl, added
after the chart's own volumes, mounts and containers (the component's container stays
first: kubectl's default container and the probes are its)."""

from __future__ import annotations

from typing import Any, Final

import helm_python as helm
import pytest

from tests.charts.conftest import VALUES_DIR, Doc, named, pod_spec, render, values_of

pytestmark = [pytest.mark.chart, pytest.mark.unit]

EXTRAS: Final = VALUES_DIR / "good" / "extra-pod-parts.yaml"
DEPLOYMENTS: Final = ("relay", "access", "pubsub", "report", "presence", "dashboard")


def workload(docs: list[Doc], component: str) -> Doc:
    kind = "CronJob" if component == "snapshot" else "Deployment"
    return named(docs, kind, f"apex-mesh-{component}")


@pytest.mark.parametrize("component", [*DEPLOYMENTS, "snapshot"])
def test_each_component_takes_its_extras_after_the_charts_own(component: str) -> None:
    wanted: dict[str, Any] = values_of(EXTRAS)[component]
    plain = pod_spec(workload(render(None), component))
    pod = pod_spec(workload(render(values_of(EXTRAS)), component))
    main, *sidecars = pod["containers"]
    assert main["name"] == plain["containers"][0]["name"]
    names = [c["name"] for c in sidecars]
    assert names == [c["name"] for c in wanted.get("sidecars", [])]
    assert [c["name"] for c in pod.get("initContainers", [])] == [
        c["name"] for c in wanted.get("initContainers", [])
    ]
    volumes = [v["name"] for v in pod["volumes"]]
    assert volumes == [v["name"] for v in plain["volumes"]] + [
        v["name"] for v in wanted.get("extraVolumes", [])
    ]
    mounts = [m["mountPath"] for m in main["volumeMounts"]]
    assert mounts == [m["mountPath"] for m in plain["containers"][0]["volumeMounts"]] + [
        m["mountPath"] for m in wanted.get("extraVolumeMounts", [])
    ]


def test_extras_are_templated() -> None:
    docs = render(values_of(EXTRAS))
    relay = pod_spec(workload(docs, "relay"))
    assert relay["volumes"][-1]["configMap"]["name"] == "apex-mesh-company-ca"
    (wait,) = pod_spec(workload(docs, "pubsub"))["initContainers"]
    assert wait["args"] == ["tcp://apex-mesh-apex-mesh-redis:6379"]
    (proxy,) = pod_spec(workload(docs, "snapshot"))["initContainers"]
    assert proxy["restartPolicy"] == "Always"  # a native sidecar: the job still ends


def test_no_extras_by_default() -> None:
    for component in (*DEPLOYMENTS, "snapshot"):
        pod = pod_spec(workload(render(None), component))
        assert len(pod["containers"]) == 1, component
        assert "initContainers" not in pod, component


@pytest.mark.parametrize(
    ("component", "key", "good", "bad"),
    [
        ("relay", "sidecars", [{"name": "x", "image": "x:1"}], [{"image": "x:1"}]),
        ("access", "extraVolumeMounts", [{"name": "x", "mountPath": "/x"}], [{"name": "x"}]),
        ("pubsub", "initContainers", [{"name": "x", "image": "x:1"}], "not-a-list"),
        ("snapshot", "extraVolumes", [{"name": "x", "emptyDir": {}}], [{"emptyDir": {}}]),
    ],
    ids=["sidecar-without-name", "mount-without-path", "init-not-a-list", "volume-without-name"],
)
def test_the_schema_takes_extras_and_refuses_malformed_ones(
    component: str, key: str, good: Any, bad: Any
) -> None:
    assert render({component: {key: good}})
    with pytest.raises(helm.HelmValuesError, match=key):
        render({component: {key: bad}})
