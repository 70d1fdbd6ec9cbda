"""Real Redis Clusters and Sentinel groups of Debian's redis-server on loopback, for tests.

redis-server cannot bind port 0, so each node takes a port the kernel handed out a moment
ago (:func:`~tests.support.redis_server.free_port`) and, if another process took it in
between (the node exits with "Address already in use"), starts again on fresh ports
(:data:`START_ATTEMPTS`). A cluster node also binds its bus port, given explicitly
(``cluster-port``) rather than the default port + 10000, so both come from the kernel.

- :class:`RedisClusterNodes`: three primaries and three replicas, joined by
  ``redis-cli --cluster create --cluster-replicas 1``, ready once every node reports
  ``cluster_state:ok`` and agrees on the slots, and every replica has finished its first
  sync (``master_link_status:up``). Without that last check a primary killed soon after
  the start was never replaced: its replica, still waiting out the primary's
  ``repl-diskless-sync-delay`` (5 s by default) for its first full sync, had never had a
  link, counts its data as infinitely old and refuses to stand for election ("Disconnected
  from master for longer than allowed", ``cluster-replica-validity-factor``). The nodes
  also start that sync at once (``repl-diskless-sync-delay 0``). A replica whose link is
  up is not yet sent the primary's writes: after a diskless sync Redis 7.0 starts the
  stream on the replica's first ``REPLCONF ACK``, up to a second later. A primary killed
  in that second took every write with it (the failover test lost its 53 holds, about 1
  run in 3 on a loaded machine), so the start also waits until each primary's replicas
  acknowledge a write (:func:`_streaming`).
- :class:`SentinelGroup`: one primary, one replica and three sentinels (quorum 2), with a
  short ``down-after-milliseconds`` so that a failover takes seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import redis

from tests.support.polling import scaled
from tests.support.redis_server import free_port, ping, redis_binary

#: Starts of one node on fresh ports before giving up (a port taken in between).
START_ATTEMPTS: Final = 5
#: Seconds a node gets to answer PING, and a cluster or sentinel group to be ready.
READY_TIMEOUT: Final = 30.0
#: The name of the primary the sentinels watch.
PRIMARY_NAME: Final = "apexmesh"


def _cli(port: int, *args: str, timeout: float = 10.0) -> str:
    done = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=scaled(timeout),
        check=False,
    )
    return done.stdout + done.stderr


class Node:
    """One redis-server (a cluster node, a primary, a replica or a sentinel) child."""

    def __init__(self, directory: Path, extra: list[str], *, sentinel: bool = False) -> None:
        self.directory = directory
        self.extra = extra
        self.sentinel = sentinel
        self.port = 0
        self.bus_port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, cluster: bool = False) -> None:
        """Start on fresh ports, retrying when a port was taken in between."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for _ in range(START_ATTEMPTS):
            self.port, self.bus_port = free_port(), free_port()
            args = [
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--save",
                "",
                "--daemonize",
                "no",
                *self.extra,
            ]
            if cluster:
                args += [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    str(self.bus_port),
                    "--cluster-config-file",
                    str(self.directory / "nodes.conf"),
                    "--cluster-node-timeout",
                    "2000",
                    "--appendonly",
                    "yes",
                    # A replica's first full sync starts at once, not after 5 s (see
                    # the module docstring: an unsynced replica is never promoted).
                    "--repl-diskless-sync-delay",
                    "0",
                ]
            command = [redis_binary()]
            if self.sentinel:
                config = self.directory / "sentinel.conf"
                config.write_text("\n".join(self.extra) + "\n")
                command += [str(config), "--sentinel", *args[: args.index("--save")]]
            else:
                command += args
            log = (self.directory / "redis.log").open("ab")
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            log.close()
            deadline = time.monotonic() + READY_TIMEOUT
            while not ping(self.port):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.02)  # probe interval, not a readiness guess
            else:
                return
            self.stop()
            if "Address already in use" not in self.output():
                raise RuntimeError(f"redis-server did not start:\n{self.output()}")
        raise RuntimeError(f"redis-server found no free port in {START_ATTEMPTS} attempts")

    def output(self) -> str:
        try:
            return (self.directory / "redis.log").read_text(errors="replace")[-4000:]
        except OSError:
            return "(no output)"

    def kill(self) -> None:
        """SIGKILL: the node dies without a word (what a failover test needs)."""
        process, self.process = self.process, None
        if process is not None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=scaled(10))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait(condition: object, what: str, timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready in {timeout}s")
        time.sleep(0.1)  # probe interval


def _streaming(port: int, replicas: int) -> bool:
    """Whether the ``replicas`` of the (empty) primary on ``port`` acknowledge a write:
    ``FLUSHALL``, which needs no key of the node's slots, then ``WAIT`` on the same
    connection."""
    client = redis.Redis(port=port, socket_timeout=READY_TIMEOUT)
    try:
        client.execute_command("FLUSHALL")
        return int(client.execute_command("WAIT", replicas, 1000)) >= replicas
    finally:
        client.close()


def _check_created(answer: str) -> None:
    if "[OK] All 16384 slots covered" not in answer:
        raise RuntimeError(f"redis-cli --cluster create failed:\n{answer}")


class RedisClusterNodes:
    """A six-node Redis Cluster (three primaries, each with a replica) on loopback."""

    def __init__(self, directory: Path, *, replicas: int = 1) -> None:
        count = 3 * (1 + replicas)
        self.replicas = replicas
        self.nodes = [Node(directory / f"node{i}", []) for i in range(count)]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:3])

    def start(self) -> None:
        try:
            for node in self.nodes:
                node.start(cluster=True)
            answer = _cli(
                self.nodes[0].port,
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
                timeout=scaled(60),
            )
            _check_created(answer)
            _wait(self._ready, "the cluster")
            for primary in self.primaries():
                _wait(lambda port=primary.port: _streaming(port, self.replicas), "replication")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        for node in self.nodes:
            info = _cli(node.port, "cluster", "info")
            if (
                "cluster_state:ok" not in info
                or "cluster_known_nodes:" + str(len(self.nodes)) not in info
            ):
                return False
            if "role:slave" in (replication := _cli(node.port, "info", "replication")) and (
                "master_link_status:up" not in replication
            ):
                return False
        return True

    def primaries(self) -> list[Node]:
        """The nodes that are primaries now (``ROLE``)."""
        return [n for n in self.nodes if n.process and _cli(n.port, "role").startswith("master")]

    def _asked(self) -> Node:
        return next(n for n in self.nodes if n.process is not None)

    def owner(self, key: str) -> Node:
        """The primary that serves ``key``'s slot now, as a live node sees it
        (``CLUSTER NODES``): what a failover test kills."""
        asked = self._asked()
        slot = int(_cli(asked.port, "cluster", "keyslot", key).strip())
        for line in _cli(asked.port, "cluster", "nodes").splitlines():
            fields = line.split()
            if "master" not in fields[2] or "fail" in fields[2]:
                continue
            for part in fields[8:]:
                low, _, high = part.partition("-")
                if low.isdigit() and int(low) <= slot <= int(high or low):
                    return self._by_address(fields[1])
        raise LookupError(f"no live primary serves slot {slot} of {key!r}")

    def replicas_of(self, primary: Node) -> list[Node]:
        """The live nodes that replicate ``primary`` (``INFO replication``'s
        ``master_port``): with two replicas per primary, either may win its election."""
        found = [
            node
            for node in self.nodes
            if node.process is not None
            and f"master_port:{primary.port}" in _cli(node.port, "info", "replication").split()
        ]
        if not found:
            raise LookupError(f"no replica of 127.0.0.1:{primary.port}")
        return found

    def replica_of(self, primary: Node) -> Node:
        """One node that replicates ``primary`` (the first of :meth:`replicas_of`)."""
        return self.replicas_of(primary)[0]

    def _by_address(self, address: str) -> Node:
        port = int(address.partition("@")[0].rpartition(":")[2])
        return next(n for n in self.nodes if n.port == port)

    def command_counts(self) -> dict[int, int]:
        """Commands each live primary has executed (``INFO stats``), by port."""
        counts = {}
        for node in self.primaries():
            for line in _cli(node.port, "info", "stats").splitlines():
                if line.startswith("total_commands_processed:"):
                    counts[node.port] = int(line.split(":")[1])
        return counts

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class SentinelGroup:
    """A primary, ``replicas`` replicas and ``sentinels`` sentinels (quorum: a majority)."""

    def __init__(self, directory: Path, *, replicas: int = 1, sentinels: int = 3) -> None:
        self.directory = directory
        self.primary = Node(
            directory / "primary", ["--appendonly", "yes", "--repl-diskless-sync-delay", "0"]
        )
        self.replica_nodes = [
            Node(
                directory / f"replica{i}",
                ["--appendonly", "yes", "--repl-diskless-sync-delay", "0"],
            )
            for i in range(replicas)
        ]
        self.sentinel_count = sentinels
        self.sentinels: list[Node] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{PRIMARY_NAME}"

    def start(self) -> None:
        try:
            self.primary.start()
            for replica in self.replica_nodes:
                replica.extra += ["--replicaof", "127.0.0.1", str(self.primary.port)]
                replica.start()
            _wait(self._replicated, "replication")
            _wait(lambda: _streaming(self.primary.port, len(self.replica_nodes)), "replication")
            quorum = self.sentinel_count // 2 + 1
            for i in range(self.sentinel_count):
                sentinel = Node(
                    self.directory / f"sentinel{i}",
                    [
                        f"sentinel monitor {PRIMARY_NAME} 127.0.0.1 {self.primary.port} {quorum}",
                        f"sentinel down-after-milliseconds {PRIMARY_NAME} 1000",
                        f"sentinel failover-timeout {PRIMARY_NAME} 4000",
                        f"sentinel parallel-syncs {PRIMARY_NAME} 1",
                    ],
                    sentinel=True,
                )
                sentinel.start()
                self.sentinels.append(sentinel)
            _wait(self._sentinels_ready, "the sentinels")
        except BaseException:
            self.stop()
            raise

    def _replicated(self) -> bool:
        info = _cli(self.primary.port, "info", "replication")
        return info.count("state=online") == len(self.replica_nodes)

    def _sentinels_ready(self) -> bool:
        for sentinel in self.sentinels:
            info = _cli(sentinel.port, "sentinel", "master", PRIMARY_NAME)
            lines = info.splitlines()
            fields = dict(zip(lines[::2], lines[1::2], strict=False))
            if int(fields.get("num-other-sentinels", "0")) < self.sentinel_count - 1:
                return False
            if int(fields.get("num-slaves", "0")) < len(self.replica_nodes):
                return False
        return True

    def primary_port(self) -> int:
        """The port the sentinels name as the primary now."""
        answer = _cli(self.sentinels[0].port, "sentinel", "get-master-addr-by-name", PRIMARY_NAME)
        return int(answer.split()[1])

    def stop(self) -> None:
        for node in [*self.sentinels, self.primary, *self.replica_nodes]:
            node.stop()


@contextlib.contextmanager
def running_sentinels(directory: Path) -> Iterator[SentinelGroup]:
    """A primary, two replicas and three sentinels (quorum 2), stopped on exit: two
    replicas, so that WAIT 1 still has one after the primary's failover."""
    group = SentinelGroup(directory, replicas=2, sentinels=3)
    group.start()
    try:
        yield group
    finally:
        group.stop()


def every_node(redis: object) -> dict[str, object]:
    """``execute_command`` keywords that send a keyless admin command (``CLIENT KILL``)
    to every node of a cluster client; none for a standalone client."""
    from redis.asyncio.cluster import RedisCluster

    return {"target_nodes": redis.get_nodes()} if isinstance(redis, RedisCluster) else {}
