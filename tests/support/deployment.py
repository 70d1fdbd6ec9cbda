"""One domain deployed as processes, for system tests that load or kill them.

``example.com`` only: a redis-server of the test's own, the access service, ``relays``
relay pods, ``pubsub`` pubsub pods (each relay knows every pubsub pod, its own first;
each pubsub pod knows every relay) and, with ``report``, the report service
(statusResponse). Every service is a real subprocess (tests/support/processes.py), so
the test can read its RSS and kill it with SIGKILL; endpoints are SDK clients in the
test's process.

With ``users`` the relays offer TLS (a certificate for this run, trustme) and SASL, with
a password per user (``users`` are ``name@example.com``); :meth:`Deployment.connect`
then tunes TLS and authenticates with SCRAM-SHA-256. The deployment is a development
run (``APEXMESH_DEV=1``: a Redis without a password); the clients use TLS and SASL all
the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from apexmesh.client import ApexClient, connect_endpoint
from tests.support.polling import scaled
from tests.support.processes import ServiceProcess
from tests.support.redis_server import RedisServer, free_port

DOMAIN: Final = "example.com"

#: Access entries: members of the domain manage topics; anyone may subscribe to,
#: cancel and publish to ``news``; endpoints get the RFC 3341 defaults otherwise.
SEED: Final = f"""<access-entries>
  <access owner='apex=pubsub@{DOMAIN}' actor='*@{DOMAIN}'
          actions='pubsub:createtopic pubsub:deletetopic pubsub:listtopics' />
  <access owner='apex=pubsub/news@{DOMAIN}' actor='*@*'
          actions='pubsub:subscribe pubsub:cancel core:data' />
</access-entries>
"""


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (Linux /proc), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@dataclass
class Deployment:
    workdir: Path
    redis: RedisServer
    prefix: str
    access: ServiceProcess
    relays: dict[str, ServiceProcess] = field(default_factory=dict)
    pubsub: dict[str, ServiceProcess] = field(default_factory=dict)
    report: ServiceProcess | None = None
    passwords: dict[str, str] = field(default_factory=dict)
    ssl_context: ssl.SSLContext | None = None

    def edge_port(self, relay: str) -> int:
        return int(self.relays[relay].info["edge_port"])

    async def connect_closed_by(
        self, stack: contextlib.AsyncExitStack, relay: str, user: str | None = None
    ) -> ApexClient:
        """:meth:`connect`, the session closed when ``stack`` closes."""
        client = await self.connect(relay, user)
        stack.push_async_callback(client.close)
        return client

    async def connect(self, relay: str, user: str | None = None) -> ApexClient:
        """An SDK session to ``relay``: TLS and SCRAM-SHA-256 as ``user`` when the
        deployment has users, plain otherwise."""
        if self.ssl_context is None or user is None:
            return await connect_endpoint("127.0.0.1", self.edge_port(relay), timeout=scaled(30.0))
        return await connect_endpoint(
            "127.0.0.1",
            self.edge_port(relay),
            ssl_context=self.ssl_context,
            server_hostname="localhost",
            sasl=("SCRAM-SHA-256", user, self.passwords[user]),
            timeout=scaled(30.0),
        )

    def pid(self, process: ServiceProcess) -> int:
        return int(process.process.pid)


def _tls(workdir: Path) -> tuple[Path, Path, ssl.SSLContext]:
    import trustme  # a development dependency: certificates for this run only

    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert_file, key_file = workdir / "relay-cert.pem", workdir / "relay-key.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return cert_file, key_file, context


@contextlib.asynccontextmanager
async def deployment(
    workdir: Path,
    *,
    relays: Sequence[str] = ("a",),
    pubsub: Sequence[str] = (),
    report: bool = False,
    users: Sequence[str] = (),
    relay_env: Mapping[str, str] | None = None,
    pubsub_env: Mapping[str, str] | None = None,
) -> AsyncIterator[Deployment]:
    """Start the deployment (see the module docstring); stop every process on exit."""
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    redis = RedisServer(workdir / "redis")
    await asyncio.to_thread(redis.start)
    prefix = f"load-{secrets.token_hex(4)}"
    common = {
        "APEXMESH_DEV": "1",
        "APEXMESH_REDIS_URL": redis.url,
        "APEXMESH_REDIS_PREFIX": prefix,
        "APEXMESH_SHUTDOWN_GRACE": "1",
    }
    seed = workdir / "access-seed.xml"
    seed.write_text(SEED, encoding="utf-8")
    access = ServiceProcess(
        "services.access",
        {
            **common,
            "APEXMESH_DOMAINS": DOMAIN,
            "APEXMESH_ACCESS_GRPC_PORT": "0",
            "APEXMESH_ACCESS_HTTP_PORT": "0",
            "APEXMESH_ACCESS_SEED_FILE": str(seed),
        },
        workdir / "access.log",
    )
    running = Deployment(workdir, redis, prefix, access)
    try:
        await asyncio.to_thread(access.start)
        relay_grpc = {name: free_port() for name in relays}
        pubsub_grpc = {name: free_port() for name in pubsub}
        report_grpc = free_port()
        security: dict[str, str] = {}
        if users:
            cert, key, running.ssl_context = _tls(workdir)
            running.passwords = {user: secrets.token_urlsafe(12) for user in users}
            credentials = workdir / "sasl-credentials"
            credentials.write_text(
                "".join(f"{u}:{p}\n" for u, p in running.passwords.items()), encoding="utf-8"
            )
            credentials.chmod(0o600)
            security = {
                "APEXMESH_RELAY_TLS_CERT": str(cert),
                "APEXMESH_RELAY_TLS_KEY": str(key),
                "APEXMESH_RELAY_SASL_FILE": str(credentials),
            }
        relay_addresses = ",".join(f"127.0.0.1:{port}" for port in relay_grpc.values())
        pods = list(pubsub_grpc.values())
        for index, name in enumerate(relays):
            env = {
                **common,
                **security,
                "APEXMESH_DOMAINS": DOMAIN,
                "APEXMESH_RELAY_POD_ID": f"relay-{name}",
                "APEXMESH_RELAY_EDGE_PORT": "0",
                "APEXMESH_RELAY_MESH_PORT": "0",
                "APEXMESH_RELAY_GRPC_PORT": str(relay_grpc[name]),
                "APEXMESH_RELAY_HTTP_PORT": "0",
                "APEXMESH_ACCESS_ADDRESS": f"127.0.0.1:{access.info['grpc_port']}",
                "APEXMESH_RELAY_LEASE_MS": "10000",
            }
            if report:
                env["APEXMESH_REPORT_ADDRESS"] = f"127.0.0.1:{report_grpc}"
            if pods:
                order = pods[index % len(pods) :] + pods[: index % len(pods)]
                env["APEXMESH_RELAY_SERVICES"] = "pubsub=" + "|".join(
                    f"127.0.0.1:{port}" for port in order
                )
            env.update(relay_env or {})
            running.relays[name] = ServiceProcess(
                "services.relay", env, workdir / f"relay-{name}.log"
            )
        for name, port in pubsub_grpc.items():
            env = {
                **common,
                "APEXMESH_PUBSUB_DOMAINS": DOMAIN,
                "APEXMESH_PUBSUB_POD_ID": f"pubsub-{name}",
                "APEXMESH_ACCESS_ADDRESS": f"127.0.0.1:{access.info['grpc_port']}",
                "APEXMESH_RELAY_ADDRESSES": relay_addresses,
                "APEXMESH_PUBSUB_GRPC_PORT": str(port),
                "APEXMESH_PUBSUB_HTTP_PORT": "0",
                "APEXMESH_PUBSUB_LEASE_MS": "2000",
                **(pubsub_env or {}),
            }
            running.pubsub[name] = ServiceProcess(
                "services.pubsub", env, workdir / f"pubsub-{name}.log"
            )
        if report:
            running.report = ServiceProcess(
                "services.report",
                {
                    **common,
                    "APEXMESH_REPORT_DOMAINS": DOMAIN,
                    "APEXMESH_REPORT_GRPC_PORT": str(report_grpc),
                    "APEXMESH_REPORT_HTTP_PORT": "0",
                    "APEXMESH_RELAY_ADDRESSES": relay_addresses,
                },
                workdir / "report.log",
            )
        others = [*running.relays.values(), *running.pubsub.values()]
        if running.report is not None:
            others.append(running.report)
        await asyncio.gather(*(asyncio.to_thread(p.start, 60.0) for p in others))
        yield running
    finally:
        everything = [
            *running.relays.values(),
            *running.pubsub.values(),
            *([running.report] if running.report else []),
            access,
        ]
        await asyncio.gather(*(asyncio.to_thread(p.stop) for p in everything))
        await asyncio.to_thread(redis.stop)


__all__ = ["DOMAIN", "SEED", "Deployment", "deployment", "rss_bytes"]
