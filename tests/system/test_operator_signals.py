"""What operators read from the running local mesh besides the admin API: metrics that
promtool accepts, with the families dashboards and alerts are built on; JSON log lines
with one correlation id per data across services; SASL failures counted and logged with
the peer and mechanism, never the password."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import subprocess

import httpx
import pytest

from apexmesh.aio.connection import AuthenticationError
from apexmesh.client import connect_endpoint
from tests.support.demo_mesh import DemoMesh
from tests.support.polling import scaled

pytestmark = pytest.mark.system

#: Families every service exports (process and Python collectors, gRPC server metrics).
COMMON = (
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "python_info",
    "python_gc_collections_total",
    "apexmesh_build_info",
)
#: Families of one service each.
OWN = {
    "relay": (
        "apexmesh_relay_attachments",
        "apexmesh_relay_sessions",
        "apexmesh_relay_held_entries",
        "grpc_server_handled_total",
        "grpc_server_handling_seconds_bucket",
    ),
    "pubsub": (
        "apexmesh_pubsub_topics",
        "apexmesh_pubsub_subscriptions",
        "apexmesh_pubsub_selector_match_seconds_bucket",
        "grpc_server_started_total",
    ),
    "access": ("grpc_server_handled_total",),
    "report": ("apexmesh_report_responses_total",),
    "presence": ("grpc_server_handled_total",),
}


def test_metrics_pass_promtool_and_carry_the_expected_families(demo_mesh: DemoMesh) -> None:
    seen: dict[str, str] = {}
    for target in demo_mesh.context().services:
        text = httpx.get(f"{target.admin_url}/metrics").text
        lint = subprocess.run(
            ["promtool", "check", "metrics"],
            input=text,
            capture_output=True,
            text=True,
            check=False,
        )
        assert lint.returncode == 0, f"{target.name}: {lint.stdout}{lint.stderr}"
        seen[target.service] = seen.get(target.service, "") + text
    for service, text in seen.items():
        for family in (*COMMON, *OWN[service]):
            assert re.search(rf"^{family}[{{ ]", text, re.MULTILINE), (service, family)
    # the leader of each domain exports its topic count; the demo created demo.news
    assert re.search(r'apexmesh_pubsub_topics\{domain="example.com"\} [1-9]', seen["pubsub"])


def test_one_correlation_id_across_relay_and_report_logs(demo_mesh: DemoMesh) -> None:
    done = subprocess.run(
        ["apexctl", "--json", "trace", "fred@example.com", "nobody@example.com"],
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
        env=demo_mesh.env(),
    )
    assert done.returncode == 1, done.stderr  # trace exits 1 when a hop is not 250 (#31)
    trace = json.loads(done.stdout)
    assert trace["report"][0]["code"] >= 500  # no such endpoint: refused or unknown
    cid = trace["hops"][0]["cid"]
    assert re.fullmatch(r"[0-9a-f]{16}", cid)

    def lines(name: str) -> list[dict[str, object]]:
        return [json.loads(line) for line in demo_mesh.log(name).splitlines() if cid in line]

    relay = lines("relay-example.com-1")
    assert any("not delivered" in str(line["message"]) for line in relay), relay
    report = lines("report-example.com")
    assert any("statusResponse" in str(line["message"]) for line in report), report
    for line in relay + report:
        assert line["cid"] == cid
        assert {"ts", "level", "service", "logger", "message"} <= set(line)


def test_sasl_failures_are_counted_and_logged_without_the_password(demo_mesh: DemoMesh) -> None:
    context = demo_mesh.context()
    relay = next(t for t in context.services if t.name == "relay-example.com-2")
    host, _, port = relay.edge.rpartition(":")
    secret = "wrong-password-that-must-not-be-logged"

    async def attempt() -> None:
        tls = ssl.create_default_context(cafile=context.ca_file)
        with pytest.raises(AuthenticationError):
            await connect_endpoint(
                host,
                int(port),
                ssl_context=tls,
                server_hostname="localhost",
                sasl=("SCRAM-SHA-256", "fred@example.com", secret),
            )

    asyncio.run(attempt())
    metrics = httpx.get(f"{relay.admin_url}/metrics").text
    assert re.search(
        r'apexmesh_auth_failures_total\{mechanism="SCRAM-SHA-256",service="relay"\} [1-9]', metrics
    )
    log = demo_mesh.log("relay-example.com-2")
    failed = [json.loads(line) for line in log.splitlines() if '"auth_failed"' in line]
    assert failed
    assert failed[-1]["mechanism"] == "SCRAM-SHA-256"
    assert str(failed[-1]["peer"]).startswith("127.0.0.1:")
    assert secret not in log
