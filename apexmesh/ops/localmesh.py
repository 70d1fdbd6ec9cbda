"""The whole mesh on one machine, every service its own process (the README's run command).

Two administrative domains, each deployed as it would be in a cluster: example.com with
two relay pods, rubble.com with one, and per domain an access, a report and a presence
service (the relays tell presence about attachments, docs/presence.md); one
redis-server (password-protected, per-domain key prefixes) holds their state. Nothing runs
in development mode: the relays tune TLS with certificates made for this run (trustme)
and authenticate endpoints and peer relays with SASL, with passwords made for this run.

Start order follows the dependencies: redis-server, the access services, then relays and
report services together (their addresses are fixed up front from free ports). Each child
prints a JSON "listening" line; the mesh then waits for every ``/readyz``. Stop is the
reverse: SIGTERM to each, a grace period, SIGKILL for stragglers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx

from apexmesh.aio.tasks import within
from apexmesh.ops.targets import Context, Target, write_context

_log = logging.getLogger(__name__)

#: Seconds a child gets to print its listening line and report ready (a loaded 2-core
#: machine starting thirteen Python processes at once needs tens of seconds).
READY_TIMEOUT_SECONDS: Final = 60.0
#: Starts tried before giving up (a port picked free may be taken before it is bound).
START_ATTEMPTS: Final = 3
#: Seconds a child gets to exit after SIGTERM before it is killed.
STOP_GRACE_SECONDS: Final = 10.0

DOMAINS: Final = ("example.com", "rubble.com")
#: Relay pods per domain.
RELAY_PODS: Final = {"example.com": 2, "rubble.com": 1}
#: Endpoints that get SASL credentials (the demo's cast).
ENDPOINTS: Final = (
    "fred@example.com",
    "barney@example.com",
    "dino@example.com",
    "wilma@rubble.com",
    "pebbles@rubble.com",
)


def redis_prefix(domain: str) -> str:
    """The key prefix of one domain's services in the local mesh (they share a Redis)."""
    return domain.split(".", maxsplit=1)[0]


def snapshot_environment(redis_url: str, domain: str, workdir: Path) -> dict[str, str]:
    """The Spark snapshot job's settings for one domain of a local mesh (docs/snapshot.md):
    that domain's keys, its storage under the mesh's workdir, two local cores."""
    return {
        "APEXMESH_REDIS_URL": redis_url,
        "APEXMESH_REDIS_PREFIX": redis_prefix(domain),
        "APEXMESH_PUBSUB_DOMAINS": domain,
        "APEXMESH_SNAPSHOT_STORAGE": str(workdir / "snapshots" / domain),
        "APEXMESH_SNAPSHOT_MASTER": "local[2]",
    }


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Child:
    """One service process."""

    name: str
    module: str
    env: dict[str, str]
    log: Path
    process: asyncio.subprocess.Process | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Relay:
    """Where a relay pod listens."""

    name: str
    domain: str
    edge_port: int
    mesh_port: int
    grpc_port: int
    http_port: int


#: The context file written into the workdir (apexctl, the dashboard; issue #22).
CONTEXT_FILE: Final = "apexctl.yaml"

#: The topic the demo creates in each domain (pubsub, issue #7).
DEMO_TOPIC: Final = "demo.news"


def pubsub_access_entries(domain: str, topics: Sequence[str] = ()) -> str:
    """Access entries of draft-schwartz-apex-pubsub section 7 for the local mesh: the
    domain's own endpoints manage topics (each owns the topics it creates: it may
    subscribe, publish and grant access on them); anyone may subscribe to, cancel and
    publish to the demo topic, and subscribe and publish to ``topics`` (a benchmark's)."""
    manage = (
        f"<access owner='apex=pubsub@{domain}' actor='*@{domain}' "
        "actions='pubsub:createtopic pubsub:deletetopic pubsub:listtopics' />"
    )
    demo = (
        f"<access owner='apex=pubsub/{DEMO_TOPIC}@{domain}' actor='*@*' "
        "actions='pubsub:subscribe pubsub:cancel core:data' />"
    )
    # As short as they can be: 10,000 of them must fit the access service's 1 MiB seed.
    extra = "".join(
        f"<access owner='apex=pubsub/{topic}@{domain}' actor='*@*' "
        "actions='pubsub:subscribe core:data'/>"
        for topic in topics
    )
    return manage + demo + extra


class LocalMesh:
    """Start, observe and stop the local mesh. See the module docstring."""

    def __init__(
        self,
        workdir: Path,
        *,
        python: str = sys.executable,
        dev: bool = False,
        topics: Sequence[str] = (),
        log_level: str = "INFO",
        dashboard: bool = True,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.python = python
        #: A development run: plaintext BEEP, no SASL, anonymous attach (benchmarks only).
        self.dev = dev
        #: Topics anyone may subscribe and publish to, besides the demo's (benchmarks).
        self.topics = tuple(topics)
        #: APEXMESH_LOG_LEVEL of every service.
        self.log_level = log_level
        #: Run the web dashboard too (services/dashboard/).
        self.dashboard = dashboard
        #: Settings (``APEXMESH_*`` variables) given to every service on top of the
        #: mesh's own, e.g. a bench's receive window or GC thresholds.
        self.settings = dict(settings or {})
        #: Bearer tokens of every service's admin API (apexmesh/ops/admin.py).
        self.admin_token = secrets.token_urlsafe(24)
        self.read_token = secrets.token_urlsafe(24)
        #: The context file apexctl and the dashboard read (apexmesh/ops/targets.py).
        self.context_file = workdir / CONTEXT_FILE
        self.children: list[Child] = []
        self.relays: list[Relay] = []
        self.passwords = {endpoint: secrets.token_urlsafe(18) for endpoint in ENDPOINTS}
        self.ca_file = workdir / "ca.pem"
        self._redis: asyncio.subprocess.Process | None = None
        self._redis_password = secrets.token_urlsafe(24)
        self.redis_port = 0

    # ------------------------------------------------------------ preparation

    def _write_files(self) -> dict[str, Path]:
        import trustme  # a development dependency: certificates for this run only

        ca = trustme.CA()
        cert = ca.issue_cert("localhost", "127.0.0.1", *DOMAINS)
        ca.cert_pem.write_to_path(str(self.ca_file))
        cert_file = self.workdir / "relay-cert.pem"
        key_file = self.workdir / "relay-key.pem"
        cert.cert_chain_pems[0].write_to_path(str(cert_file))
        cert.private_key_pem.write_to_path(str(key_file))
        relay_passwords = {domain: secrets.token_urlsafe(18) for domain in DOMAINS}
        credentials = self.workdir / "sasl-credentials"
        lines = [
            f"{who}:{password}"
            for who, password in (*self.passwords.items(), *relay_passwords.items())
        ]
        credentials.write_text("\n".join(lines) + "\n", encoding="utf-8")
        credentials.chmod(0o600)
        seeds = {}
        for domain in DOMAINS:
            seed = self.workdir / f"access-{domain}.xml"
            # Every endpoint of the cast accepts data from anyone and lets anyone
            # subscribe to its presence (RFC 3343); anyone may send data to apex=presence;
            # everything else keeps RFC 3341's defaults (the owner and this domain's
            # services only).
            entries = (
                "".join(
                    f"<access owner='{endpoint}' actor='*@*' "
                    "actions='core:data presence:subscribe' />"
                    for endpoint in ENDPOINTS
                    if endpoint.endswith("@" + domain)
                )
                + f"<access owner='apex=presence@{domain}' actor='*@*' actions='core:data' />"
            )
            # pubsub (issue #7): who may manage topics, and the demo's topic.
            entries += pubsub_access_entries(domain, self.topics)
            seed.write_text(f"<access-entries>{entries}</access-entries>", encoding="utf-8")
            seeds[domain] = seed
            # The domain's endpoints (RFC 3341 step 2: an owner must be a valid address).
            directory = self.workdir / f"endpoints-{domain}"
            directory.write_text(
                "".join(f"{e}\n" for e in ENDPOINTS if e.endswith("@" + domain)),
                encoding="utf-8",
            )
            seeds[f"endpoints:{domain}"] = directory
        return {
            "cert": cert_file,
            "key": key_file,
            "credentials": credentials,
            **{(k if ":" in k else f"seed:{k}"): p for k, p in seeds.items()},
        }

    @property
    def redis_url(self) -> str:
        """The mesh's Redis (with its password): for tools run against the mesh, such as
        the snapshot job of ``scripts/run --snapshot``."""
        return f"redis://:{self._redis_password}@127.0.0.1:{self.redis_port}/0"

    @property
    def redis_pid(self) -> int | None:
        """The process id of the mesh's own redis-server while it runs (a benchmark counts
        its CPU with the services'), None when there is none."""
        process = self._redis
        return process.pid if process is not None and process.returncode is None else None

    def _plan(self, files: dict[str, Path]) -> None:
        redis_url = self.redis_url
        common = {
            "APEXMESH_REDIS_URL": redis_url,
            "APEXMESH_SHUTDOWN_GRACE": "2",
            "APEXMESH_LOG_LEVEL": self.log_level,
            "APEXMESH_ADMIN_TOKEN": self.admin_token,
            "APEXMESH_ADMIN_READ_TOKEN": self.read_token,
            "PYTHONUNBUFFERED": "1",
        }
        security = {
            "APEXMESH_RELAY_TLS_CERT": str(files["cert"]),
            "APEXMESH_RELAY_TLS_KEY": str(files["key"]),
            "APEXMESH_RELAY_TLS_CA": str(self.ca_file),
            "APEXMESH_RELAY_SASL_FILE": str(files["credentials"]),
        }
        if self.dev:
            common["APEXMESH_DEV"] = "1"
            security = {}
        # access, report, presence gRPC ports
        ports = {domain: (free_port(), free_port(), free_port()) for domain in DOMAINS}
        for domain in DOMAINS:
            for index in range(RELAY_PODS[domain]):
                self.relays.append(
                    Relay(
                        f"relay-{domain}-{index + 1}",
                        domain,
                        free_port(),
                        free_port(),
                        free_port(),
                        free_port(),
                    )
                )
        for domain in DOMAINS:
            access_grpc, report_grpc, presence_grpc = ports[domain]
            prefix = {"APEXMESH_REDIS_PREFIX": redis_prefix(domain)}
            self.children.append(
                self._child(
                    f"access-{domain}",
                    "services.access",
                    {
                        **common,
                        **prefix,
                        "APEXMESH_DOMAINS": domain,
                        "APEXMESH_ACCESS_GRPC_PORT": str(access_grpc),
                        "APEXMESH_ACCESS_HTTP_PORT": str(free_port()),
                        "APEXMESH_ACCESS_SEED_FILE": str(files[f"seed:{domain}"]),
                        **self._endpoint_directory(files[f"endpoints:{domain}"]),
                    },
                )
            )
            relays = [r for r in self.relays if r.domain == domain]
            self.children.append(
                self._child(
                    f"report-{domain}",
                    "services.report",
                    {
                        **common,
                        "APEXMESH_REPORT_DOMAINS": domain,
                        "APEXMESH_REPORT_GRPC_PORT": str(report_grpc),
                        "APEXMESH_REPORT_HTTP_PORT": str(free_port()),
                        "APEXMESH_RELAY_ADDRESSES": ",".join(
                            f"127.0.0.1:{r.grpc_port}" for r in relays
                        ),
                    },
                )
            )
            self.children.append(
                self._child(
                    f"presence-{domain}",
                    "services.presence",
                    {
                        **common,
                        **prefix,
                        "APEXMESH_PRESENCE_DOMAINS": domain,
                        "APEXMESH_ACCESS_ADDRESS": f"127.0.0.1:{access_grpc}",
                        "APEXMESH_PRESENCE_GRPC_PORT": str(presence_grpc),
                        "APEXMESH_PRESENCE_HTTP_PORT": str(free_port()),
                        "APEXMESH_RELAY_ADDRESSES": ",".join(
                            f"127.0.0.1:{r.grpc_port}" for r in relays
                        ),
                    },
                )
            )
            routes = ",".join(
                f"{other}=127.0.0.1:{next(r for r in self.relays if r.domain == other).mesh_port}"
                for other in DOMAINS
                if other != domain
            )
            for relay in relays:
                self.children.append(
                    self._child(
                        relay.name,
                        "services.relay",
                        {
                            **common,
                            **prefix,
                            "APEXMESH_DOMAINS": domain,
                            "APEXMESH_RELAY_POD_ID": relay.name,
                            "APEXMESH_RELAY_EDGE_PORT": str(relay.edge_port),
                            "APEXMESH_RELAY_MESH_PORT": str(relay.mesh_port),
                            "APEXMESH_RELAY_GRPC_PORT": str(relay.grpc_port),
                            "APEXMESH_RELAY_HTTP_PORT": str(relay.http_port),
                            "APEXMESH_ACCESS_ADDRESS": f"127.0.0.1:{access_grpc}",
                            "APEXMESH_REPORT_ADDRESS": f"127.0.0.1:{report_grpc}",
                            "APEXMESH_RELAY_SERVICES": f"presence=127.0.0.1:{presence_grpc}",
                            "APEXMESH_PRESENCE_ADDRESS": f"127.0.0.1:{presence_grpc}",
                            "APEXMESH_RELAY_ROUTES": routes,
                            **security,
                        },
                    )
                )

        # pubsub (issue #7): one pubsub pod behind each relay pod.
        self._plan_pubsub(common, {d: (p[0], p[2]) for d, p in ports.items()})
        if self.dashboard:
            self.children.append(
                self._child(
                    "dashboard",
                    "services.dashboard",
                    {
                        "APEXMESH_DASHBOARD_CONTEXT": str(self.context_file),
                        "APEXMESH_DASHBOARD_HTTP_PORT": str(free_port()),
                        "APEXMESH_DASHBOARD_TOKEN": self.read_token,
                        "APEXMESH_LOG_LEVEL": self.log_level,
                        "PYTHONUNBUFFERED": "1",
                    },
                )
            )
        self._write_context(redis_url)

    # ------------------------------------------------------------ the context (issue #22)

    def _write_context(self, redis_url: str) -> None:
        """The context file for apexctl and the dashboard: every service's admin URL
        (their HTTP ports are fixed before they start), the tokens, the CA, Redis and
        the endpoints' passwords (apexmesh/ops/targets.py)."""
        targets = []
        for child in self.children:
            service = child.module.rpartition(".")[2]
            port = next((v for k, v in child.env.items() if k.endswith("_HTTP_PORT")), "")
            if service == "dashboard" or not port:
                continue
            domain = next(
                (
                    child.env[k]
                    for k in (
                        "APEXMESH_DOMAINS",
                        "APEXMESH_PUBSUB_DOMAINS",
                        "APEXMESH_REPORT_DOMAINS",
                        "APEXMESH_PRESENCE_DOMAINS",
                    )
                    if k in child.env
                ),
                "",
            )
            relay = next((r for r in self.relays if r.name == child.name), None)
            targets.append(
                Target(
                    name=child.name,
                    service=service,
                    domain=domain,
                    admin_url=f"http://127.0.0.1:{port}",
                    edge="" if relay is None else f"127.0.0.1:{relay.edge_port}",
                )
            )
        write_context(
            self.context_file,
            Context(
                name="local",
                kind="local",
                services=tuple(targets),
                admin_token=self.admin_token,
                read_token=self.read_token,
                ca_file="" if self.dev else str(self.ca_file),
                redis_url=redis_url,
                credentials_file="" if self.dev else str(self.workdir / "sasl-credentials"),
                dashboard_url=self.dashboard_url,
            ),
        )

    @property
    def dashboard_url(self) -> str:
        """The dashboard's address, with the login token ("" without a dashboard)."""
        for child in self.children:
            if child.module == "services.dashboard":
                port = child.env["APEXMESH_DASHBOARD_HTTP_PORT"]
                return f"http://127.0.0.1:{port}/"
        return ""

    # ------------------------------------------------------------ pubsub (issue #7)

    def _plan_pubsub(self, common: dict[str, str], ports: dict[str, tuple[int, int]]) -> None:
        """One pubsub pod per relay pod; each relay knows every pubsub pod of its domain,
        its own first (``pubsub=own|other``: the relay skips one that is down). Any pod
        can serve any request, state is in Redis. ``ports``: domain -> (access,
        presence) gRPC ports."""
        for domain in DOMAINS:
            access_grpc, presence_grpc = ports[domain]
            relays = [r for r in self.relays if r.domain == domain]
            pods = [free_port() for _ in relays]
            for index, grpc_port in enumerate(pods):
                name = f"pubsub-{domain}-{index + 1}"
                self.children.append(
                    self._child(
                        name,
                        "services.pubsub",
                        {
                            **common,
                            "APEXMESH_REDIS_PREFIX": redis_prefix(domain),
                            "APEXMESH_PUBSUB_DOMAINS": domain,
                            "APEXMESH_PUBSUB_POD_ID": name,
                            "APEXMESH_ACCESS_ADDRESS": f"127.0.0.1:{access_grpc}",
                            "APEXMESH_PRESENCE_ADDRESS": f"127.0.0.1:{presence_grpc}",
                            "APEXMESH_PUBSUB_GRPC_PORT": str(grpc_port),
                            "APEXMESH_PUBSUB_HTTP_PORT": str(free_port()),
                            "APEXMESH_RELAY_ADDRESSES": ",".join(
                                f"127.0.0.1:{r.grpc_port}" for r in relays
                            ),
                        },
                    )
                )
            for index, relay in enumerate(relays):
                order = pods[index:] + pods[:index]
                pubsub = "pubsub=" + "|".join(f"127.0.0.1:{port}" for port in order)
                for child in self.children:
                    if child.name == relay.name:
                        services = child.env.get("APEXMESH_RELAY_SERVICES", "")
                        child.env["APEXMESH_RELAY_SERVICES"] = ",".join(
                            item for item in (services, pubsub) if item
                        )

    def _endpoint_directory(self, path: Path) -> dict[str, str]:
        """The access service's endpoint directory (RFC 3341 step 2: an owner must be a
        valid address): the demo's cast. A development run (benchmarks: anonymous
        attach of thousands of generated endpoints) has none, so every endpoint of the
        domain exists, as the access service takes it without the setting."""
        return {} if self.dev else {"APEXMESH_ACCESS_ENDPOINTS_FILE": str(path)}

    def _child(self, name: str, module: str, env: dict[str, str]) -> Child:
        return Child(name, module, env, self.workdir / f"{name}.log")

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start everything and wait until every service is ready.

        Ports are picked free before the services bind them, so another process may take
        one meanwhile: a start that fails stops whatever it started (nothing is left
        running) and is tried again with fresh ports, :data:`START_ATTEMPTS` times."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                await self._start_once()
            except Exception as exc:
                await self._discard()
                if attempt == START_ATTEMPTS:
                    raise
                _log.warning("the local mesh did not start (%s); trying again", exc)
            except BaseException:  # cancelled or interrupted: stop, do not try again
                await self._discard()
                raise
            else:
                return

    async def _discard(self) -> None:
        """Stop what a failed start started and forget its plan."""
        await self.stop()
        self.children.clear()
        self.relays.clear()
        self._redis = None

    async def _start_once(self) -> None:
        await self._start_redis()
        files = self._write_files()
        self._plan(files)
        access = [c for c in self.children if c.module == "services.access"]
        others = [c for c in self.children if c.module != "services.access"]
        await asyncio.gather(*(self._start_child(c) for c in access))
        await asyncio.gather(*(self._start_child(c) for c in others))
        await asyncio.gather(*(self._await_ready(c) for c in self.children))

    # ------------------------------------------------------------ how processes start
    # scripts/containers runs the same plan from the container images: it overrides these
    # three to prefix ``docker run --network host`` (scripts/container_mesh.py).

    def command(self, child: Child) -> list[str]:
        """The command that runs ``child`` (its environment is ``child.env``)."""
        return [self.python, "-m", child.module]

    def redis_binary(self) -> str:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/install installs it)")
        return binary

    def redis_command(self, binary: str, data: Path) -> list[str]:
        """redis-server on loopback with AOF in ``data`` and this run's password."""
        return [
            binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.redis_port),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--dir",
            str(data),
            "--requirepass",
            self._redis_password,
        ]

    async def _start_redis(self) -> None:
        binary = self.redis_binary()
        self.redis_port = free_port()
        data = self.workdir / "redis"
        data.mkdir(exist_ok=True)
        self._redis = await asyncio.create_subprocess_exec(
            *self.redis_command(binary, data),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_SECONDS
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.redis_port)
            except OSError:
                if asyncio.get_running_loop().time() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                await asyncio.sleep(0.05)
                continue
            writer.write(f"AUTH {self._redis_password}\r\nPING\r\n".encode())
            answer = await reader.read(64)
            writer.close()
            await writer.wait_closed()
            if b"PONG" in answer:
                return

    async def _start_child(self, child: Child) -> None:
        env = {key: value for key, value in os.environ.items() if not key.startswith("APEXMESH_")}
        env.update(child.env)
        env.update(self.settings)
        log = child.log.open("ab")
        try:
            child.process = await asyncio.create_subprocess_exec(
                *self.command(child),
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                stdin=asyncio.subprocess.DEVNULL,
            )
        finally:
            log.close()

    async def _await_ready(self, child: Child) -> None:
        if child.process is None or child.process.stdout is None:
            raise RuntimeError(f"{child.name} was not started")
        try:
            line = await within(child.process.stdout.readline(), READY_TIMEOUT_SECONDS)
        except TimeoutError:
            raise RuntimeError(f"{child.name} printed no listening line; see {child.log}") from None
        if not line:
            tail = child.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{child.name} exited at start:\n{tail}")
        child.info = json.loads(line)
        url = f"http://127.0.0.1:{child.info['http_port']}/readyz"
        deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_SECONDS
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(url)).status_code == 200:
                        return
                if asyncio.get_running_loop().time() > deadline:
                    raise RuntimeError(f"{child.name} never became ready; see {child.log}")
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        """SIGTERM every child (relays first), then stop redis-server."""
        order = sorted(self.children, key=lambda c: c.module != "services.relay")
        for child in order:
            if child.process is not None and child.process.returncode is None:
                child.process.send_signal(signal.SIGTERM)
        for child in order:
            if child.process is None:
                continue
            try:
                await within(child.process.wait(), STOP_GRACE_SECONDS)
            except TimeoutError:
                child.process.kill()
                await child.process.wait()
        if self._redis is not None and self._redis.returncode is None:
            self._redis.terminate()
            await self._redis.wait()

    def exit_codes(self) -> dict[str, int | None]:
        """Exit code of every child (None while running)."""
        return {c.name: None if c.process is None else c.process.returncode for c in self.children}

    def relay(self, domain: str, index: int = 0) -> Relay:
        """The index-th relay pod of ``domain``."""
        return [r for r in self.relays if r.domain == domain][index]
