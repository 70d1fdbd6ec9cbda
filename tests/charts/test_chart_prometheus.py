"""The PrometheusRule and the Grafana dashboard: promtool checks and unit-tests every
alert (tests/charts/prometheus/rules-test.yaml), and every PromQL expression names a
metric the code exports, found by reading the code itself (so metrics added later are
found too), or one that prometheus_client's own collectors export in every service's
registry (read from a real registry), or one of the few that Prometheus and
kube-state-metrics export."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from apexmesh.ops.registry import service_registry
from tests.charts.conftest import CHART, ROOT, named, render

pytestmark = pytest.mark.chart

RULES_TEST: Final = Path(__file__).resolve().parent / "prometheus" / "rules-test.yaml"

#: Series the chart's PromQL may name that apex-mesh does not export, and who does.
EXTERNAL: Final = {
    "up": "Prometheus (every scrape target)",
    "kube_pod_status_ready": "kube-state-metrics",
    "kube_cronjob_status_last_successful_time": "kube-state-metrics",
    # oliver006/redis_exporter beside the chart's Redis (redis.metrics; its exporter/info.go
    # and the INFO fields it turns into gauges and counters)
    "redis_instance_info": "redis_exporter (INFO role, version: one series per instance)",
    "redis_master_link_up": "redis_exporter (INFO master_link_status, replicas only)",
    "redis_connected_slaves": "redis_exporter (INFO connected_slaves)",
    "redis_connected_slave_lag_seconds": "redis_exporter (INFO slaveN lag, on the primary)",
    "redis_memory_used_bytes": "redis_exporter (INFO used_memory)",
    "redis_memory_max_bytes": "redis_exporter (INFO maxmemory)",
    "redis_connected_clients": "redis_exporter (INFO connected_clients)",
    "redis_commands_processed_total": "redis_exporter (INFO total_commands_processed)",
}

#: The values every alert of the chart is rendered with: the chart's Redis replicated and
#: with its exporter, so that the Redis alerts are among them.
RULE_VALUES: Final = {
    "metrics": {"prometheusRule": {"enabled": True}},
    "redis": {"architecture": "replication", "metrics": {"enabled": True}},
}


def rule_groups() -> list[dict[str, Any]]:
    docs = render(RULE_VALUES)
    return named(docs, "PrometheusRule", "apex-mesh")["spec"]["groups"]  # type: ignore[no-any-return]


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: scripts/install installs Debian's prometheus package"
    return path


@pytest.mark.integration  # runs promtool
def test_promtool_checks_and_tests_every_alert(tmp_path: Path) -> None:
    groups = rule_groups()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    shutil.copy(RULES_TEST, tmp_path / "rules-test.yaml")
    check = subprocess.run(  # noqa: PLW1510  (the return code is asserted)
        [promtool(), "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(  # noqa: PLW1510  (the return code is asserted)
        [promtool(), "test", "rules", "rules-test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    alerts = {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}
    tests = yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))["tests"]
    firing = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    quiet = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if not case.get("exp_alerts")
    }
    assert alerts == firing, f"alerts without a firing test: {alerts - firing}"
    assert len(quiet) >= len(alerts) - 1
    assert {
        "ApexMeshServiceNotReady",
        "ApexMeshHeldDataGrowing",
        "ApexMeshPubsubLeaseExpiryLag",
        "ApexMeshSnapshotTooOld",
        "ApexMeshAuthFailureBurst",
        "ApexMeshGrpcErrors",
        "ApexMeshRedisNoPrimary",
        "ApexMeshRedisReplicaLinkDown",
        "ApexMeshRedisTooFewReplicas",
    } <= alerts


@pytest.mark.integration  # runs promtool
def test_promtool_catches_a_broken_rule(tmp_path: Path) -> None:
    """The check above can fail: promtool refuses an expression that does not parse."""
    broken = {"groups": [{"name": "x", "rules": [{"alert": "X", "expr": "sum(up"}]}]}
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(broken), encoding="utf-8")
    check = subprocess.run(  # noqa: PLW1510  (the return code is asserted)
        [promtool(), "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert check.returncode != 0


# --------------------------------------------------------------------------- names

#: prometheus_client constructors and what series names each exposes.
_SUFFIXES: Final = {
    "Counter": ("_total", "_created"),
    "CounterMetricFamily": ("_total", "_created"),
    "LoopCounter": ("_total",),
    "Gauge": ("",),
    "GaugeMetricFamily": ("",),
    "Histogram": ("_bucket", "_count", "_sum", "_created"),
    "HistogramMetricFamily": ("_bucket", "_count", "_sum"),
    "Summary": ("_count", "_sum", "_created"),
    "SummaryMetricFamily": ("_count", "_sum"),
    "Info": ("_info",),
    "InfoMetricFamily": ("_info",),
    "Enum": ("",),
    "StateSetMetricFamily": ("",),
}


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` (or ``NAME: Final = "text"``) of one file."""
    found: dict[str, str] = {}
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[union-attr]
        found.update({t.id: value.value for t in targets if isinstance(t, ast.Name)})
    return found


def exported_series() -> dict[str, str]:
    """Series name -> the file defining it, for every metric constructed in the code:
    calls of the prometheus_client classes (and apexmesh.ops.counters.LoopCounter) whose
    first argument is a string literal, or a module-level string constant of the same
    file (apexmesh/ops/audit.py's AUTH_FAILURES), in apexmesh/, services/ and spark/."""
    found: dict[str, str] = {}
    for top in ("apexmesh", "services", "spark"):
        for path in sorted((ROOT / top).rglob("*.py")) if (ROOT / top).is_dir() else ():
            tree = ast.parse(path.read_text(encoding="utf-8"))
            constants = _string_constants(tree)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                func = node.func
                kind = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                first = node.args[0]
                if kind in _SUFFIXES:
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        name = first.value
                    elif isinstance(first, ast.Name) and first.id in constants:
                        name = constants[first.id]
                    else:
                        continue
                    if kind.startswith("Counter") and name.endswith("_total"):
                        name = name.removesuffix("_total")
                    for suffix in _SUFFIXES[kind]:
                        found[name + suffix] = str(path.relative_to(ROOT))
    return found


def library_series() -> dict[str, str]:
    """Series of the prometheus_client collectors that apexmesh/ops/registry.py registers
    in every service's registry (ProcessCollector: ``process_*``; PlatformCollector:
    ``python_info``; GCCollector: ``python_gc_*``), read from such a registry."""
    registry = service_registry("chart-test")
    return {
        sample.name: "prometheus_client's collectors, registered by apexmesh/ops/registry.py"
        for family in registry.collect()
        for sample in family.samples
        if not sample.name.startswith("apexmesh_")
    }


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?")
_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "inf",
        "nan",
        "atan2",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "sum",
        "avg",
        "min",
        "max",
        "count",
        "stddev",
        "stdvar",
        "group",
    }
)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, label
    matchers, ranges and grouping labels removed)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("{}", text)
    text = _RANGES.sub("[]", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.groups()
        if call or name.lower() in _KEYWORDS or re.fullmatch(r"\d.*", name):
            continue
        names.add(name)
    return names


@pytest.mark.unit
def test_the_parser_finds_names_and_only_names() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket{x="b c", y=~"d.*"}[5m])))'
        " / on (pod) group_left (node) b_total offset 5m > bool 2 and c"
    )
    assert metric_names(expr) == {"a_seconds_bucket", "b_total", "c"}


def dashboard_expressions() -> Iterator[tuple[str, str]]:
    for path in sorted((CHART / "files" / "dashboards").glob("*.json")):
        board = json.loads(path.read_text(encoding="utf-8"))

        def walk(node: Any) -> Iterator[str]:
            if isinstance(node, dict):
                for key, value in node.items():
                    if key == "expr" and isinstance(value, str):
                        yield value
                    elif key == "query" and isinstance(value, str) and "label_values(" in value:
                        inner = value[value.index("(") + 1 : value.rindex(",")]
                        yield inner
                    else:
                        yield from walk(value)
            elif isinstance(node, list):
                for item in node:
                    yield from walk(item)

        for expr in walk(board):
            yield path.name, expr


@pytest.mark.unit
def test_every_promql_expression_names_an_exported_metric() -> None:
    exported = exported_series()
    library = library_series()
    # The discovery itself works: names the relay defines today are among them, the
    # gRPC server metrics (apexmesh/rpc/observe.py), the counter named by a constant,
    # and the process collector's series.
    assert {
        "apexmesh_relay_sessions",
        "apexmesh_relay_data_operations_total",
        "apexmesh_access_check_duration_seconds_bucket",
        "grpc_server_handled_total",
        "grpc_server_handling_seconds_bucket",
        "apexmesh_auth_failures_total",
    } <= set(exported)
    assert {"process_resident_memory_bytes", "python_info"} <= set(library)
    expressions = [(f"rule {r['alert']}", r["expr"]) for g in rule_groups() for r in g["rules"]]
    expressions += list(dashboard_expressions())
    assert len(expressions) > 20
    used: set[str] = set()
    for where, expr in expressions:
        for name in metric_names(expr):
            assert name in exported or name in library or name in EXTERNAL, (
                f"{where}: {name} is exported by no code (apexmesh/, services/, spark/) in: {expr}"
            )
            used.add(name)
    # The dashboard shows something of every service.
    for service in ("relay", "pubsub", "access", "report", "presence"):
        assert any(name.startswith(f"apexmesh_{service}_") for name in used), service


@pytest.mark.unit
def test_the_dashboard_uses_a_datasource_variable_and_a_stable_uid() -> None:
    board = json.loads((CHART / "files" / "dashboards" / "apex-mesh.json").read_text())
    assert board["uid"] == "apex-mesh-overview"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    text = json.dumps(board["panels"])
    assert '"uid": "${datasource}"' in text
    assert "$namespace" in text


@pytest.mark.unit
def test_the_dashboard_has_the_operations_panels() -> None:
    """Auth failures, gRPC errors and latency, topics and subscriptions per domain,
    selector matching and memory: each panel's query, by what it is grouped."""
    board = json.loads((CHART / "files" / "dashboards" / "apex-mesh.json").read_text())
    exprs = {
        panel["title"]: [target["expr"] for target in panel["targets"]]
        for panel in board["panels"]
        if panel["type"] != "row"
    }

    def one(title: str) -> str:
        (expr,) = exprs[title]
        return expr

    auth = one("Authentication failures")
    assert "sum by (service, mechanism) (rate(apexmesh_auth_failures_total{" in auth
    errors = one("gRPC errors")
    assert "sum by (grpc_service, grpc_code) (rate(grpc_server_handled_total{" in errors
    assert 'grpc_code!="OK"' in errors
    latency = one("gRPC latency p99 by method")
    assert latency.startswith("histogram_quantile(0.99, sum by (le, grpc_service, grpc_method)")
    assert "grpc_server_handling_seconds_bucket" in latency
    topics, subscriptions = exprs["Topics and subscriptions"]
    assert topics.startswith("max by (domain) (apexmesh_pubsub_topics{")
    assert subscriptions.startswith("max by (domain) (apexmesh_pubsub_subscriptions{")
    selector = one("Selector match p99")
    assert selector.startswith("histogram_quantile(0.99, sum by (le)")
    assert "apexmesh_pubsub_selector_match_seconds_bucket" in selector
    memory = one("Resident memory per pod")
    assert memory.startswith("max by (pod) (process_resident_memory_bytes{")
    assert "apexmesh_build_info" in memory  # only apex-mesh's processes
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    # No two panels overlap on the grid.
    cells = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))
