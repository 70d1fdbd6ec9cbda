"""Render-and-assert tests of charts/apex-mesh (the helm-unittest role, as pytest).

Every value set of ci/*.yaml is rendered with Helm's engine and checked for what operators
rely on: probes, resources and a restricted securityContext on every container, pinned
images, an HPA that scales the pubsub Deployment, Services whose ports reach container
ports, NetworkPolicies whose peers exist, a CronJob driven by values, RBAC limited to the
Leases the code names.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import helm_python as helm
import pytest

from apexmesh.pubsub.lease import lease_name
from tests.charts.conftest import (
    CHART,
    WORKLOADS,
    Doc,
    containers,
    named,
    of_kind,
    pod_labels,
    pod_spec,
    render,
    spark_executor_pods,
)
from tools.helm import notes

# Rendered and checked in memory (Helm's engine is a library in this process).
pytestmark = [pytest.mark.chart, pytest.mark.unit]

Render = Callable[[dict[str, Any] | None], list[Doc]]

SERVICES = ("relay", "access", "pubsub", "report", "presence")


def test_every_container_has_probes_resources_and_a_restricted_security_context(
    ci_docs: list[Doc],
) -> None:
    checked = 0
    for workload, container in containers(ci_docs):
        where = f"{workload['kind']}/{workload['metadata']['name']}/{container['name']}"
        if workload["kind"] in ("Deployment", "StatefulSet"):
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                assert probe in container, f"{where} has no {probe}"
        resources = container.get("resources", {})
        assert resources.get("requests", {}).get("memory"), f"{where}: no memory request"
        assert resources.get("requests", {}).get("cpu"), f"{where}: no cpu request"
        assert resources.get("limits", {}).get("memory"), f"{where}: no memory limit"
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True, where
        assert context["readOnlyRootFilesystem"] is True, where
        assert context["allowPrivilegeEscalation"] is False, where
        assert context["capabilities"]["drop"] == ["ALL"], where
        assert "add" not in context["capabilities"], where
        pod = pod_spec(workload)
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert pod["securityContext"].get("runAsUser", 1) != 0, where
        assert not pod.get("hostNetwork"), where
        assert not pod.get("hostPID"), where
        checked += 1
    assert checked >= 3


def test_no_image_is_latest_or_untagged(ci_docs: list[Doc]) -> None:
    for workload, container in containers(ci_docs):
        image = container["image"]
        assert "@sha256:" in image or re.search(r":[\w.-]+$", image.rsplit("/", 1)[-1]), image
        assert not image.endswith(":latest"), image
        assert container["imagePullPolicy"] == "IfNotPresent", workload["metadata"]["name"]


def test_latest_is_refused_by_the_schema() -> None:
    with pytest.raises(helm.HelmError, match="tag"):
        render({"relay": {"image": {"tag": "latest"}}})


def test_the_default_release_runs_every_service(rendered: Render) -> None:
    docs = rendered(None)
    deployments = {d["metadata"]["name"] for d in of_kind(docs, "Deployment")}
    assert deployments == {f"apex-mesh-{name}" for name in (*SERVICES, "dashboard")}
    assert named(docs, "StatefulSet", "apex-mesh-redis")
    assert named(docs, "CronJob", "apex-mesh-snapshot")


def test_the_hpa_scales_the_pubsub_deployment(rendered: Render) -> None:
    docs = rendered({"pubsub": {"autoscaling": {"minReplicas": 3, "maxReplicas": 12}}})
    hpa = named(docs, "HorizontalPodAutoscaler", "apex-mesh-pubsub")
    target = hpa["spec"]["scaleTargetRef"]
    assert target["kind"] == "Deployment"
    assert target["apiVersion"] == "apps/v1"
    deployment = named(docs, "Deployment", target["name"])
    assert deployment["metadata"]["labels"]["app.kubernetes.io/component"] == "pubsub"
    # The autoscaler owns the replica count: the Deployment does not fight it.
    assert "replicas" not in deployment["spec"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    (cpu,) = hpa["spec"]["metrics"]
    assert cpu["resource"]["name"] == "cpu"


def test_the_custom_metric_option_adds_a_pods_metric(rendered: Render) -> None:
    docs = rendered(
        {"pubsub": {"autoscaling": {"customMetric": {"enabled": True, "name": "ops_per_pod"}}}}
    )
    hpa = named(docs, "HorizontalPodAutoscaler", "apex-mesh-pubsub")
    pods = [m for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    assert pods[0]["pods"]["metric"]["name"] == "ops_per_pod"


def test_relay_autoscaling_is_optional_and_scales_down_slowly(rendered: Render) -> None:
    assert not [
        h
        for h in of_kind(rendered(None), "HorizontalPodAutoscaler")
        if h["metadata"]["name"].endswith("relay")
    ]
    docs = rendered({"relay": {"autoscaling": {"enabled": True}}})
    hpa = named(docs, "HorizontalPodAutoscaler", "apex-mesh-relay")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "apex-mesh-relay"
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300
    assert "replicas" not in named(docs, "Deployment", "apex-mesh-relay")["spec"]


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_every_service_port_reaches_a_container_port(ci_docs: list[Doc]) -> None:
    workloads = [d for d in ci_docs if d["kind"] in WORKLOADS]
    for service in of_kind(ci_docs, "Service"):
        name = service["metadata"]["name"]
        pods = [w for w in workloads if _selects(service["spec"]["selector"], pod_labels(w))]
        assert pods, f"Service {name} selects no pods"
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for pod in pods:
                ports = [p for c in pod_spec(pod)["containers"] for p in c.get("ports", ())]
                assert any(target in (p.get("name"), p["containerPort"]) for p in ports), (
                    f"Service {name} port {port['name']} -> {target}: not a port of "
                    f"{pod['metadata']['name']}"
                )


def test_every_network_policy_peer_exists(ci_docs: list[Doc]) -> None:
    # the chart's workloads, and the executor pods Spark makes from its pod template
    workloads = [d for d in ci_docs if d["kind"] in WORKLOADS and d["kind"] != "Pod"]
    workloads += spark_executor_pods(ci_docs)
    policies = of_kind(ci_docs, "NetworkPolicy")
    assert policies
    for policy in policies:
        name = policy["metadata"]["name"]
        own = policy["spec"]["podSelector"]["matchLabels"]
        targets = [w for w in workloads if _selects(own, pod_labels(w))]
        assert targets, f"NetworkPolicy {name} selects no pods"
        target_ports = (
            {
                p["containerPort"]
                for t in targets
                for c in pod_spec(t)["containers"]
                for p in c["ports"]
            }
            if all("ports" in c for t in targets for c in pod_spec(t)["containers"])
            else set()
        )
        for rule in policy["spec"].get("ingress", []):
            for port in rule.get("ports", []):
                assert port["port"] in target_ports, f"{name}: ingress port {port} not served"
        for direction, key in (("ingress", "from"), ("egress", "to")):
            for rule in policy["spec"].get(direction, []):
                for peer in rule.get(key, []):
                    selector = peer.get("podSelector", {}).get("matchLabels")
                    if selector is None or "namespaceSelector" in peer:
                        continue  # another namespace (DNS, Prometheus) or an ipBlock
                    peers = [w for w in workloads if _selects(selector, pod_labels(w))]
                    assert peers, f"{name}: {direction} peer {selector} matches no pods"
                    if direction == "egress":
                        ports = {
                            p["containerPort"]
                            for w in peers
                            for c in pod_spec(w)["containers"]
                            for p in c.get("ports", ())
                        }
                        for port in rule.get("ports", []):
                            assert port["port"] in ports, f"{name}: egress {port} to {selector}"


def test_network_policies_allow_only_the_designed_flows(rendered: Render) -> None:
    docs = rendered(None)

    def sources(component: str, port: int) -> set[str]:
        policy = named(docs, "NetworkPolicy", f"apex-mesh-{component}")
        found: set[str] = set()
        for rule in policy["spec"]["ingress"]:
            if any(p["port"] == port for p in rule.get("ports", [])):
                for peer in rule.get("from", []):
                    labels = peer.get("podSelector", {}).get("matchLabels", {})
                    found.add(labels.get("app.kubernetes.io/component", "*"))
        return found

    assert sources("access", 7411) == {"relay", "pubsub", "presence"}
    # pubsub: a robust topic's publication is forwarded to the pod sequencing it
    assert sources("pubsub", 7414) == {"relay", "pubsub"}
    assert sources("report", 7412) == {"relay"}
    assert sources("presence", 7413) == {"relay", "pubsub"}
    assert sources("relay", 7401) == {"relay", "pubsub", "report", "presence"}
    redis = named(docs, "NetworkPolicy", "apex-mesh-redis")["spec"]["ingress"]
    assert redis[0]["from"][0]["podSelector"]["matchLabels"]["apex-mesh.io/redis-client"] == "true"
    clients = {
        pod_labels(w)["app.kubernetes.io/component"]
        for w in docs
        if w["kind"] in WORKLOADS and pod_labels(w).get("apex-mesh.io/redis-client") == "true"
    }
    assert clients == {"relay", "access", "pubsub", "presence", "snapshot"}


def test_the_cronjob_takes_schedule_image_and_settings_from_values(rendered: Render) -> None:
    docs = rendered(
        {
            "image": {"registry": "registry.example.com"},
            "snapshot": {
                "schedule": "*/5 * * * *",
                "image": {"repository": "team/spark-job", "tag": "9.9.9"},
                "master": "local[4]",
                "retention": 7,
            },
        }
    )
    cronjob = named(docs, "CronJob", "apex-mesh-snapshot")
    assert cronjob["spec"]["schedule"] == "*/5 * * * *"
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert cronjob["spec"]["successfulJobsHistoryLimit"] == 3
    assert cronjob["spec"]["failedJobsHistoryLimit"] == 3
    pod = pod_spec(cronjob)
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.com/team/spark-job:9.9.9"
    assert container["command"][-3:] == ["python", "-m", "spark.snapshot"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["APEXMESH_SNAPSHOT_MASTER"] == "local[4]"
    assert env["APEXMESH_SNAPSHOT_RETENTION"] == "7"
    # The image's user (docker/spark.Dockerfile), which has a passwd entry.
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["restartPolicy"] == "Never"


def test_the_images_user_is_the_charts_user() -> None:
    dockerfile = (CHART.parents[1] / "docker" / "base.Dockerfile").read_text(encoding="utf-8")
    uid = re.search(r"ARG APEX_UID=(\d+)", dockerfile)
    assert uid is not None
    assert f"USER {uid[1]}:{uid[1]}" in dockerfile
    pod = pod_spec(named(render(None), "Deployment", "apex-mesh-relay"))
    assert pod["securityContext"]["runAsUser"] == int(uid[1])


@pytest.mark.parametrize(
    ("prefix", "domains"),
    [("apexmesh", ["example.com"]), ("Tenant_A", ["Example.COM", "rubble.com", "x--y.org"])],
)
def test_the_pubsub_role_names_the_leases_the_code_uses(
    rendered: Render, prefix: str, domains: list[str]
) -> None:
    docs = rendered({"redisPrefix": prefix, "domains": domains})
    role = named(docs, "Role", "apex-mesh-pubsub")
    named_rule = next(r for r in role["rules"] if "resourceNames" in r)
    assert named_rule["resourceNames"] == [lease_name(prefix, d) for d in domains]
    assert set(named_rule["verbs"]) == {"get", "update"}
    assert all(r["apiGroups"] == ["coordination.k8s.io"] for r in role["rules"])
    deployment = named(docs, "Deployment", "apex-mesh-pubsub")
    pod = pod_spec(deployment)
    assert pod["serviceAccountName"] == "apex-mesh-pubsub"
    assert pod["automountServiceAccountToken"] is True
    binding = named(docs, "RoleBinding", "apex-mesh-pubsub")
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def test_only_pubsub_mounts_a_service_account_token(ci_docs: list[Doc]) -> None:
    """Only pods that call the Kubernetes API mount a token: pubsub (its leader Lease),
    and the snapshot job when it drives Spark executor pods (a k8s:// master)."""
    for workload in ci_docs:
        if workload["kind"] in WORKLOADS:
            pod = pod_spec(workload)
            if pod.get("automountServiceAccountToken") is not False:
                component = pod_labels(workload)["app.kubernetes.io/component"]
                if component == "snapshot":
                    (job,) = pod["containers"]
                    env = {e["name"]: e.get("value", "") for e in job["env"]}
                    assert env["APEXMESH_SNAPSHOT_MASTER"].startswith("k8s://")
                else:
                    assert component == "pubsub"


def test_services_bind_the_pods_own_address(rendered: Render) -> None:
    for name in SERVICES:
        (container,) = pod_spec(named(rendered(None), "Deployment", f"apex-mesh-{name}"))[
            "containers"
        ]
        env = {e["name"]: e for e in container["env"]}
        hosts = [key for key in env if key.endswith("_HOST") and key.startswith("APEXMESH_")]
        assert hosts, name
        for key in hosts:
            assert env[key]["value"] == "$(POD_IP)", (name, key)
        assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_the_relay_gets_tls_and_sasl_from_secrets(rendered: Render) -> None:
    docs = rendered(None)
    pod = pod_spec(named(docs, "Deployment", "apex-mesh-relay"))
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["APEXMESH_RELAY_TLS_CERT"] == "/etc/apex-mesh/tls/tls.crt"
    assert env["APEXMESH_RELAY_SASL_FILE"] == "/etc/apex-mesh/sasl/credentials"
    assert "APEXMESH_DEV" not in env
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "apex-mesh-relay-tls"
    tls = named(docs, "Secret", "apex-mesh-relay-tls")
    assert tls["type"] == "kubernetes.io/tls"
    assert {"tls.crt", "tls.key", "ca.crt"} <= set(tls["data"])
    edge = named(docs, "Service", "apex-mesh-relay")
    assert edge["spec"]["type"] == "LoadBalancer"
    assert [p["port"] for p in edge["spec"]["ports"]] == [10288, 10289]


def test_cert_manager_and_existing_secrets_replace_the_generated_ones(rendered: Render) -> None:
    docs = rendered(
        {"relay": {"tls": {"mode": "certManager", "certManager": {"issuerRef": {"name": "ca"}}}}}
    )
    certificate = named(docs, "Certificate", "apex-mesh-relay")
    assert certificate["spec"]["secretName"] == "apex-mesh-relay-tls"
    assert "example.com" in certificate["spec"]["dnsNames"]
    assert not [s for s in of_kind(docs, "Secret") if s["metadata"]["name"].endswith("-tls")]
    docs = rendered({"relay": {"tls": {"mode": "secret", "existingSecret": "mine"}}})
    pod = pod_spec(named(docs, "Deployment", "apex-mesh-relay"))
    assert {v["name"]: v for v in pod["volumes"]}["tls"]["secret"]["secretName"] == "mine"


def test_redis_keeps_an_append_only_file_on_a_volume(rendered: Render) -> None:
    docs = rendered(None)
    redis = named(docs, "StatefulSet", "apex-mesh-redis")
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--appendfsync") + 1] == "always"
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    relay_env = {
        e["name"]: e
        for e in pod_spec(named(docs, "Deployment", "apex-mesh-relay"))["containers"][0]["env"]
    }
    assert relay_env["APEXMESH_REDIS_URL"]["value"].startswith(
        "redis://:$(APEXMESH_REDIS_PASSWORD)@apex-mesh-redis:6379/"
    )
    assert relay_env["APEXMESH_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == (
        "apex-mesh-redis"
    )


def test_an_external_redis_replaces_the_statefulset(rendered: Render) -> None:
    docs = rendered(
        {
            "redis": {"enabled": False},
            "externalRedis": {"host": "r.example", "existingSecret": "pw", "caSecret": "ca"},
        }
    )
    assert not of_kind(docs, "StatefulSet")
    env = {
        e["name"]: e
        for e in pod_spec(named(docs, "Deployment", "apex-mesh-access"))["containers"][0]["env"]
    }
    assert env["APEXMESH_REDIS_URL"]["value"].startswith("rediss://:$(APEXMESH_REDIS_PASSWORD)@")
    assert env["APEXMESH_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "pw"


def test_pod_disruption_budgets_only_where_more_than_one_pod_runs(rendered: Render) -> None:
    docs = rendered({"presence": {"replicaCount": 1}, "report": {"replicaCount": 3}})
    budgets = {d["metadata"]["name"]: d for d in of_kind(docs, "PodDisruptionBudget")}
    assert "apex-mesh-presence" not in budgets
    assert budgets["apex-mesh-report"]["spec"]["maxUnavailable"] == 1
    assert "apex-mesh-pubsub" in budgets  # autoscaled


def test_monitoring_resources_are_rendered_only_when_asked(rendered: Render) -> None:
    kinds = {d["kind"] for d in rendered(None)}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}
    docs = rendered(
        {
            "metrics": {
                "serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kps"}},
                "prometheusRule": {"enabled": True},
                "dashboards": {"enabled": True},
            }
        }
    )
    monitor = named(docs, "ServiceMonitor", "apex-mesh")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["endpoints"][0]["port"] == "http"
    scraped = [
        s
        for s in of_kind(docs, "Service")
        if s["metadata"]["labels"].get("apex-mesh.io/scrape") == "true"
    ]
    assert {s["metadata"]["labels"]["app.kubernetes.io/component"] for s in scraped} == set(
        SERVICES
    )
    assert all(any(p["name"] == "http" for p in s["spec"]["ports"]) for s in scraped)
    dashboards = [c for c in of_kind(docs, "ConfigMap") if "dashboard" in c["metadata"]["name"]]
    assert dashboards
    assert dashboards[0]["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_the_helm_test_exchanges_data_with_the_relay(rendered: Render) -> None:
    docs = rendered(None)
    (pod,) = of_kind(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    command = pod["spec"]["containers"][0]["command"]
    assert command[:3] == ["python", "-m", "apexmesh.client.smoke"]
    assert "apex-mesh-relay.apex-mesh.svc.cluster.local" in command
    secret = named(docs, "Secret", "apex-mesh-relay-sasl")
    assert {"credentials", "identity", "password"} <= set(secret["data"])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"relay": {"tls": {"mode": "secret"}}}, "relay.tls.existingSecret"),
        ({"redis": {"enabled": False}}, "externalRedis.host"),
        ({"pubsub": {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}}, "minReplicas"),
        ({"relay": {"sasl": {"existingSecret": "s"}}}, "tests.existingSecret"),
        ({"relay": {"drain": {"graceSeconds": 50}}}, "relay.drain.graceSeconds (50)"),
        ({"dashboard": {"terminationGracePeriodSeconds": 5}}, "dashboard.terminationGrace"),
    ],
)
def test_impossible_combinations_fail_with_a_message(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(values)


def test_notes_tell_how_to_attach_a_first_endpoint() -> None:
    text = notes(CHART)
    assert "helm test apex-mesh" in text
    assert "apexmesh.client.smoke" in text
    assert "base64 -d > ca.pem" in text
