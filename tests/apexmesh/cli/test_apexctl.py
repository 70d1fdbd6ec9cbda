"""Every apexctl command against the running local mesh (scripts/demo.py), as a
subprocess with the environment the printed line gives, JSON output parsed; YAML once;
and the same tool run as a kubectl plugin through Debian's kubectl."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest
import yaml

from tests.support.demo_mesh import DemoMesh
from tests.support.polling import scaled

pytestmark = pytest.mark.system


def apexctl(mesh: DemoMesh, *args: str, code: int = 0, fmt: str = "--json") -> Any:
    done = subprocess.run(
        ["apexctl", *([fmt] if fmt else []), *args],
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
        env=mesh.env(),
    )
    assert done.returncode == code, f"apexctl {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    if fmt == "--json" and code == 0:
        return json.loads(done.stdout)
    return done.stdout + done.stderr


def test_status_and_servers(demo_mesh: DemoMesh) -> None:
    status = apexctl(demo_mesh, "status")
    assert status["status"] == "OK"
    assert status["code"] == 0
    services = {row["name"] for row in status["services"]}
    assert {"relay-example.com-1", "relay-example.com-2", "relay-rubble.com-1"} <= services
    assert apexctl(demo_mesh, "health")["code"] == 0
    servers = apexctl(demo_mesh, "servers", "ls")
    assert {s["service"] for s in servers} == {"relay", "access", "pubsub", "report", "presence"}
    assert all(s["ready"] and s["version"] for s in servers)
    info = apexctl(demo_mesh, "servers", "info", "relay-example.com-2")
    assert info["service"] == "relay"
    assert info["details"]["tls"] is True
    assert info["details"]["routes"] == {"rubble.com": info["details"]["routes"]["rubble.com"]}
    pings = apexctl(demo_mesh, "servers", "ping")
    assert all(p["alive"] and p["rtt_ms"] > 0 for p in pings)
    text = apexctl(demo_mesh, "status", fmt="")
    assert "APEX-MESH OK - 12/12 services ready" in text


def test_topics_lifecycle(demo_mesh: DemoMesh) -> None:
    topics = apexctl(demo_mesh, "topics", "ls")
    assert any(t["topic"] == "demo.news" and t["domain"] == "example.com" for t in topics)
    created = apexctl(demo_mesh, "topics", "create", "ops.test@example.com")
    assert created["code"] == 250
    apexctl(demo_mesh, "topics", "create", "ops.test@example.com", code=1)  # exists
    described = apexctl(demo_mesh, "topics", "describe", "ops.test@example.com")
    assert described["creator"] == "apex=pubsub@example.com"
    assert described["subscriptions"] == 0
    purged = apexctl(demo_mesh, "topics", "purge", "demo.news@example.com")
    assert {p["pod"] for p in purged} == {"pubsub-example.com-1", "pubsub-example.com-2"}
    assert apexctl(demo_mesh, "topics", "delete", "ops.test@example.com")["code"] == 250
    assert not any(t["topic"] == "ops.test" for t in apexctl(demo_mesh, "topics", "ls"))
    subs = apexctl(demo_mesh, "subscriptions", "ls")
    assert isinstance(subs, list)
    assert all({"subscriber", "expires_in_seconds", "backlog"} <= set(s) for s in subs)
    yaml_out = yaml.safe_load(apexctl(demo_mesh, "-o", "yaml", "topics", "ls", fmt=""))
    assert any(t["topic"] == "demo.news" for t in yaml_out)


def test_pub_sub_request_and_trace(demo_mesh: DemoMesh) -> None:
    env = demo_mesh.env()
    listener = subprocess.Popen(
        ["apexctl", "--json", "sub", "--as", "pebbles@rubble.com", "--count", "1", "--wait", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        # the subscriber attaches first; the sender retries until it is there
        for _ in range(40):
            result = subprocess.run(
                [
                    "apexctl",
                    "--json",
                    "request",
                    "--as",
                    "wilma@rubble.com",
                    "pebbles@rubble.com",
                    "stone soup",
                ],
                capture_output=True,
                text=True,
                timeout=scaled(60),
                check=False,
                env=env,
            )
            if result.returncode == 0:
                break
        report = json.loads(result.stdout)
        assert report == [{"destination": "pebbles@rubble.com", "code": 250, "text": ""}]
        out, errors = listener.communicate(timeout=scaled(60))
    finally:
        listener.kill()
    assert listener.returncode == 0, errors
    received = json.loads(out)
    assert received[0]["from"] == "wilma@rubble.com"
    assert received[0]["content"] == "stone soup"
    sent = apexctl(demo_mesh, "pub", "--as", "fred@example.com", "demo.news", "extra!")
    assert sent["topic"] == "demo.news@example.com"
    trace = apexctl(demo_mesh, "trace", "fred@example.com", "wilma@rubble.com")
    assert trace["report"] == [{"destination": "wilma@rubble.com", "code": 250, "text": ""}]
    pods = [(h["pod"], h["outcomes"][0]["route"]) for h in trace["hops"]]
    assert pods == [
        ("relay-example.com-1", "mesh rubble.com"),
        ("relay-rubble.com-1", "local relay-rubble.com-1"),
    ]


def test_sessions_held_access_presence(demo_mesh: DemoMesh) -> None:
    listener = subprocess.Popen(
        ["apexctl", "sub", "--as", "barney@example.com", "--count", "1", "--wait", "60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=demo_mesh.env(),
    )
    try:
        for _ in range(100):
            sessions = apexctl(demo_mesh, "sessions", "ls")
            mine = [s for s in sessions if "barney@example.com" in s["attachments"]]
            if mine:
                break
        assert mine, sessions
        assert mine[0]["tls"] is True
        assert mine[0]["identity"] == "barney@example.com"
        killed = apexctl(demo_mesh, "sessions", "kill", mine[0]["id"])
        assert killed["closed"] is True
        listener.wait(30)
        assert listener.returncode != 0  # its session was closed under it
    finally:
        listener.kill()
    held = apexctl(demo_mesh, "held", "ls")
    assert isinstance(held, list)
    assert apexctl(demo_mesh, "held", "ls", "dino@example.com") == []
    entries = apexctl(demo_mesh, "access", "ls", "--owner", "fred@example.com")
    assert {"owner": "fred@example.com", "actor": "*@*"}.items() <= entries[0].items()
    granted = apexctl(
        demo_mesh, "access", "grant", "fred@example.com", "bamm-bamm@rubble.com", "core:data"
    )
    assert granted["actions"] == ["core:data"]
    denied = apexctl(demo_mesh, "access", "deny", "fred@example.com", "bamm-bamm@rubble.com")
    assert denied["actions"] == []
    apexctl(demo_mesh, "access", "grant", "fred@example.com", "x@y.com", "nope:nope", code=1)
    presence = apexctl(demo_mesh, "presence", "ls")
    assert any(p["publisher"] == "fred@example.com" for p in presence)
    # The Spark job once per domain, against the mesh's Redis, its storage in the workdir.
    triggered = apexctl(demo_mesh, "snapshot", "trigger")
    assert set(triggered["output"]) == {"example.com", "rubble.com"}
    assert all(out.startswith("snapshot file://") for out in triggered["output"].values())
    # example.com holds the demo's topic and the two well-known topics (draft-wyman 6).
    assert re.search(r": 3 topics, ", triggered["output"]["example.com"])
    assert "apexctl trace" in apexctl(demo_mesh, "cheat", fmt="")


def test_contexts_and_errors(demo_mesh: DemoMesh, tmp_path: Any) -> None:
    env = {**demo_mesh.env(), "APEXCTL_CONFIG": str(tmp_path / "config.yaml")}
    env.pop("APEXCTL_CONTEXT")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["apexctl", *args],
            capture_output=True,
            text=True,
            timeout=scaled(60),
            check=False,
            env=env,
        )

    none = run("status")
    assert none.returncode == 3
    assert "UNKNOWN" in none.stdout
    assert run("context", "add", "local", "--file", str(demo_mesh.context_file)).returncode == 0
    listed = json.loads(run("--json", "context", "ls").stdout)
    assert listed == [
        {"name": "local", "current": True, "kind": "file", "where": str(demo_mesh.context_file)}
    ]
    assert run("status").returncode == 0
    assert run("--context", "nope", "topics", "ls").returncode == 2


def test_as_a_kubectl_plugin(demo_mesh: DemoMesh) -> None:
    plugins = subprocess.run(
        ["kubectl", "plugin", "list"],
        capture_output=True,
        text=True,
        check=False,
        env=demo_mesh.env(),
    )
    assert "kubectl-apex" in plugins.stdout
    done = subprocess.run(
        ["kubectl", "apex", "--json", "topics", "ls"],
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
        env=demo_mesh.env(),
    )
    assert done.returncode == 0, done.stderr
    assert any(t["topic"] == "demo.news" for t in json.loads(done.stdout))
