"""The chart's replicated Redis run for real (issue #30): the rendered commands of the
Redis and Sentinel containers run as three pods on this machine with the host's
redis-server: first boot, the sentinels' agreement, the services' client writing with
WAIT, a failover, a pod back on its volume, the preStop hand-over and a primary
restarted without data. What the chart renders is checked in
test_chart_redis_replication.py.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import redis as redis_py

from apexmesh.store.connection import RedisPoolSettings, connect_redis
from tests.charts.conftest import Doc, named, render
from tests.charts.test_chart_redis_replication import NODES, by_name, client_env, env_of, pod
from tests.support.polling import scaled, wait_until
from tests.support.ports import reserved_port
from tests.support.redis_server import redis_binary

pytestmark = pytest.mark.chart


#: The live group's values: failures noticed and acted on fast.
LIVE: Final = {
    "redis": {
        "architecture": "replication",
        "sentinel": {"downAfterMilliseconds": 1000, "failoverTimeout": 5000},
    }
}


class Pod:
    """One Redis pod of the StatefulSet, run on this machine with the rendered commands:
    its Redis and its Sentinel container, on loopback address 127.0.N.1 (N = ordinal + 1)
    standing for its DNS name, the ports of the test's choosing, the volumes as
    directories. What is changed from the render: the paths, the ports, a ``bind`` per
    address (the pods share this machine's port space) and the address of the pod's own
    Redis in the scripts (its loopback in the pod), and ``redis-server --sentinel``
    for ``redis-sentinel`` (Debian's redis-server package has no such link)."""

    def __init__(self, ordinal: int, docs: list[Doc], root: Path, ports: tuple[int, int]) -> None:
        self.ordinal = ordinal
        self.address = f"127.0.{ordinal + 1}.1"
        self.redis_port, self.sentinel_port = ports
        self.root = root / f"pod-{ordinal}"
        self.data = self.root / "data"
        self.scripts = self.root / "scripts"
        for directory in (self.data, self.scripts):
            directory.mkdir(parents=True, exist_ok=True)
        script = named(docs, "ConfigMap", "apex-mesh-redis-scripts")["data"]["find-primary.sh"]
        # the pod's own Redis is on its loopback there, on its address here
        own = 'redis-cli -p "$REDIS_PORT"'
        assert script.count(own) == 2
        script = script.replace(own, f'redis-cli -h {self.address} -p "$REDIS_PORT"')
        (self.scripts / "find-primary.sh").write_text(script, encoding="utf-8")
        self.containers = by_name(pod(docs)["containers"])
        self.redis: subprocess.Popen[bytes] | None = None
        self.sentinel: subprocess.Popen[bytes] | None = None

    def env(self, password: str, nodes: str, container: Doc) -> dict[str, str]:
        rendered = env_of(container)
        env = {
            key: value
            for key, value in rendered.items()
            if isinstance(value, str) and key not in ("REDIS_NODES", "REDIS_PORT", "SENTINEL_PORT")
        }
        return {
            **env,
            "PATH": "/usr/bin:/bin",
            "POD_NAME": f"127.0.{self.ordinal + 1}",
            "REDIS_NODES": nodes,
            "REDIS_PORT": str(self.redis_port),
            "SENTINEL_PORT": str(self.sentinel_port),
            "REDIS_PASSWORD": password,
            "REDISCLI_AUTH": password,
        }

    def paths(self, text: str) -> str:
        return text.replace("/scripts/", f"{self.scripts}/").replace(
            "/data/appendonlydir", f"{self.data}/appendonlydir"
        )

    def start_redis(self, password: str, nodes: str) -> None:
        container = self.containers["redis"]
        command, args = list(container["command"]), list(container["args"])
        args[args.index("--port") + 1] = str(self.redis_port)
        args[args.index("--dir") + 1] = str(self.data)
        args += ["--bind", self.address]
        script = self.paths(command[2]).replace("redis-server", redis_binary(), 1)
        with (self.root / "redis.log").open("ab") as log:  # the child keeps its own copy
            self.redis = subprocess.Popen(
                [*command[:2], script, *command[3:], *args],
                env=self.env(password, nodes, container),
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def start_sentinel(self, password: str, nodes: str, *, fresh: bool = False) -> None:
        """The Sentinel container; ``fresh``: a new pod (its memory volume empty)."""
        container = self.containers["sentinel"]
        directory = self.root / "sentinel"
        if fresh and directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(exist_ok=True)
        command = list(container["command"])
        script = self.paths(command[2])
        script = script.replace("conf=/sentinel/", f"conf={directory}/").replace(
            "dir /sentinel\n", f"dir {directory}\n"
        )
        sentinel = 'redis-sentinel "$conf"'
        assert sentinel in script
        script = script.replace(
            sentinel, f'{redis_binary()} "$conf" --sentinel --bind {self.address}'
        )
        with (self.root / "sentinel.log").open("ab") as log:
            self.sentinel = subprocess.Popen(
                [*command[:2], script],
                env=self.env(password, nodes, container),
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def hand_over(self, password: str, nodes: str) -> None:
        """The Redis container's preStop hook."""
        command = self.containers["redis"]["lifecycle"]["preStop"]["exec"]["command"]
        done = subprocess.run(  # noqa: PLW1510  (the return code is asserted)
            [*command[:2], self.paths(command[2])],
            env=self.env(password, nodes, self.containers["redis"]),
            capture_output=True,
            timeout=scaled(40),
        )
        assert done.returncode == 0, done.stderr

    def kill(self) -> None:
        for process in (self.redis, self.sentinel):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=scaled(30))

    def client(self, password: str, port: int | None = None) -> redis_py.Redis:
        return redis_py.Redis(
            host=self.address,
            port=port or self.redis_port,
            password=password,
            socket_timeout=scaled(2),
            decode_responses=True,
        )

    def ask(
        self, password: str, call: Callable[[redis_py.Redis], Any], port: int | None = None
    ) -> Any:
        """``call`` on a fresh client of this pod's Redis (or ``port``), closed after;
        None while the pod does not answer (a probe of a pod that may be down)."""
        client = self.client(password, port)
        try:
            return call(client)
        except redis_py.RedisError:
            return None
        finally:
            client.close()

    def replication(self, password: str) -> dict[str, Any] | None:
        info: dict[str, Any] | None = self.ask(password, lambda c: c.info("replication"))
        return info

    def sentinel_says(self, password: str) -> str | None:
        answer = self.ask(
            password,
            lambda c: c.sentinel_get_master_addr_by_name("apexmesh"),
            self.sentinel_port,
        )
        return str(answer[0]) if isinstance(answer, tuple) else None

    def log(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.root.glob("*.log"))
        )


@pytest.fixture
def group(tmp_path: Path) -> Iterator[tuple[list[Pod], str, str]]:
    """Three pods' processes (not started), the password and REDIS_NODES for them."""
    docs = render(LIVE)
    ports = (reserved_port(), reserved_port())
    pods = [Pod(i, docs, tmp_path, ports) for i in range(3)]
    nodes = " ".join(p.address for p in pods)
    password = secrets.token_urlsafe(18)
    try:
        yield pods, password, nodes
    finally:
        for one in pods:
            one.kill()
        print("\n".join(one.log() for one in pods))


async def until(condition: Any, within: float, *, what: str = "") -> Any:
    """wait_until, probing every 0.2 s (each probe opens connections)."""
    return await wait_until(condition, within, every=0.2, what=what)


def _role(one: Pod, password: str, role: str, primary: Pod | None = None) -> bool:
    info = one.replication(password)
    if info is None or info.get("role") != role:
        return False
    if primary is None:
        return True
    return info.get("master_host") == primary.address and info.get("master_link_status") == "up"


def _agreed(pods: list[Pod], password: str, primary: Pod, replicas: int = 2) -> bool:
    """Every sentinel of ``pods`` names ``primary`` and knows ``replicas`` replicas up
    (a sentinel learns them from the primary's INFO, every 10 s: one it does not know is
    not moved to the new primary in a failover)."""
    if not all(one.sentinel_says(password) == primary.address for one in pods):
        return False
    for one in pods:
        known = one.ask(password, lambda c: c.sentinel_slaves("apexmesh"), one.sentinel_port)
        if known is None:
            return False
        up = [r for r in known if not (r["is_sdown"] or r["is_disconnected"])]
        if len(up) < replicas:
            return False
    return True


@pytest.mark.integration
async def test_the_rendered_pods_elect_replicate_and_fail_over(
    group: tuple[list[Pod], str, str],
) -> None:
    """The StatefulSet's commands, run as three pods with the host's redis-server: the
    first boot makes pod 0 the primary and the others its replicas, every sentinel names
    it; a client made by connect_redis from the services' URL writes with WAIT 1; pod 0
    killed, the sentinels promote a replica and the same client writes again; pod 0
    restarted joins as a replica of the new primary, its new sentinel monitors that one;
    the new primary's preStop hands over to a replica; no acknowledged write is lost.
    Then the guard: a primary restarted with no data waits for the failover and comes
    back as a replica instead of emptying the group."""
    pods, password, nodes = group
    first, second, third = pods
    # OrderedReady: each pod ready before the next starts
    for one in pods:
        one.start_redis(password, nodes)
        one.start_sentinel(password, nodes)
        await until(
            lambda one=one: one.replication(password) and one.sentinel_says(password),
            15,
            what=f"pod {one.ordinal} ready",
        )
    await until(lambda: _role(first, password, "master"), 10, what="pod 0 primary")
    for one in (second, third):
        await until(lambda one=one: _role(one, password, "slave", first), 15, what="replicas")
    await until(lambda: _agreed(pods, password, first), 30, what="sentinels agree")

    env = next(iter(client_env(render(LIVE)).values()))
    url = env["APEXMESH_REDIS_URL"].replace("$(APEXMESH_REDIS_PASSWORD)", password)
    for i, one in enumerate(pods):
        url = url.replace(NODES[i] + ":26379", f"{one.address}:{one.sentinel_port}")
    settings = RedisPoolSettings.from_env(
        {"APEXMESH_REDIS_WAIT_REPLICAS": env["APEXMESH_REDIS_WAIT_REPLICAS"]}
    )
    client = connect_redis(url, settings)
    written: list[str] = []

    async def write(key: str) -> bool:
        try:
            async with client.pipeline(transaction=False) as pipe:
                pipe.set(key, "v")
                pipe.execute_command("WAIT", 1, 1000)
                _, replicas = await pipe.execute()
        except redis_py.RedisError:
            return False
        if replicas < 1:
            return False
        written.append(key)
        return True

    try:
        assert await write("before")
        # pod 0 dies (both containers)
        first.kill()
        await until(lambda: write("after-failover"), 30, what="a write after the failover")
        promoted = next(one for one in (second, third) if _role(one, password, "master"))
        other = third if promoted is second else second
        await until(lambda: _agreed([second, third], password, promoted, 1), 30)
        # pod 0 comes back (a new pod on its volume): a replica of the promoted one
        first.start_redis(password, nodes)
        first.start_sentinel(password, nodes, fresh=True)
        await until(lambda: _role(first, password, "slave", promoted), 20, what="pod 0 back")
        await until(lambda: _agreed(pods, password, promoted), 30, what="all agree")
        # the primary's preStop: a replica takes over before it stops
        promoted.hand_over(password, nodes)
        await until(lambda: _role(promoted, password, "slave"), 20, what="the hand-over")
        successor = await until(
            lambda: next((o for o in (first, other) if _role(o, password, "master")), None),
            10,
            what="a new primary after the hand-over",
        )
        await until(lambda: _agreed(pods, password, successor), 30)
        await until(lambda: write("after-hand-over"), 15)
        # the guard: the primary restarts on an empty volume while the sentinels still
        # name it; it waits for them to promote another, then replicates from it
        # (the sentinels given 5 s to notice, so that the restart is sure to come first)
        for one in pods:
            sentinel = one.client(password, one.sentinel_port)
            try:
                sentinel.sentinel_set("apexmesh", "down-after-milliseconds", 5000)
            finally:
                sentinel.close()
        assert successor.redis is not None
        successor.redis.kill()
        successor.redis.wait(timeout=scaled(30))
        shutil.rmtree(successor.data)
        successor.data.mkdir()
        successor.start_redis(password, nodes)
        newest = await until(
            lambda: next(
                (o for o in pods if o is not successor and _role(o, password, "master")), None
            ),
            30,
            what="a failover away from the emptied primary",
        )
        await until(lambda: _role(successor, password, "slave", newest), 30)
        log = (successor.root / "redis.log").read_text(errors="replace")
        assert "has no data: waiting for a failover" in log
        await until(lambda: write("after-empty-restart"), 15)
        for one in pods:
            reader = one.client(password)
            try:
                await until(
                    lambda reader=reader: reader.exists(*written) == len(written),
                    15,
                    what=f"every acknowledged write on pod {one.ordinal}",
                )
            finally:
                reader.close()
        assert written == ["before", "after-failover", "after-hand-over", "after-empty-restart"]
    finally:
        await client.aclose()
