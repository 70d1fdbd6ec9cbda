"""The chart's operations pieces (issue #22): the dashboard's Deployment, Service,
NetworkPolicy, budget and context file, NOTES on reaching it, and the relay's preStop
drain with the grace arithmetic it needs. Rendered with Helm's engine and asserted; the
context file is loaded by the dashboard's own settings (test_chart_drain_hook.py runs
the hook against a real relay pod)."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import helm_python as helm
import pytest
import yaml

from apexmesh.ops.targets import context_from
from services.dashboard.settings import DashboardSettings
from tests.charts.conftest import (
    CHART,
    Doc,
    container,
    drain_hook,
    named,
    of_kind,
    pod_spec,
    render,
)
from tools.helm import notes

# Rendered and checked in memory (Helm's engine is a library in this process); the
# hook is run against a real relay in test_chart_drain_hook.py.
pytestmark = [pytest.mark.chart, pytest.mark.unit]

Render = Callable[[dict[str, Any] | None], list[Doc]]

#: The components whose admin APIs the dashboard reads, and the Service of each.
READ: dict[str, str] = {
    "relay": "apex-mesh-relay-internal",
    "access": "apex-mesh-access",
    "pubsub": "apex-mesh-pubsub",
    "report": "apex-mesh-report",
    "presence": "apex-mesh-presence",
}


def env_of(docs: list[Doc], name: str) -> dict[str, Doc]:
    return {e["name"]: e for e in container(docs, name)["env"]}


def context_file(docs: list[Doc]) -> str:
    secret = named(docs, "Secret", "apex-mesh-dashboard-context")
    return base64.b64decode(secret["data"]["apexctl.yaml"]).decode()


def http_port(service: Doc) -> int:
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "http"]
    return int(port)


# --------------------------------------------------------------------------- dashboard


def test_the_dashboard_runs_on_its_pods_address_with_the_read_token_only(
    rendered: Render,
) -> None:
    docs = rendered(None)
    env = env_of(docs, "apex-mesh-dashboard")
    assert env["APEXMESH_DASHBOARD_HTTP_HOST"]["value"] == "$(POD_IP)"
    assert env["APEXMESH_DASHBOARD_HTTP_PORT"]["value"] == "8420"
    assert env["APEXMESH_DASHBOARD_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "apex-mesh-admin",
        "key": "read-token",
    }
    # The admin token (drain, close sessions, grant access) never reaches this pod.
    assert "APEXMESH_ADMIN_TOKEN" not in env
    assert "APEXMESH_ADMIN_READ_TOKEN" not in env
    assert "APEXMESH_DEV" not in env
    path = env["APEXMESH_DASHBOARD_CONTEXT"]["value"]
    assert path == "/etc/apex-mesh/dashboard/apexctl.yaml"
    pod = pod_spec(named(docs, "Deployment", "apex-mesh-dashboard"))
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "context"]
    assert mount == {"name": "context", "mountPath": str(Path(path).parent), "readOnly": True}
    (volume,) = [v for v in pod["volumes"] if v["name"] == "context"]
    assert volume["secret"]["secretName"] == "apex-mesh-dashboard-context"
    assert volume["secret"]["items"] == [{"key": "apexctl.yaml", "path": Path(path).name}]
    assert pod["automountServiceAccountToken"] is False
    ports = container(docs, "apex-mesh-dashboard")["ports"]
    assert ports == [{"name": "http", "containerPort": 8420, "protocol": "TCP"}]
    assert "redis-client" not in str(named(docs, "Deployment", "apex-mesh-dashboard"))
    # The image the Dockerfile builds (docker/dashboard.Dockerfile).
    assert container(docs, "apex-mesh-dashboard")["image"] == (
        "docker.io/apex-mesh/dashboard:0.1.0"
    )


def test_the_context_names_every_components_service_and_no_token(
    rendered: Render, tmp_path: Path
) -> None:
    docs = rendered(None)
    text = context_file(docs)
    context = context_from(yaml.safe_load(text), "chart")
    assert {t.service: t.name for t in context.services} == READ
    assert not context.read_token
    assert not context.admin_token
    assert "token" not in text
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    for target in context.services:
        url = urlsplit(target.admin_url)
        assert url.scheme == "http"
        assert url.hostname == f"{target.name}.apex-mesh.svc.cluster.local"
        assert url.port == http_port(services[target.name]), target
        assert target.domain == "example.com"
    # The dashboard's own settings load it and read the services with its login token
    # (the admin Secret's read-token): the token lives in that one Secret.
    (tmp_path / "apexctl.yaml").write_text(text, encoding="utf-8")
    token = "read-token-from-the-admin-secret-0123"
    settings = DashboardSettings.from_env(
        {
            "APEXMESH_DASHBOARD_CONTEXT": str(tmp_path / "apexctl.yaml"),
            "APEXMESH_DASHBOARD_TOKEN": token,
            "APEXMESH_DASHBOARD_HTTP_HOST": "10.1.2.3",
        }
    )
    assert settings.context.token(write=False) == token
    assert len(settings.context.services) == len(READ)


def test_components_switched_off_leave_the_context_and_the_policy(rendered: Render) -> None:
    docs = rendered({"report": {"enabled": False}, "presence": {"enabled": False}})
    context = context_from(yaml.safe_load(context_file(docs)), "chart")
    assert {t.service for t in context.services} == {"relay", "access", "pubsub"}
    policy = named(docs, "NetworkPolicy", "apex-mesh-dashboard")
    reached = {
        rule["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        for rule in policy["spec"]["egress"]
        if rule.get("to")  # not DNS: port 53 anywhere (networkPolicy.dns)
        and "podSelector" in rule["to"][0]
        and "namespaceSelector" not in rule["to"][0]
    }
    assert reached == {"relay", "access", "pubsub"}


def test_a_new_service_list_rolls_the_dashboard(rendered: Render) -> None:
    def checksum(values: dict[str, Any] | None) -> str:
        pod = named(rendered(values), "Deployment", "apex-mesh-dashboard")["spec"]["template"]
        return str(pod["metadata"]["annotations"]["checksum/services"])

    assert checksum(None) == checksum({"logLevel": "DEBUG"})
    assert checksum(None) != checksum({"report": {"enabled": False}})


def test_an_existing_context_secret_replaces_the_charts(rendered: Render) -> None:
    docs = rendered({"dashboard": {"existingContextSecret": "my-context"}})
    assert not [s for s in of_kind(docs, "Secret") if "dashboard" in s["metadata"]["name"]]
    pod = pod_spec(named(docs, "Deployment", "apex-mesh-dashboard"))
    (volume,) = [v for v in pod["volumes"] if v["name"] == "context"]
    assert volume["secret"]["secretName"] == "my-context"


def test_the_dashboard_service_serves_port_8420_named_http(rendered: Render) -> None:
    docs = rendered(None)
    service = named(docs, "Service", "apex-mesh-dashboard")
    assert service["spec"]["type"] == "ClusterIP"
    (port,) = service["spec"]["ports"]
    assert port == {
        "name": "http",
        "port": 8420,
        "targetPort": "http",
        "protocol": "TCP",
        "appProtocol": "http",
    }
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "dashboard"
    # Not a scrape target: the operators' view is not part of the message path.
    assert service["metadata"]["labels"].get("apex-mesh.io/scrape") != "true"
    docs = rendered(
        {
            "dashboard": {
                "service": {
                    "type": "LoadBalancer",
                    "loadBalancerSourceRanges": ["10.0.0.0/8"],
                    "annotations": {"a": "b"},
                }
            }
        }
    )
    service = named(docs, "Service", "apex-mesh-dashboard")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["loadBalancerSourceRanges"] == ["10.0.0.0/8"]
    assert service["metadata"]["annotations"] == {"a": "b"}


def test_only_the_dashboard_and_prometheus_reach_the_admin_ports(rendered: Render) -> None:
    docs = rendered(None)
    policy = named(docs, "NetworkPolicy", "apex-mesh-dashboard")
    # Nobody over the pod network by default (kubectl port-forward enters the pod's
    # own loopback, which no NetworkPolicy filters).
    assert policy["spec"]["ingress"] == []
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    egress = {
        (
            rule["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
            rule["ports"][0]["port"],
        )
        for rule in policy["spec"]["egress"]
        if rule.get("to")
    }
    assert egress == {(c, http_port(services[s])) for c, s in READ.items()}
    # DNS: port 53 to any address (networkPolicy.dns, issue #31)
    dns = [r for r in policy["spec"]["egress"] if not r.get("to")]
    assert {p["port"] for r in dns for p in r["ports"]} == {53}
    for component, service in READ.items():
        ingress = named(docs, "NetworkPolicy", f"apex-mesh-{component}")["spec"]["ingress"]
        dashboard = [
            rule
            for rule in ingress
            for peer in rule.get("from", [])
            if peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component")
            == "dashboard"
        ]
        assert [p["port"] for r in dashboard for p in r["ports"]] == [
            http_port(services[service])
        ], component
    opened = rendered({"networkPolicy": {"dashboardFrom": [{"namespaceSelector": {}}]}})
    (rule,) = named(opened, "NetworkPolicy", "apex-mesh-dashboard")["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {}}]
    assert rule["ports"] == [{"port": 8420, "protocol": "TCP"}]


def test_switching_the_dashboard_off_removes_it_everywhere(rendered: Render) -> None:
    docs = rendered({"dashboard": {"enabled": False}})
    assert not [
        d
        for d in docs
        if d["metadata"]["name"] in ("apex-mesh-dashboard", "apex-mesh-dashboard-context")
        or d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "dashboard"
    ]
    assert "dashboard" not in yaml.safe_dump([d["spec"] for d in of_kind(docs, "NetworkPolicy")])
    assert "dashboard" not in notes(CHART, {"dashboard": {"enabled": False}}).lower()


def test_a_budget_only_for_more_than_one_dashboard(rendered: Render) -> None:
    names = {d["metadata"]["name"] for d in of_kind(rendered(None), "PodDisruptionBudget")}
    assert "apex-mesh-dashboard" not in names
    docs = rendered({"dashboard": {"replicaCount": 2}})
    budget = named(docs, "PodDisruptionBudget", "apex-mesh-dashboard")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "dashboard"
    assert named(docs, "Deployment", "apex-mesh-dashboard")["spec"]["replicas"] == 2


def test_notes_tell_how_to_open_the_dashboard() -> None:
    text = notes(CHART)
    assert "kubectl -n apex-mesh port-forward svc/apex-mesh-dashboard 8420:8420" in text
    assert (
        "kubectl -n apex-mesh get secret apex-mesh-admin -o jsonpath='{.data.read-token}'"
        " | base64 -d" in text
    )
    assert "http://127.0.0.1:8420/login?token=" in text
    assert "apexctl context add apex-mesh --namespace apex-mesh --release apex-mesh" in text
    moved = notes(CHART, {"dashboard": {"ports": {"http": 9000}}})
    assert "port-forward svc/apex-mesh-dashboard 9000:9000" in moved
    assert "http://127.0.0.1:9000/login?token=" in moved


# --------------------------------------------------------------------------- relay drain


def test_the_relay_drains_before_sigterm_within_its_grace(rendered: Render) -> None:
    docs = rendered(None)
    command = drain_hook(docs)
    assert command[:2] == ["python", "-c"]
    script = command[2]
    compile(script, "preStop", "exec")  # valid Python
    assert "/admin/v1/drain" in script
    assert 'call("POST")' in script
    assert '"Bearer " + os.environ["APEXMESH_ADMIN_TOKEN"]' in script
    assert re.search(r"^grace = 30$", script, re.MULTILINE)
    # The relay binds its pod's address (not loopback): the hook dials the address the
    # relay itself was given, from the same variables.
    env = env_of(docs, "apex-mesh-relay")
    assert env["APEXMESH_RELAY_HTTP_HOST"]["value"] == "$(POD_IP)"
    assert 'os.environ["APEXMESH_RELAY_HTTP_HOST"]' in script
    assert 'os.environ["APEXMESH_RELAY_HTTP_PORT"]' in script
    assert "APEXMESH_ADMIN_TOKEN" in env
    pod = pod_spec(named(docs, "Deployment", "apex-mesh-relay"))
    shutdown = int(env["APEXMESH_SHUTDOWN_GRACE"]["value"])
    assert pod["terminationGracePeriodSeconds"] >= 30 + shutdown + 10


@pytest.mark.parametrize(
    ("grace", "shutdown", "termination", "fits"),
    [(100, 20, 130, True), (100, 20, 129, False), (0, 5, 15, True), (30, 5, 44, False)],
)
def test_the_termination_grace_covers_drain_shutdown_and_ten_seconds(
    grace: int, shutdown: int, termination: int, fits: bool
) -> None:
    values = {
        "shutdownGraceSeconds": shutdown,
        "relay": {"drain": {"graceSeconds": grace}, "terminationGracePeriodSeconds": termination},
    }
    if not fits:
        with pytest.raises(helm.HelmError, match=re.escape(f"+ 10 = {grace + shutdown + 10}")):
            render(values)
        return
    docs = render(values)
    assert re.search(rf"^grace = {grace}$", drain_hook(docs)[2], re.MULTILINE)
    pod = pod_spec(named(docs, "Deployment", "apex-mesh-relay"))
    assert pod["terminationGracePeriodSeconds"] == termination


def test_the_drain_can_be_switched_off(rendered: Render) -> None:
    docs = rendered({"relay": {"drain": {"enabled": False}, "terminationGracePeriodSeconds": 10}})
    assert "lifecycle" not in container(docs, "apex-mesh-relay")
    for name in ("access", "pubsub", "report", "presence", "dashboard"):
        assert "lifecycle" not in container(docs, f"apex-mesh-{name}"), name


def test_the_operator_role_may_patch_the_sasl_secret_only(rendered: Render) -> None:
    """apexctl credentials patch the relays' SASL Secret (the chart's, or the one named
    by relay.sasl.existingSecret); no other Secret may be changed."""
    for values, secret in (
        (None, "apex-mesh-relay-sasl"),
        (
            {"relay": {"sasl": {"existingSecret": "my-endpoints"}}, "tests": {"enabled": False}},
            "my-endpoints",
        ),
    ):
        roles = [
            r for r in of_kind(rendered(values), "Role") if "operator" in r["metadata"]["name"]
        ]
        assert len(roles) == 1
        patching = [rule for rule in roles[0]["rules"] if "patch" in rule["verbs"]]
        assert patching == [
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": [secret],
                "verbs": ["get", "patch"],
            }
        ]
