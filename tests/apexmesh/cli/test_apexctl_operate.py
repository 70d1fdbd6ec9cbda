"""apexctl's operator tasks against the running local mesh (scripts/demo.py): drain and
its undoing, trace through ready pods with every hop and a non-zero exit on a refusal,
purging held data (with its confirmation), credentials applied live by the relays
(no restart), the runtime log level and the certificate check. Each test leaves the
shared mesh as it found it."""

from __future__ import annotations

import json
import re
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from apexmesh.client import connect_endpoint
from tests.support.demo_mesh import DemoMesh
from tests.support.polling import scaled

pytestmark = pytest.mark.system

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def run(
    mesh: DemoMesh, *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["apexctl", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
        env={**mesh.env(), **(env or {})},
    )


def apexctl(mesh: DemoMesh, *args: str, code: int = 0, **kwargs: Any) -> Any:
    done = run(mesh, "--json", *args, **kwargs)
    assert done.returncode == code, f"apexctl {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout) if done.stdout.strip() else None


def test_drain_undo_and_trace_through_ready_pods(demo_mesh: DemoMesh) -> None:
    pod2 = "relay-example.com-2"
    drained = apexctl(demo_mesh, "drain", pod2)
    try:
        assert drained["draining"] is True
        status = apexctl(demo_mesh, "status", code=1)  # WARNING: one relay pod not ready
        assert status["status"] == "WARNING"
        # trace picks ready pods only: both ends on pod 1, delivered, exit 0
        trace = apexctl(demo_mesh, "trace", "fred@example.com", "barney@example.com")
        assert trace["report"] == [{"destination": "barney@example.com", "code": 250, "text": ""}]
        assert trace["sent_via"] == "relay-example.com-1"
        assert trace["received"]["at"] == "relay-example.com-1"
    finally:
        undone = apexctl(demo_mesh, "drain", pod2, "--undo")
    assert undone["draining"] is False
    assert apexctl(demo_mesh, "status")["status"] == "OK"
    # Pod 2 takes sessions again: the recipient is attached there, and the path shows
    # the forwarding pod, the delivering pod and the attachment that received it.
    trace = apexctl(demo_mesh, "trace", "fred@example.com", "barney@example.com")
    assert trace["received"]["at"] == pod2
    pods = [step["pod"] for step in trace["path"]]
    assert pods[0] == "relay-example.com-1"
    assert pods[-1] == pod2
    assert {"pod": pod2, "step": "delivered to barney@example.com", "code": 250} in trace["path"]
    # A refusal exits non-zero (dino has no access entry for fred's data, or is away).
    refused = run(demo_mesh, "--json", "trace", "fred@example.com", "nobody@example.com")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert json.loads(refused.stdout)["report"][0]["code"] != 250


async def test_held_purge_asks_and_purges(demo_mesh: DemoMesh) -> None:
    context = demo_mesh.context()
    relay = context.of("relay", "example.com")[0]
    host, _, port = relay.edge.rpartition(":")
    client = await connect_endpoint(
        host,
        int(port),
        ssl_context=ssl.create_default_context(cafile=context.ca_file),
        server_hostname="localhost",
        sasl=("SCRAM-SHA-256", "fred@example.com", context.passwords()["fred@example.com"]),
        timeout=scaled(10.0),
    )
    try:
        fred = await client.attach("fred@example.com")
        for n in range(3):
            await fred.send("dino@example.com", f"held {n}".encode(), hold=True)
    finally:
        await client.close(timeout=scaled(5.0))
    held = apexctl(demo_mesh, "held", "ls")
    assert [r["count"] for r in held if r["endpoint"] == "dino@example.com"] == [3]
    kept = run(demo_mesh, "held", "purge", "dino@example.com", stdin="n\n")
    assert kept.returncode == 1
    assert "purge 3 data held for dino@example.com?" in kept.stderr
    purged = apexctl(demo_mesh, "held", "purge", "dino@example.com", stdin="y\n")
    assert purged == {"endpoint": "dino@example.com", "purged": 3}
    assert apexctl(demo_mesh, "held", "ls", "dino@example.com") == []
    assert apexctl(demo_mesh, "held", "purge", "dino@example.com", "--yes")["purged"] == 0


def test_credentials_are_applied_live(demo_mesh: DemoMesh, tmp_path: Path) -> None:
    """rm, add and passwd change what the relays accept, at once, without a restart:
    ``sub --count 0`` only attaches (TLS, SASL) and leaves. dino (an endpoint of the
    demo's directory) gets his own password back at the end."""
    before = {s["name"]: s["uptime_s"] for s in apexctl(demo_mesh, "servers", "ls")}
    original = demo_mesh.context().passwords()["dino@example.com"]
    first, second, restore = tmp_path / "first", tmp_path / "second", tmp_path / "restore"
    first.write_text("gravel-pit-1\n", encoding="utf-8")
    second.write_text("gravel-pit-2\n", encoding="utf-8")
    restore.write_text(original + "\n", encoding="utf-8")
    relays = {t.name for t in demo_mesh.context().of("relay")}

    def attaches(password: str) -> bool:
        done = run(
            demo_mesh,
            "sub",
            "--as",
            "dino@example.com",
            "--count",
            "0",
            "--wait",
            "1",
            env={"APEXCTL_PASSWORD": password},
        )
        return done.returncode == 0

    assert attaches(original)
    try:
        removed = apexctl(demo_mesh, "credentials", "rm", "dino@example.com")
        assert removed["relays"] == dict.fromkeys(relays, "reloaded")
        assert not attaches(original)
        added = apexctl(
            demo_mesh, "credentials", "add", "dino@example.com", "--password-file", str(first)
        )
        assert added["relays"] == dict.fromkeys(relays, "reloaded")
        assert attaches("gravel-pit-1")
        changed = apexctl(
            demo_mesh, "credentials", "passwd", "dino@example.com", "--password-file", str(second)
        )
        assert changed["relays"] == dict.fromkeys(relays, "reloaded")
        assert attaches("gravel-pit-2")
    finally:
        apexctl(
            demo_mesh, "credentials", "add", "dino@example.com", "--password-file", str(restore)
        )
    assert attaches(original)
    missing = run(demo_mesh, "credentials", "passwd", "bamm-bamm@example.com", "--generate")
    assert missing.returncode == 2
    assert "bamm-bamm@example.com has no credentials" in missing.stderr
    # The same processes throughout (uptimes only grew).
    after = {s["name"]: s["uptime_s"] for s in apexctl(demo_mesh, "servers", "ls")}
    assert all(after[name] >= uptime for name, uptime in before.items())


def test_log_level_at_runtime(demo_mesh: DemoMesh) -> None:
    pod = "relay-example.com-1"
    set_to = apexctl(demo_mesh, "log-level", "debug", "--pod", pod, "--logger", "apexmesh.rpc")
    assert set_to == [{"pod": pod, "service": "relay", "level": "DEBUG", "logger": "apexmesh.rpc"}]
    shown = apexctl(demo_mesh, "log-level", "--service", "relay", "--logger", "apexmesh.rpc")
    assert {(r["pod"], r["level"]) for r in shown} >= {(pod, "DEBUG")}
    apexctl(demo_mesh, "log-level", "INFO", "--pod", pod, "--logger", "apexmesh.rpc")
    bad = run(demo_mesh, "log-level", "LOUD", "--pod", pod)
    assert bad.returncode == 1
    assert "level must be one of" in bad.stderr
    assert "log level of apexmesh.rpc set to DEBUG" in demo_mesh.log(pod)  # logged


def test_certs_check(demo_mesh: DemoMesh) -> None:
    rows = apexctl(demo_mesh, "certs", "check")
    assert {r["pod"] for r in rows} == {t.name for t in demo_mesh.context().of("relay")}
    for row in rows:
        assert row["verified"] is True, row
        assert RFC3339.match(row["not_after"])
        assert row["days_left"] > 30
        assert "localhost" in row["names"]
    # a threshold beyond the certificate's life is a WARNING
    days = min(r["days_left"] for r in rows)
    assert run(demo_mesh, "certs", "check", "--warn-days", str(days + 1)).returncode == 1
    assert run(demo_mesh, "certs", "check", "--critical-days", str(days + 1)).returncode == 2


def test_topics_take_a_bare_name_as_pub_and_sub_do(demo_mesh: DemoMesh) -> None:
    created = apexctl(demo_mesh, "topics", "create", "ops.bare@example.com")
    assert (created["topic"], created["code"]) == ("ops.bare@example.com", 250)
    # example.com alone has it: the bare name finds it
    assert apexctl(demo_mesh, "topics", "describe", "ops.bare")["topic"] == "ops.bare"
    assert apexctl(demo_mesh, "topics", "delete", "ops.bare")["topic"] == "ops.bare@example.com"
    gone = run(demo_mesh, "topics", "delete", "ops.bare@example.com")
    assert gone.returncode == 1
    assert "no topic ops.bare@example.com: nothing deleted" in gone.stderr
    assert "553" not in gone.stderr
    unknown = run(demo_mesh, "topics", "describe", "ops.nowhere")
    assert unknown.returncode == 2
    assert "no topic ops.nowhere in example.com, rubble.com" in unknown.stderr
    # one time format: RFC 3339 wherever a time is printed
    sessions = apexctl(demo_mesh, "sessions", "ls")
    assert all(RFC3339.match(s["opened_at"]) for s in sessions)
    drain = apexctl(demo_mesh, "drain", "relay-example.com-1", "--undo")  # not draining
    assert drain["since"] == ""


def test_catalogue_export_and_import(demo_mesh: DemoMesh, tmp_path: Path) -> None:
    exported = apexctl(demo_mesh, "catalogue", "export")
    assert exported["kind"] == "catalogue"
    assert RFC3339.match(exported["exported_at"])
    news = [t for t in exported["topics"] if t["topic"] == "demo.news"]
    assert news
    assert news[0]["domain"] == "example.com"
    assert RFC3339.match(news[0]["created_at"])
    # A backup with one topic the mesh lacks: import creates it, keeps the others.
    backup = tmp_path / "catalogue.yaml"
    done = run(demo_mesh, "catalogue", "export", "--output", str(backup))
    assert done.returncode == 0, done.stderr
    document = yaml.safe_load(backup.read_text(encoding="utf-8"))
    document["topics"].append(
        {"domain": "example.com", "topic": "ops.restored", "creator": "x", "created_at": ""}
    )
    backup.write_text(yaml.safe_dump(document), encoding="utf-8")
    dry = apexctl(demo_mesh, "catalogue", "import", str(backup), "--dry-run")
    assert {"domain": "example.com", "topic": "ops.restored", "result": "would be created"} in dry
    try:
        imported = apexctl(demo_mesh, "catalogue", "import", str(backup))
        results = {(r["domain"], r["topic"]): r["result"] for r in imported}
        assert results[("example.com", "ops.restored")] == "created"
        assert results[("example.com", "demo.news")] == "exists"
        assert apexctl(demo_mesh, "topics", "describe", "ops.restored@example.com")
    finally:
        apexctl(demo_mesh, "topics", "delete", "ops.restored@example.com")


def test_catalogue_export_from_a_snapshot(demo_mesh: DemoMesh, tmp_path: Path) -> None:
    """The snapshot job's layout (docs/snapshot.md): ``snapshots/<ms>/topics/`` and
    ``subscriptions/`` Parquet with the catalogue rows' columns, ``_SUCCESS``; a change
    layer names its full layer in ``manifest.json``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    full = tmp_path / "snapshots" / "1000"
    (full / "topics").mkdir(parents=True)
    (full / "subscriptions").mkdir()
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "domain": "example.com",
                    "topic": "saved.news",
                    "settings": "",
                    "creator": "apex=pubsub@example.com",
                    "created_ms": 1_700_000_000_000,
                    "id": 1,
                }
            ]
        ),
        full / "topics" / "part-0.parquet",
    )
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "domain": "example.com",
                    "topic": "saved.news",
                    "subscriber": "barney@example.com",
                    "subscription_id": "s1",
                    "selector_class": "",
                    "selector": "",
                    "cached": False,
                    "originator": "barney@example.com",
                    "trans_id": 1,
                    "expires_ms": 1_700_000_060_000,
                    "at_ms": 1_700_000_000_000,
                    "id": 2,
                }
            ]
        ),
        full / "subscriptions" / "part-0.parquet",
    )
    (full / "_SUCCESS").write_text("", encoding="utf-8")
    change = tmp_path / "snapshots" / "2000"
    change.mkdir()
    (change / "manifest.json").write_text(json.dumps({"base": str(full)}), encoding="utf-8")
    for where in (full, change, tmp_path / "snapshots"):
        exported = apexctl(demo_mesh, "catalogue", "export", "--from-snapshot", str(where))
        assert exported["topics"] == [
            {
                "domain": "example.com",
                "topic": "saved.news",
                "creator": "apex=pubsub@example.com",
                "created_at": "2023-11-14T22:13:20Z",
                "settings": "",
            }
        ]
        assert exported["subscriptions"][0]["expires_at"] == "2023-11-14T22:14:20Z"
    nothing = run(demo_mesh, "catalogue", "export", "--from-snapshot", str(tmp_path))
    assert nothing.returncode == 2


def test_bench_pub_sub_and_request(demo_mesh: DemoMesh) -> None:
    """Small runs of each shape: every data answered (or delivered), rates and
    percentiles printed; the table run shows the figures too."""
    pub = apexctl(
        demo_mesh, "bench", "pub", "demo.news", "--as", "fred@example.com", "--count", "300"
    )
    assert (pub["done"], pub["failed"]) == (300, 0)
    assert pub["rate_per_s"] > 0
    assert 0 < pub["p50_ms"] <= pub["p90_ms"] <= pub["p99_ms"] <= pub["max_ms"]
    sub = apexctl(
        demo_mesh,
        "bench",
        "sub",
        "demo.news",
        "--as",
        "fred@example.com",
        "--sub-as",
        "barney@example.com",
        "--count",
        "300",
    )
    assert (sub["done"], sub["failed"]) == (300, 0)
    assert "relay-example.com-1 -> relay-example.com-2" in sub["bench"]
    request = apexctl(
        demo_mesh,
        "bench",
        "request",
        "barney@example.com",
        "--as",
        "fred@example.com",
        "--count",
        "100",
        "--in-flight",
        "20",
    )
    assert (request["done"], request["failed"]) == (100, 0)
    assert request["p99_ms"] > 0
    table = run(
        demo_mesh,
        "bench",
        "request",
        "barney@example.com",
        "--as",
        "fred@example.com",
        "--count",
        "20",
    )
    assert table.returncode == 0, table.stderr
    assert "rate_per_s" in table.stdout
    assert "p99_ms" in table.stdout
