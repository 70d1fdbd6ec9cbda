"""Every component's ServiceAccount, separate from rbac.create (issue #31): with
rbac.create=false the pubsub pods referred to a ServiceAccount that only pubsub-rbac.yaml
made, so the Deployment stayed at 0/1 ("serviceaccount apex-mesh-pubsub not found").
Now <component>.serviceAccount.{create,name,annotations} decide the account, rbac.create
only the Roles and RoleBindings, as mature charts do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import pytest

from tests.charts.conftest import WORKLOADS, Doc, named, of_kind, pod_labels, pod_spec

pytestmark = [pytest.mark.chart, pytest.mark.unit]

Render = Callable[[dict[str, Any] | None], list[Doc]]

COMPONENTS: Final = ("relay", "access", "pubsub", "report", "presence", "dashboard", "snapshot")
SPARK_ON_KUBERNETES: Final = {
    "snapshot": {
        "master": "k8s://https://kubernetes.default.svc",
        "storage": "s3a://bucket/snapshots",
    }
}


def accounts_used(docs: list[Doc]) -> dict[str, str]:
    """component -> the ServiceAccount its pods run as ("default" when unnamed)."""
    return {
        pod_labels(doc)["app.kubernetes.io/component"]: pod_spec(doc).get(
            "serviceAccountName", "default"
        )
        for doc in docs
        if doc["kind"] in WORKLOADS and doc["kind"] != "Pod"
    }


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"rbac": {"create": False}},
        {"rbac": {"create": False}, **SPARK_ON_KUBERNETES},
        {"rbac": {"create": False}, "pubsub": {"leaderElection": "redis"}},
    ],
    ids=["default", "rbac-off", "rbac-off-spark-on-kubernetes", "rbac-off-redis-leader"],
)
def test_every_pods_service_account_is_rendered_whatever_rbac_says(
    rendered: Render, values: dict[str, Any]
) -> None:
    docs = rendered(values)
    made = {doc["metadata"]["name"] for doc in of_kind(docs, "ServiceAccount")}
    for component, account in accounts_used(docs).items():
        assert account == "default" or account in made, (
            f"{component} runs as ServiceAccount {account}, which the chart does not make"
        )
    for component in COMPONENTS:
        assert f"apex-mesh-{component}" in made, component


def test_rbac_off_drops_the_roles_and_keeps_the_accounts(rendered: Render) -> None:
    docs = rendered({"rbac": {"create": False, "operatorRole": False}, **SPARK_ON_KUBERNETES})
    assert not of_kind(docs, "Role")
    assert not of_kind(docs, "RoleBinding")
    used = accounts_used(docs)
    assert used["pubsub"] == "apex-mesh-pubsub"
    assert used["snapshot"] == "apex-mesh-snapshot"
    # the pods that call the API still get their token: someone else binds the Role
    assert pod_spec(named(docs, "Deployment", "apex-mesh-pubsub"))["automountServiceAccountToken"]
    (job,) = of_kind(docs, "CronJob")
    assert pod_spec(job)["automountServiceAccountToken"] is True


def test_an_account_of_your_own_is_used_and_bound(rendered: Render) -> None:
    docs = rendered(
        {
            "pubsub": {"serviceAccount": {"create": False, "name": "leader-elector"}},
            "relay": {"serviceAccount": {"create": False}},
            **SPARK_ON_KUBERNETES,
        }
    )
    made = {doc["metadata"]["name"] for doc in of_kind(docs, "ServiceAccount")}
    assert "apex-mesh-pubsub" not in made
    assert "apex-mesh-relay" not in made
    used = accounts_used(docs)
    assert used["pubsub"] == "leader-elector"
    assert used["relay"] == "default"
    binding = named(docs, "RoleBinding", "apex-mesh-pubsub")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "leader-elector", "namespace": "apex-mesh"}
    ]
    assert named(docs, "RoleBinding", "apex-mesh-snapshot")["subjects"][0]["name"] == (
        "apex-mesh-snapshot"
    )


def test_a_named_account_made_by_the_chart_carries_its_annotations(rendered: Render) -> None:
    role_arn = {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/snapshots"}
    docs = rendered(
        {
            "snapshot": {"serviceAccount": {"name": "snapshots", "annotations": role_arn}},
            "commonAnnotations": {"owner": "messaging"},
        }
    )
    account = named(docs, "ServiceAccount", "snapshots")
    assert account["metadata"]["annotations"] == {**role_arn, "owner": "messaging"}
    assert account["automountServiceAccountToken"] is False
    assert accounts_used(docs)["snapshot"] == "snapshots"


def test_switched_off_components_have_no_account(rendered: Render) -> None:
    docs = rendered(
        {c: {"enabled": False} for c in ("pubsub", "report", "presence", "dashboard", "snapshot")}
    )
    made = {doc["metadata"]["name"] for doc in of_kind(docs, "ServiceAccount")}
    assert made == {"apex-mesh-relay", "apex-mesh-access"}
