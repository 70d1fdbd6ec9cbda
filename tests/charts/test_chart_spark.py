"""The snapshot job's Spark in the chart (snapshot-cronjob.yaml, snapshot-spark-configmap.yaml,
snapshot-rbac.yaml, the snapshot parts of networkpolicy.yaml and _validate.tpl): local mode
by default, Spark on Kubernetes by value (client mode: the driver's ServiceAccount and Role,
its pod IP and name, the executors' pod template and NetworkPolicy), s3a:// storage with
credentials from a Secret. The rendered spark.properties and environment are read back by
the job's own settings code (spark/settings.py), so what the chart writes is what the job
accepts. No cluster runs here: rendering, kubernetes-validate and these assertions are
the check (test_chart_validate.py lints and validates ci/spark-kubernetes-values.yaml)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from spark.conf import parse_properties
from spark.settings import SnapshotSettings
from tests.charts.conftest import CHART, Doc, named, pod_spec, render, values_of
from tools import helm as tool

pytestmark = [pytest.mark.chart, pytest.mark.unit]

K8S_VALUES = values_of(CHART / "ci" / "spark-kubernetes-values.yaml")
ROOT = CHART.parents[1]
NAME = "apex-mesh-snapshot"


def job_container(docs: list[Doc]) -> Doc:
    (only,) = pod_spec(named(docs, "CronJob", NAME))["containers"]
    return only  # type: ignore[no-any-return]


def spark_files(docs: list[Doc]) -> dict[str, str]:
    return named(docs, "ConfigMap", f"{NAME}-spark")["data"]  # type: ignore[no-any-return]


def properties(docs: list[Doc]) -> dict[str, str]:
    """spark.properties as the job reads it (spark/conf.py)."""
    return dict(parse_properties(spark_files(docs)["spark.properties"]))


def job_settings(docs: list[Doc], tmp_path: Path) -> SnapshotSettings:
    """The job's settings from the rendered container: plain values as they are, the
    downward API's as a pod would get them, spark.properties from the ConfigMap."""
    container = job_container(docs)
    conf = tmp_path / "spark.properties"
    conf.write_text(spark_files(docs)["spark.properties"])
    pod = {"status.podIP": "10.42.0.7", "metadata.name": f"{NAME}-29000000-abcde"}
    env: dict[str, str] = {"APEXMESH_DEV": "1"}
    for entry in container["env"]:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif "fieldRef" in entry.get("valueFrom", {}):
            env[entry["name"]] = pod[entry["valueFrom"]["fieldRef"]["fieldPath"]]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert env["APEXMESH_SNAPSHOT_SPARK_CONF_FILE"].startswith(mounts["spark-conf"] + "/")
    env["APEXMESH_SNAPSHOT_SPARK_CONF_FILE"] = str(conf)
    return SnapshotSettings.from_env(env)


def test_local_mode_by_default(tmp_path: Path) -> None:
    docs = render(None)
    pod = pod_spec(named(docs, "CronJob", NAME))
    assert pod["automountServiceAccountToken"] is False
    # its own ServiceAccount (snapshot.serviceAccount, issue #31), with no token and no
    # Role: local mode calls no API
    assert pod["serviceAccountName"] == NAME
    assert named(docs, "ServiceAccount", NAME)["automountServiceAccountToken"] is False
    assert not [
        d for d in docs if d["kind"] in ("Role", "RoleBinding") and d["metadata"]["name"] == NAME
    ]
    assert "executor-pod.yaml" not in spark_files(docs)
    assert not [k for k in properties(docs) if k.startswith("spark.kubernetes.")]
    settings = job_settings(docs, tmp_path)
    assert settings.master == "local[2]"
    assert settings.session_conf() == ()
    # the Spark settings' checksum rolls nothing (a CronJob) but shows a change
    annotations = named(docs, "CronJob", NAME)["spec"]["jobTemplate"]["spec"]["template"]
    assert "checksum/spark" in annotations["metadata"]["annotations"]


def test_spark_on_kubernetes_driver_identity_and_role() -> None:
    docs = render(K8S_VALUES)
    pod = pod_spec(named(docs, "CronJob", NAME))
    assert pod["serviceAccountName"] == NAME
    assert pod["automountServiceAccountToken"] is True
    assert named(docs, "ServiceAccount", NAME)
    rules = {
        (rule["resources"][0], verb)
        for rule in named(docs, "Role", NAME)["rules"]
        for verb in rule["verbs"]
    }
    for verb in ("create", "get", "list", "watch", "delete", "deletecollection"):
        assert ("pods", verb) in rules
    for verb in ("create", "delete", "deletecollection"):
        assert ("configmaps", verb) in rules
    assert {resource for resource, _ in rules} == {"pods", "configmaps"}  # nothing else
    binding = named(docs, "RoleBinding", NAME)
    assert binding["roleRef"]["name"] == NAME
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": NAME, "namespace": "apex-mesh"}
    ]


def test_spark_on_kubernetes_settings_are_what_the_job_reads(tmp_path: Path) -> None:
    docs = render(K8S_VALUES)
    settings = job_settings(docs, tmp_path)
    assert settings.master == "k8s://https://kubernetes.default.svc"
    conf = dict(settings.session_conf())
    image = job_container(docs)["image"]
    assert conf["spark.kubernetes.container.image"] == image  # executors run the job's image
    assert conf["spark.kubernetes.namespace"] == "apex-mesh"
    # client mode authenticates with the pod's own ServiceAccount token, which the pod
    # mounts (automountServiceAccountToken: true, test above)
    token = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert conf["spark.kubernetes.authenticate.oauthTokenFile"] == f"{token}/token"
    assert conf["spark.kubernetes.authenticate.caCertFile"] == f"{token}/ca.crt"
    assert (conf["spark.executor.instances"], conf["spark.executor.cores"]) == ("4", "2")
    assert conf["spark.executor.memory"] == "4g"
    assert conf["spark.driver.port"] == "7078"
    assert conf["spark.driver.blockManager.port"] == conf["spark.blockManager.port"] == "7079"
    # client mode: executors dial this pod's IP; it owns them
    assert conf["spark.driver.host"] == "10.42.0.7"
    assert conf["spark.driver.bindAddress"] == "0.0.0.0"
    assert conf["spark.kubernetes.driver.pod.name"] == f"{NAME}-29000000-abcde"
    # snapshot.sparkConf comes last, so it wins
    keys = [key for key, _ in settings.spark_conf]
    assert keys[-2:] == [
        "spark.kubernetes.executor.request.cores",
        "spark.sql.adaptive.advisoryPartitionSizeInBytes",
    ]
    # the pod template is where Spark is told it is
    mounts = {m["name"]: m["mountPath"] for m in job_container(docs)["volumeMounts"]}
    template = conf["spark.kubernetes.executor.podTemplateFile"]
    assert template == f"{mounts['spark-conf']}/executor-pod.yaml"
    assert "executor-pod.yaml" in spark_files(docs)


def test_the_executor_pod_template(tmp_path: Path) -> None:
    docs = render(K8S_VALUES)
    template: dict[str, Any] = yaml.safe_load(spark_files(docs)["executor-pod.yaml"])
    kubernetes_validate.validate(template, "1.32.0", strict=True)
    labels = template["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "snapshot-executor"
    spec = template["spec"]
    assert spec["automountServiceAccountToken"] is False  # executors never call the API
    assert spec["securityContext"]["runAsUser"] == 10001
    assert spec["nodeSelector"] == {"workload": "batch"}
    (executor,) = spec["containers"]
    assert (
        executor["name"] == properties(docs)["spark.kubernetes.executor.podTemplateContainerName"]
    )
    # the image's entrypoint runs the job: the template names the executor's script,
    # which the image installs there
    script = executor["command"][-1]
    dockerfile = (ROOT / "docker" / "spark.Dockerfile").read_text(encoding="utf-8")
    assert re.search(rf"^COPY spark-executor\.sh {re.escape(script)}$", dockerfile, re.MULTILINE)
    assert (ROOT / "docker" / "spark-executor.sh").stat().st_mode & 0o111
    env = {e["name"]: e for e in executor["env"]}
    assert env["SPARK_LOCAL_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    secret = env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": "apex-snapshots-s3", "key": "secret-access-key"}


def test_s3a_storage_settings_and_credentials(tmp_path: Path) -> None:
    docs = render(K8S_VALUES)
    conf = properties(docs)
    assert conf["spark.jars.packages"] == "org.apache.hadoop:hadoop-aws:3.5.0"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "https://s3.eu-west-1.amazonaws.com"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "false"
    env = {e["name"]: e for e in job_container(docs)["env"]}
    assert env["APEXMESH_SNAPSHOT_STORAGE"]["value"] == "s3a://apex-snapshots/example"
    for name, key in (
        ("AWS_ACCESS_KEY_ID", "access-key-id"),
        ("AWS_SECRET_ACCESS_KEY", "secret-access-key"),
    ):
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "apex-snapshots-s3", "key": key}
    assert "AWS" not in spark_files(docs)["spark.properties"]  # no secret in the ConfigMap
    # the driver's pyarrow S3 goes to the same endpoint as Spark's S3A
    settings = job_settings(docs, tmp_path)
    assert settings.storage == "s3a://apex-snapshots/example"
    # local mode with s3a: the S3A settings without the Kubernetes ones
    local = properties(
        render({"snapshot": {"storage": "s3a://b/p", "s3": {"pathStyleAccess": True}}})
    )
    assert local["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert not [k for k in local if k.startswith("spark.kubernetes.")]


def test_network_policies_of_driver_and_executors() -> None:
    docs = render(K8S_VALUES)
    executors = {"app.kubernetes.io/component": "snapshot-executor"}

    def selects(peer: dict[str, Any], component: str) -> bool:
        labels = peer.get("podSelector", {}).get("matchLabels", {})
        return bool(labels.get("app.kubernetes.io/component") == component)

    driver = named(docs, "NetworkPolicy", NAME)["spec"]
    (from_executors,) = driver["ingress"]
    assert selects(from_executors["from"][0], "snapshot-executor")
    assert {p["port"] for p in from_executors["ports"]} == {7078, 7079}
    egress_ports = {p["port"] for rule in driver["egress"] for p in rule.get("ports", [])}
    assert {443, 6443, 7079}.issubset(egress_ports)  # API server, executors, the store
    executor_policy = named(docs, "NetworkPolicy", f"{NAME}-executor")["spec"]
    assert (
        executor_policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        == executors["app.kubernetes.io/component"]
    )
    (ingress,) = executor_policy["ingress"]
    assert {
        c for c in ("snapshot", "snapshot-executor") for p in ingress["from"] if selects(p, c)
    } == {
        "snapshot",
        "snapshot-executor",
    }
    assert [p["port"] for p in ingress["ports"]] == [7079]
    to_driver = [
        r for r in executor_policy["egress"] if any(selects(p, "snapshot") for p in r.get("to", []))
    ]
    assert {p["port"] for p in to_driver[0]["ports"]} == {7078, 7079}
    # local mode: no executor policy, no ingress to the job
    local = render(None)
    assert not [d for d in local if d["metadata"]["name"] == f"{NAME}-executor"]
    assert named(local, "NetworkPolicy", NAME)["spec"]["ingress"] == []


def test_executors_must_reach_the_storage() -> None:
    with pytest.raises(
        helm.HelmRenderError, match=r"snapshot.master k8s://: executor pods must reach"
    ):
        tool.render(CHART, {"snapshot": {"master": "k8s://https://kubernetes.default.svc"}})
    shared = render(
        {
            "snapshot": {
                "master": "k8s://https://kubernetes.default.svc",
                "persistence": {"accessModes": ["ReadWriteMany"]},
            }
        }
    )
    template = yaml.safe_load(spark_files(shared)["executor-pod.yaml"])
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == "snapshots"]
    assert volume["persistentVolumeClaim"]["claimName"] == f"{NAME}-data"
    (executor,) = template["spec"]["containers"]
    assert {m["mountPath"] for m in executor["volumeMounts"]} >= {"/var/lib/apex-mesh/snapshots"}


def test_incremental_runs_find_the_previous_snapshot_on_the_volume(tmp_path: Path) -> None:
    """Each run starts from the storage's previous snapshot (docs/snapshot.md
    "Incremental runs"): the storage must be on the snapshot volume, a PVC that outlives
    the pod and the release, in the job's pod and in executor pods alike."""
    docs = render(None)
    settings = job_settings(docs, tmp_path)
    assert settings.compact_after == 24
    pod = pod_spec(named(docs, "CronJob", NAME))
    mounts = {m["name"]: m["mountPath"] for m in job_container(docs)["volumeMounts"]}
    assert mounts["snapshots"] == settings.storage == "/var/lib/apex-mesh/snapshots"
    (volume,) = [v for v in pod["volumes"] if v["name"] == "snapshots"]
    claim = named(docs, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # two runs never overlap (an incremental run changes the Redis snapshot in place)
    assert named(docs, "CronJob", NAME)["spec"]["concurrencyPolicy"] == "Forbid"

    # a directory of one's own: the volume is mounted there, not beside it
    own = render(
        {
            "snapshot": {
                "storage": "file:///data/catalogue/",
                "compactAfter": 6,
                "master": "k8s://https://kubernetes.default.svc",
                "persistence": {"accessModes": ["ReadWriteMany"]},
            }
        }
    )
    settings = job_settings(own, tmp_path)
    assert settings.compact_after == 6
    mounts = {m["name"]: m["mountPath"] for m in job_container(own)["volumeMounts"]}
    assert mounts["snapshots"] == "/data/catalogue"
    assert settings.storage == "file:///data/catalogue"
    template = yaml.safe_load(spark_files(own)["executor-pod.yaml"])
    (executor,) = template["spec"]["containers"]
    assert "/data/catalogue" in {m["mountPath"] for m in executor["volumeMounts"]}

    # s3a:// keeps the state in the bucket
    s3a = render({"snapshot": {"storage": "s3a://bucket/catalogue", "compactAfter": 0}})
    assert job_settings(s3a, tmp_path).compact_after == 0
