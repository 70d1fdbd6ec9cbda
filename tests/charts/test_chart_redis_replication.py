"""The chart's own replicated Redis (issue #30): ``redis.architecture: replication`` renders
a StatefulSet of Redis pods with a Sentinel each, the Services, the services'
``redis+sentinel://`` URL, a PodDisruptionBudget, anti-affinity and, with
``redis.metrics.enabled``, a redis_exporter sidecar scraped by its own ServiceMonitor;
``standalone`` (the default) renders exactly what the chart rendered before
(tests/charts/golden/redis-standalone.json).

The rendered commands also run, as three pods on this machine with the host's
redis-server: test_chart_redis_replication_live.py.

ci/redis-replication-values.yaml puts the architecture through the matrix the other chart
tests run: helm lint --strict, kubernetes-validate --strict, the real helm 3 and 4
(test_chart_real_helm.py), every container's probes, resources and security context, the
NetworkPolicies' peers and ports (test_chart_render.py) and no password on a command line
(test_chart_redis.py).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

import helm_python as helm
import pytest

from apexmesh.store.connection import SENTINEL_SCHEMES, RedisPoolSettings, connect_redis
from tests.charts.conftest import CHART, Doc, containers, named, of_kind, render, values_of
from tests.charts.kube_api import against_both_helms
from tests.charts.test_chart_redis import _claim_size, _dry_run
from tools import helm as tool

pytestmark = pytest.mark.chart

GOLDEN: Final = Path(__file__).resolve().parent / "golden" / "redis-standalone.json"
STATEFULSET: Final = "apex-mesh-redis"
HEADLESS: Final = "apex-mesh-redis-headless.apex-mesh.svc.cluster.local"
NODES: Final = [f"apex-mesh-redis-{i}.{HEADLESS}" for i in range(3)]
REPLICATION: Final = {"redis": {"architecture": "replication"}}
EXPORTER: Final = "docker.io/oliver006/redis_exporter:v1.62.0"


def _unversioned(node: Any) -> Any:
    """``node`` without the labels that carry the chart's version."""
    if isinstance(node, dict):
        return {
            key: _unversioned(value)
            for key, value in node.items()
            if key not in ("helm.sh/chart", "app.kubernetes.io/version")
        }
    if isinstance(node, list):
        return [_unversioned(value) for value in node]
    return node


def redis_part(docs: list[Doc]) -> dict[str, Any]:
    """What the Redis templates render, deterministic: the StatefulSet and Redis Services
    whole, the Redis NetworkPolicy whole and the other policies' rules towards Redis, the
    Redis Secret's keys, every PodDisruptionBudget's and ServiceMonitor's spec, the
    PrometheusRule's alert names and every container's APEXMESH_REDIS_* environment."""
    out: dict[str, Any] = {}
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        key = f"{kind}/{name}"
        if kind == "StatefulSet" or (kind == "Service" and "redis" in name):
            out[key] = doc
        elif kind == "NetworkPolicy":
            rules = [
                rule
                for rule in doc["spec"]["egress"]
                if "redis" in str(rule.get("to")) or "6379" in str(rule.get("ports"))
            ]
            out[key] = doc if name.endswith("-redis") else rules
        elif kind == "Secret" and name.endswith("-redis"):
            out[key] = sorted(doc["data"])
        elif kind in ("PodDisruptionBudget", "ServiceMonitor"):
            out[key] = doc["spec"]
        elif kind == "PrometheusRule":
            out[key] = [r["alert"] for g in doc["spec"]["groups"] for r in g["rules"]]
        elif kind in ("Deployment", "CronJob", "Pod"):
            spec = doc["spec"]
            spec = spec.get("jobTemplate", {}).get("spec", spec)
            spec = spec.get("template", {}).get("spec", spec)
            for one in [*spec.get("initContainers", []), *spec["containers"]]:
                env = [e for e in one.get("env", []) if e["name"].startswith("APEXMESH_REDIS")]
                if env:
                    out[f"{key}/{one['name']}"] = env
    return _unversioned(out)  # type: ignore[no-any-return]


def pod(docs: list[Doc]) -> Doc:
    return named(docs, "StatefulSet", STATEFULSET)["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def by_name(items: list[Doc]) -> dict[str, Doc]:
    return {item["name"]: item for item in items}


def env_of(container: Doc) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def client_env(docs: list[Doc]) -> dict[str, dict[str, Any]]:
    """The Redis environment of every Redis client of the release."""
    seen = {
        f"{w['metadata']['name']}/{c['name']}": env_of(c)
        for w, c in containers(docs)
        if "APEXMESH_REDIS_URL" in env_of(c)
    }
    assert seen
    return seen


# --------------------------------------------------------------------------- standalone


@pytest.mark.unit
@pytest.mark.parametrize("name", ["default-values", "full-values", "external-redis-values"])
def test_standalone_renders_what_it_rendered_before(name: str) -> None:
    """The golden file is the Redis part of these renders made by the chart before
    redis.architecture existed (commit d496f74): an upgrade of an existing install changes
    none of its Redis objects, nor its clients' URL. A deliberate change to them rewrites
    it: ``PYTHONPATH=. python -m tests.charts.test_chart_redis_replication``."""
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))[name]
    values = values_of(CHART / "ci" / f"{name}.yaml")
    assert redis_part(render(values)) == golden
    if name != "external-redis-values":
        explicit = {**values, "redis": {**values.get("redis", {}), "architecture": "standalone"}}
        assert redis_part(render(explicit)) == golden


@pytest.mark.unit
def test_standalone_ignores_the_replication_values() -> None:
    values = {
        "redis": {
            "replicas": 5,
            "waitReplicas": 2,
            "sentinel": {"quorum": 3, "port": 26380},
            "pdb": {"maxUnavailable": 2},
        }
    }
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))["default-values"]
    assert redis_part(render(values)) == golden


# --------------------------------------------------------------------------- replication


@pytest.mark.unit
def test_replication_runs_redis_and_a_sentinel_in_every_pod() -> None:
    docs = render(REPLICATION)
    statefulset = named(docs, "StatefulSet", STATEFULSET)
    spec = statefulset["spec"]
    assert spec["replicas"] == 3
    assert spec["serviceName"] == "apex-mesh-redis-headless"
    # as in standalone, so an upgrade from it changes no immutable field
    assert spec["podManagementPolicy"] == "OrderedReady"
    assert [c["name"] for c in pod(docs)["containers"]] == ["redis", "sentinel"]
    redis, sentinel = pod(docs)["containers"]
    args = redis["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--appendfsync") + 1] == "always"
    script = redis["command"][2]
    assert "replicaof $primary $REDIS_PORT" in script
    assert 'masterauth "$REDIS_PASSWORD"' in script
    assert "replica-announce-ip $me" in script
    assert redis["lifecycle"]["preStop"]["exec"]["command"][-1].endswith("hand_over")
    environment = env_of(redis)
    assert environment["REDIS_NODES"] == " ".join(NODES)
    assert environment["PRIMARY_NAME"] == "apexmesh"
    for one in (redis, sentinel):
        passwords = {
            e["name"]: e
            for e in one["env"]
            if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]
        }
        for name in ("REDIS_PASSWORD", "REDISCLI_AUTH"):
            ref = passwords[name]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": "apex-mesh-redis", "key": "redis-password"}, one["name"]
    assert by_name(sentinel["ports"])["sentinel"]["containerPort"] == 26379
    # the scripts are the ConfigMap's, and a change to them rolls the pods
    scripts = named(docs, "ConfigMap", "apex-mesh-redis-scripts")["data"]["find-primary.sh"]
    assert "find_primary()" in scripts
    assert "hand_over()" in scripts
    volumes = by_name(pod(docs)["volumes"])
    assert volumes["scripts"]["configMap"]["name"] == "apex-mesh-redis-scripts"
    assert volumes["sentinel"]["emptyDir"]["medium"] == "Memory"
    annotations = statefulset["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/scripts"])
    # one claim per pod, as in standalone
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"


@pytest.mark.unit
def test_the_sentinel_config_takes_its_settings_from_values() -> None:
    docs = render(
        {
            "redis": {
                "architecture": "replication",
                "replicas": 5,
                "sentinel": {
                    "primaryName": "mesh-primary",
                    "port": 26380,
                    "quorum": 3,
                    "downAfterMilliseconds": 2500,
                    "failoverTimeout": 30000,
                    "parallelSyncs": 2,
                },
            }
        }
    )
    assert named(docs, "StatefulSet", STATEFULSET)["spec"]["replicas"] == 5
    sentinel = by_name(pod(docs)["containers"])["sentinel"]
    environment = env_of(sentinel)
    assert environment["QUORUM"] == "3"
    assert environment["DOWN_AFTER_MILLISECONDS"] == "2500"
    assert environment["FAILOVER_TIMEOUT"] == "30000"
    assert environment["PARALLEL_SYNCS"] == "2"
    assert environment["PRIMARY_NAME"] == "mesh-primary"
    assert environment["SENTINEL_PORT"] == "26380"
    assert len(environment["REDIS_NODES"].split()) == 5
    # a pod named primary with no data waits for the failover at most this long
    assert environment["PRIMARY_WAIT_SECONDS"] == "32"
    config = sentinel["command"][2]
    for line in (
        "sentinel resolve-hostnames yes",
        "sentinel announce-hostnames yes",
        "sentinel announce-ip $me",
        'requirepass "$REDIS_PASSWORD"',
        "sentinel monitor $PRIMARY_NAME $primary $REDIS_PORT $QUORUM",
        'sentinel auth-pass $PRIMARY_NAME "$REDIS_PASSWORD"',
        "sentinel down-after-milliseconds $PRIMARY_NAME $DOWN_AFTER_MILLISECONDS",
        "sentinel failover-timeout $PRIMARY_NAME $FAILOVER_TIMEOUT",
        "sentinel parallel-syncs $PRIMARY_NAME $PARALLEL_SYNCS",
    ):
        assert f"\n{line}\n" in config, line
    assert by_name(sentinel["ports"])["sentinel"]["containerPort"] == 26380
    assert sentinel["readinessProbe"]["exec"]["command"] == ["redis-cli", "-p", "26380", "ping"]


@pytest.mark.unit
def test_the_services_reach_the_sentinels_and_the_pods_each_other() -> None:
    docs = render(REPLICATION)
    service = named(docs, "Service", "apex-mesh-redis")
    # no Redis port: through a ClusterIP a client would reach a replica as often as not
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("sentinel", 26379)]
    headless = named(docs, "Service", "apex-mesh-redis-headless")["spec"]
    assert headless["clusterIP"] == "None"
    assert headless["publishNotReadyAddresses"] is True
    assert [(p["name"], p["port"]) for p in headless["ports"]] == [
        ("redis", 6379),
        ("sentinel", 26379),
    ]


@pytest.mark.unit
def test_every_client_is_given_the_sentinel_url_and_waits_for_a_replica() -> None:
    docs = render(REPLICATION)
    sentinels = ",".join(f"{node}:26379" for node in NODES)
    for where, env in client_env(docs).items():
        assert env["APEXMESH_REDIS_URL"] == (
            f"redis+sentinel://:$(APEXMESH_REDIS_PASSWORD)@{sentinels}/apexmesh/0"
            "?sentinel_password=$(APEXMESH_REDIS_PASSWORD)"
        ), where
        assert env["APEXMESH_REDIS_WAIT_REPLICAS"] == "1", where
        assert env["APEXMESH_REDIS_WAIT_TIMEOUT_MS"] == "1000", where
        assert env["APEXMESH_REDIS_PASSWORD"]["secretKeyRef"]["name"] == "apex-mesh-redis"
    docs = render({"redis": {"architecture": "replication", "waitReplicas": 0}})
    for where, env in client_env(docs).items():
        assert "APEXMESH_REDIS_WAIT_REPLICAS" not in env, where


@pytest.mark.unit
async def test_the_services_accept_the_url() -> None:
    """connect_redis (every service's client) takes the rendered URL, Kubernetes having
    put the password in: a Sentinel client of every pod's sentinel, the same password for
    the sentinels, the primary's name and the WAIT setting (no I/O until used)."""
    env = next(iter(client_env(render(REPLICATION)).values()))
    url = env["APEXMESH_REDIS_URL"].replace("$(APEXMESH_REDIS_PASSWORD)", "pw0123")
    parts = urlsplit(url)
    assert parts.scheme in SENTINEL_SCHEMES
    assert parse_qs(parts.query) == {"sentinel_password": ["pw0123"]}
    settings = RedisPoolSettings.from_env(
        {"APEXMESH_REDIS_WAIT_REPLICAS": env["APEXMESH_REDIS_WAIT_REPLICAS"]}
    )
    client = connect_redis(url, settings)
    try:
        pool: Any = client.connection_pool
        assert pool.service_name == "apexmesh"
        sentinels = pool.sentinel_manager.sentinels
        addresses = [s.connection_pool.connection_kwargs for s in sentinels]
        assert [(a["host"], a["port"]) for a in addresses] == [(n, 26379) for n in NODES]
        assert {a["password"] for a in addresses} == {"pw0123"}
        assert pool.connection_kwargs["password"] == "pw0123"
    finally:
        await client.aclose()


@pytest.mark.unit
def test_a_disruption_budget_and_anti_affinity_keep_the_pods_apart() -> None:
    docs = render(REPLICATION)
    budget = named(docs, "PodDisruptionBudget", "apex-mesh-redis")["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"]["matchLabels"]["app.kubernetes.io/component"] == "redis"
    anti = pod(docs)["affinity"]["podAntiAffinity"]
    (preferred,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = preferred["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert selector["app.kubernetes.io/component"] == "redis"
    assert "topologySpreadConstraints" not in pod(docs)
    # required, when asked
    hard = pod(render({"redis": {"architecture": "replication", "podAntiAffinityPreset": "hard"}}))
    (required,) = hard["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required["topologyKey"] == "kubernetes.io/hostname"
    assert (
        "preferredDuringSchedulingIgnoredDuringExecution" not in hard["affinity"]["podAntiAffinity"]
    )
    # none; or redis.affinity as written, which wins
    assert "affinity" not in pod(
        render({"redis": {"architecture": "replication", "podAntiAffinityPreset": "none"}})
    )
    own = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["redis"]}]}
                ]
            }
        }
    }
    assert (
        pod(render({"redis": {"architecture": "replication", "affinity": own}}))["affinity"] == own
    )
    # topology spread, templated
    spread = values_of(CHART / "ci" / "redis-replication-values.yaml")
    (constraint,) = pod(render(spread))["topologySpreadConstraints"]
    assert constraint["topologyKey"] == "topology.kubernetes.io/zone"
    assert constraint["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "apex-mesh"
    # no budget without replication (one pod), nor when switched off
    assert "PodDisruptionBudget/apex-mesh-redis" not in {
        f"{d['kind']}/{d['metadata']['name']}" for d in render(None)
    }
    off = render({"redis": {"architecture": "replication", "pdb": {"enabled": False}}})
    assert not [
        d for d in of_kind(off, "PodDisruptionBudget") if d["metadata"]["name"] == STATEFULSET
    ]


@pytest.mark.unit
@pytest.mark.parametrize("architecture", ["standalone", "replication"])
def test_the_exporter_is_scraped_through_the_redis_service(architecture: str) -> None:
    values = {
        "redis": {"architecture": architecture, "metrics": {"enabled": True}},
        "metrics": {"serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kps"}}},
    }
    docs = render(values)
    exporter = by_name(pod(docs)["containers"])["metrics"]
    assert exporter["image"] == EXPORTER
    assert by_name(exporter["ports"])["metrics"]["containerPort"] == 9121
    environment = env_of(exporter)
    assert environment["REDIS_ADDR"] == "redis://localhost:6379"
    assert environment["REDIS_PASSWORD"]["secretKeyRef"]["name"] == "apex-mesh-redis"
    service = named(docs, "Service", "apex-mesh-redis")
    assert by_name(service["spec"]["ports"])["metrics"]["targetPort"] == "metrics"
    monitor = named(docs, "ServiceMonitor", "apex-mesh-redis")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    selected = [
        s
        for s in of_kind(docs, "Service")
        if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    # the headless Service is selected too but has no metrics port: no second target
    assert [
        s["metadata"]["name"] for s in selected if "metrics" in by_name(s["spec"]["ports"])
    ] == ["apex-mesh-redis"]
    # the services' own ServiceMonitor is as it was
    assert named(docs, "ServiceMonitor", "apex-mesh")["spec"]["endpoints"][0]["port"] == "http"


@pytest.mark.unit
def test_no_exporter_and_no_redis_monitor_unless_asked() -> None:
    docs = render({**REPLICATION, "metrics": {"serviceMonitor": {"enabled": True}}})
    assert "metrics" not in by_name(pod(docs)["containers"])
    assert [m["metadata"]["name"] for m in of_kind(docs, "ServiceMonitor")] == ["apex-mesh"]
    rules = render({**REPLICATION, "metrics": {"prometheusRule": {"enabled": True}}})
    alerts = {
        r["alert"]
        for g in named(rules, "PrometheusRule", "apex-mesh")["spec"]["groups"]
        for r in g["rules"]
    }
    assert not {a for a in alerts if a.startswith("ApexMeshRedis")}


@pytest.mark.unit
def test_the_redis_alerts_follow_the_architecture() -> None:
    def alerts(architecture: str) -> set[str]:
        docs = render(
            {
                "redis": {"architecture": architecture, "metrics": {"enabled": True}},
                "metrics": {"prometheusRule": {"enabled": True}},
            }
        )
        groups = named(docs, "PrometheusRule", "apex-mesh")["spec"]["groups"]
        return {
            r["alert"] for g in groups for r in g["rules"] if r["alert"].startswith("ApexMeshRedis")
        }

    assert alerts("standalone") == {"ApexMeshRedisNoPrimary"}
    assert alerts("replication") == {
        "ApexMeshRedisNoPrimary",
        "ApexMeshRedisReplicaLinkDown",
        "ApexMeshRedisTooFewReplicas",
    }


@pytest.mark.unit
def test_the_network_policy_lets_in_sentinel_peers_and_prometheus() -> None:
    monitoring = [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    docs = render(
        {
            "redis": {"architecture": "replication", "metrics": {"enabled": True}},
            "networkPolicy": {"metricsFrom": monitoring},
        }
    )
    policy = named(docs, "NetworkPolicy", "apex-mesh-redis")["spec"]

    def ports(rule: Doc) -> set[int]:
        return {p["port"] for p in rule["ports"]}

    clients, peers, prometheus = policy["ingress"]
    assert clients["from"][0]["podSelector"]["matchLabels"]["apex-mesh.io/redis-client"] == "true"
    assert ports(clients) == {6379, 26379}
    assert peers["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "redis"
    assert ports(peers) == {6379, 26379}
    assert prometheus["from"] == monitoring
    assert ports(prometheus) == {9121}
    dns, to_peers = policy["egress"]
    assert ports(dns) == {53}
    assert ports(to_peers) == {6379, 26379}
    # every client may dial the sentinels as it dials Redis
    for component in ("relay", "access", "pubsub", "presence", "snapshot"):
        egress = named(docs, "NetworkPolicy", f"apex-mesh-{component}")["spec"]["egress"]
        (to_redis,) = [r for r in egress if "redis" in str(r.get("to"))]
        assert ports(to_redis) == {6379, 26379}, component
    # without metricsFrom nobody reaches the exporter over the pod network
    plain = named(
        render({"redis": {"architecture": "replication", "metrics": {"enabled": True}}}),
        "NetworkPolicy",
        "apex-mesh-redis",
    )
    assert all(9121 not in ports(rule) for rule in plain["spec"]["ingress"])


@pytest.mark.unit
@pytest.mark.parametrize(
    ("redis", "message"),
    [
        ({"architecture": "sentinel"}, "architecture"),
        ({"architecture": "replication", "replicas": "three"}, "replicas"),
        ({"architecture": "replication", "sentinel": {"quorum": 0}}, "quorum"),
        ({"architecture": "replication", "sentinel": {"primaryName": "a/b"}}, "primaryName"),
        (
            {"architecture": "replication", "podAntiAffinityPreset": "always"},
            "podAntiAffinityPreset",
        ),
        ({"metrics": {"enabled": True, "image": {"tag": "latest"}}}, "tag"),
        ({"metrics": {"enabled": True, "image": {"tag": ""}}}, "tag"),
        ({"architecture": "replication", "sentinel": {"downAfter": 1000}}, "downAfter"),
    ],
    ids=[
        "unknown-architecture",
        "replicas-as-text",
        "no-quorum",
        "primary-name-with-slash",
        "unknown-preset",
        "exporter-latest",
        "exporter-untagged",
        "unknown-key",
    ],
)
def test_the_schema_refuses_bad_redis_values(redis: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=message):
        render({"redis": redis})


@pytest.mark.unit
@pytest.mark.parametrize(
    ("redis", "message"),
    [
        ({"replicas": 2}, "redis.replicas (2): replication needs at least 3 pods"),
        (
            {"replicas": 3, "sentinel": {"quorum": 4}},
            "redis.sentinel.quorum (4) is above redis.replicas (3)",
        ),
        (
            {"replicas": 3, "waitReplicas": 3},
            "redis.waitReplicas (3) must be below redis.replicas (3)",
        ),
    ],
    ids=["two-pods", "quorum-above-replicas", "wait-for-missing-replicas"],
)
def test_replication_refuses_values_that_cannot_fail_over(
    redis: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render({"redis": {"architecture": "replication", **redis}})
    # the same values are no concern of a standalone Redis
    assert render({"redis": redis})


@pytest.mark.unit
def test_the_dashboard_shows_redis() -> None:
    board = json.loads((CHART / "files" / "dashboards" / "apex-mesh.json").read_text())
    exprs = {
        panel["title"]: " ".join(target["expr"] for target in panel["targets"])
        for panel in board["panels"]
        if panel["type"] != "row"
    }
    assert "redis_memory_used_bytes" in exprs["Redis memory"]
    assert "redis_connected_clients" in exprs["Redis clients"]
    assert "rate(redis_commands_processed_total" in exprs["Redis commands"]
    assert "max by (pod, role) (redis_instance_info" in exprs["Redis role"]
    assert "redis_connected_slave_lag_seconds" in exprs["Redis replication"]
    assert all('pod=~".+-redis-[0-9]+"' in exprs[t] for t in exprs if t.startswith("Redis "))


# --------------------------------------------------------------------------- size


@against_both_helms
async def test_a_new_size_says_how_to_grow_every_pods_volume(
    major: int, kmock: Any, tmp_path: Path
) -> None:
    """As in standalone (test_chart_redis.py), the claim template keeps its size, and
    NOTES name the claim of every pod, not only pod 0's."""
    # a copy: renders are cached, and the golden and other tests read them after
    statefulset = copy.deepcopy(named(render(REPLICATION), "StatefulSet", STATEFULSET))
    statefulset["metadata"]["annotations"] = {
        "meta.helm.sh/release-name": tool.RELEASE,
        "meta.helm.sh/release-namespace": tool.NAMESPACE,
    }
    kmock.objects["apps/v1/statefulsets", tool.NAMESPACE, STATEFULSET] = statefulset
    release = await _dry_run(
        kmock, major, tmp_path, "redis.architecture=replication", "redis.persistence.size=20Gi"
    )
    assert _claim_size(release) == "8Gi"
    notes = release["info"]["notes"]
    for ordinal in range(3):
        assert f"patch pvc data-apex-mesh-redis-{ordinal} " in notes
    assert "data-apex-mesh-redis-3" not in notes
    assert "sentinel get-master-addr-by-name apexmesh" in notes


def _write_golden() -> None:
    """Rewrite golden/redis-standalone.json from the chart as it is now."""
    renders = {
        name: redis_part(render(values_of(CHART / "ci" / f"{name}.yaml")))
        for name in ("default-values", "full-values", "external-redis-values")
    }
    GOLDEN.write_text(json.dumps(renders, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    _write_golden()
