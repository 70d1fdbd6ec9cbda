"""The chart's NetworkPolicies where clusters differ (issue #31).

- DNS: egress used to reach only pods labelled ``k8s-app: kube-dns``, so a cluster with
  NodeLocal DNSCache (queries answered on the node, at 169.254.20.10 or at the kube-dns
  Service address the cache takes over) lost name resolution. ``networkPolicy.dns``
  decides; the default, port 53 to any address, works with either.
- The admin HTTP port serves /metrics and the token-protected admin write API alike.
  ``networkPolicy.metricsFrom`` used to default to every namespace; the default now lets
  no other pod in (the dashboard only, the kubelet, and port-forward), and naming
  Prometheus' namespace opens that port, and no other, to it.

Each policy is evaluated here as the API defines it: a rule with no ``to``/``from``
matches every peer, a rule with no ``ports`` every port.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any, Final

import pytest

from tests.charts.conftest import CHART, Doc, of_kind
from tools.helm import notes

pytestmark = [pytest.mark.chart, pytest.mark.unit]

Render = Callable[[dict[str, Any] | None], list[Doc]]

NODE_LOCAL_DNS: Final = "169.254.20.10"
KUBE_DNS_SERVICE: Final = "10.96.0.10"
COMPONENTS: Final = ("relay", "access", "pubsub", "report", "presence")
HTTP: Final = {"relay": 8401, "access": 8411, "pubsub": 8414, "report": 8412, "presence": 8413}
GRPC: Final = {"relay": 7401, "access": 7411, "pubsub": 7414, "report": 7412, "presence": 7413}
MONITORING: Final = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
}


def _port_matches(rule: Doc, port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    return any(p["port"] == port and p.get("protocol", "TCP") == protocol for p in ports)


def _ip_matches(peer: Doc, ip: str) -> bool:
    block = peer.get("ipBlock")
    if block is None:
        return False  # a pod or namespace selector: pods, not a node's address
    address = ipaddress.ip_address(ip)
    if address not in ipaddress.ip_network(block["cidr"]):
        return False
    return not any(address in ipaddress.ip_network(cut) for cut in block.get("except", []))


def allows_egress_to_ip(policy: Doc, ip: str, port: int, protocol: str) -> bool:
    for rule in policy["spec"].get("egress", []):
        peers = rule.get("to")
        if _port_matches(rule, port, protocol) and (
            not peers or any(_ip_matches(p, ip) for p in peers)
        ):
            return True
    return False


def ingress_peers(policy: Doc, port: int) -> list[Any]:
    """The peers let in on ``port``: None stands for a rule that lets everyone in."""
    found: list[Any] = []
    for rule in policy["spec"].get("ingress", []):
        if _port_matches(rule, port, "TCP"):
            found += rule.get("from") or [None]
    return found


def policies(docs: list[Doc]) -> list[Doc]:
    found = of_kind(docs, "NetworkPolicy")
    assert found
    return found


@pytest.mark.parametrize("address", [NODE_LOCAL_DNS, KUBE_DNS_SERVICE])
def test_every_pod_resolves_names_with_node_local_dns_cache(rendered: Render, address: str) -> None:
    for policy in policies(rendered(None)):
        for protocol in ("UDP", "TCP"):
            assert allows_egress_to_ip(policy, address, 53, protocol), (
                f"{policy['metadata']['name']}: no DNS to {address}:53/{protocol}"
            )


def test_the_dns_rule_can_be_narrowed(rendered: Render) -> None:
    narrowed = [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        },
        {"ipBlock": {"cidr": f"{NODE_LOCAL_DNS}/32"}},
    ]
    docs = rendered({"networkPolicy": {"dns": {"to": narrowed, "ports": [53, 5353]}}})
    for policy in policies(docs):
        name = policy["metadata"]["name"]
        assert allows_egress_to_ip(policy, NODE_LOCAL_DNS, 5353, "UDP"), name
        assert not allows_egress_to_ip(policy, "8.8.8.8", 53, "UDP"), name
        (dns,) = [r for r in policy["spec"]["egress"] if r.get("to") == narrowed]
        assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {
            (53, "UDP"),
            (53, "TCP"),
            (5353, "UDP"),
            (5353, "TCP"),
        }


def test_only_the_dashboard_reaches_the_admin_ports_by_default(rendered: Render) -> None:
    docs = rendered(None)
    by_name = {p["metadata"]["name"]: p for p in policies(docs)}
    for component in COMPONENTS:
        peers = ingress_peers(by_name[f"apex-mesh-{component}"], HTTP[component])
        assert None not in peers, f"{component}: its admin port is open to everyone"
        components = {
            (peer.get("podSelector") or {})
            .get("matchLabels", {})
            .get("app.kubernetes.io/component")
            for peer in peers
        }
        assert components == {"dashboard"}, f"{component}: {peers}"
        assert not [peer for peer in peers if "namespaceSelector" in peer], component


def test_metrics_from_opens_the_admin_port_and_nothing_else(rendered: Render) -> None:
    docs = rendered({"networkPolicy": {"metricsFrom": [MONITORING]}})
    by_name = {p["metadata"]["name"]: p for p in policies(docs)}
    for component in COMPONENTS:
        policy = by_name[f"apex-mesh-{component}"]
        assert MONITORING in ingress_peers(policy, HTTP[component]), component
        assert MONITORING not in ingress_peers(policy, GRPC[component]), component


def test_no_ingress_rule_lets_everyone_in_but_the_beep_edge(ci_docs: list[Doc]) -> None:
    for policy in policies(ci_docs):
        for rule in policy["spec"].get("ingress", []):
            if rule.get("from"):
                continue
            ports = {p["port"] for p in rule.get("ports", [])}
            assert policy["metadata"]["name"] == "apex-mesh-relay", policy["metadata"]["name"]
            assert ports, rule
            assert ports <= {10288, 10289}, rule


def test_notes_say_how_to_let_prometheus_in() -> None:
    monitored = {"metrics": {"serviceMonitor": {"enabled": True}}}
    assert "networkPolicy.metricsFrom" in notes(CHART, monitored)
    opened = {**monitored, "networkPolicy": {"metricsFrom": [MONITORING]}}
    assert "networkPolicy.metricsFrom" not in notes(CHART, opened)
