"""A real two-domain mesh with the pubsub service, in-process, over real sockets.

example.com: two relay pods (``a``, ``b``), each configured with its own pubsub pod
(``p1`` behind ``a``, ``p2`` behind ``b``: "subscribe through one, publish through the
other"), and a presence service (the topics' tuples, sections 4.2/4.3 step 3.2).
redistr.com: one relay pod and a pubsub pod that redistributes example.com's
``music.jazz.milesdavis`` (section 2.6). One access service serves both domains, one
redis-server holds everything. Endpoints are SDK clients over real TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

from apexmesh.client import ApexClient, Attachment
from apexmesh.client.pubsub import AnyServiceMessage, PubsubClient
from apexmesh.client.received import ReceivedData
from apexmesh.pubsub.elements import WELL_KNOWN_TOPICS
from apexmesh.store.keys import Keys
from services.access.app import AccessApp
from services.access.settings import AccessSettings
from services.presence.app import PresenceApp
from services.presence.settings import PresenceSettings
from services.pubsub.app import PubsubApp
from services.pubsub.settings import PubsubSettings
from services.relay.app import RelayApp
from services.relay.settings import RelaySettings
from services.report.app import ReportApp
from services.report.settings import ReportSettings
from tests.support.loops import LoopFactories, loop_factories
from tests.support.mesh import (
    base_env,
    endpoint_client,
    relay_env,
    relays_ready,
    retried,
    stop_watched,
)
from tests.support.polling import scaled, wait_until
from tests.support.redis_server import RedisServer, free_port

TOPIC: Final = "music.jazz.milesdavis"
#: The content-based topic of draft-wyman's examples.
QUOTES: Final = "equity.quote.service"
#: A schema the operator configured (APEXMESH_PUBSUB_SCHEMAS), by the URI topics use.
LOCAL_SCHEMA_URI: Final = "http://www.example.com/schema/service.xsd"
LOCAL_SCHEMA: Final = b"""<xs:schema xmlns:xs='http://www.w3.org/2001/XMLSchema'>
  <xs:element name='equity-quote'>
    <xs:complexType>
      <xs:sequence>
        <xs:element name='issue-name' type='xs:string'/>
        <xs:element name='last-trade' type='xs:decimal'/>
        <xs:element name='net-change-pct' type='xs:decimal'/>
      </xs:sequence>
      <xs:attribute name='symbol' type='xs:string' use='required'/>
    </xs:complexType>
  </xs:element>
</xs:schema>"""
#: The largest content-based message the test pods take (one octet more is 554).
MAX_MESSAGE_OCTETS: Final = 65_536

#: Access entries of section 7 and what the tests need: example.com may create, delete
#: and list topics (dino may not); anyone may subscribe to, cancel and publish to the
#: seeded topics except dino (no token) and mr.slate (no core:data); redistr.com's
#: pubsub server may subscribe to the jazz topic; pebbles may contribute to robust topics
#: as the source ``source@example.com`` (XEP-0040 5.2, docs/robust.md); jade lets mr.slate
#: subscribe to the Subscriptions topic on her behalf (draft-wyman 7.6).
SEED: Final = f"""<access-entries>
  <access owner='apex=pubsub@example.com' actor='*@example.com'
          actions='pubsub:createtopic pubsub:deletetopic pubsub:listtopics' />
  <access owner='apex=pubsub@example.com' actor='dino@example.com' actions='' />
  <access owner='apex=pubsub@redistr.com' actor='*@redistr.com'
          actions='pubsub:createtopic pubsub:deletetopic pubsub:listtopics' />
  {
    "".join(
        f'''
  <access owner='apex=pubsub/{t}@example.com' actor='*@*'
          actions='pubsub:subscribe pubsub:cancel core:data' />
  <access owner='apex=pubsub/{t}@example.com' actor='dino@example.com' actions='' />
  <access owner='apex=pubsub/{t}@example.com' actor='mr.slate@example.com'
          actions='pubsub:subscribe pubsub:cancel' />'''
        for t in (TOPIC, "news", "sports", "leases", "load", QUOTES, *sorted(WELL_KNOWN_TOPICS))
    )
}
  <access owner='apex=pubsub/{TOPIC}@example.com'
          actor='apex=pubsub/{TOPIC}@redistr.com' actions='pubsub:subscribe' />
  <access owner='apex=pubsub/{TOPIC}@redistr.com' actor='*@*'
          actions='pubsub:subscribe pubsub:cancel core:data' />
  <access owner='apex=pubsub/only.subscribers@example.com' actor='*@*'
          actions='pubsub:subscribe pubsub:cancel' />
  <access owner='source@example.com' actor='pebbles@example.com'
          actions='pubsub:contribute' />
  <access owner='jade@example.com' actor='mr.slate@example.com'
          actions='pubsub:subscribe' />
</access-entries>
""".encode()

LEASE_MS: Final = 10_000


@dataclass
class PubsubMesh:
    env: dict[str, str]
    access: AccessApp
    a: RelayApp
    b: RelayApp
    r: RelayApp
    presence: PresenceApp
    pubsub: dict[str, PubsubApp]
    ports: dict[str, int]
    mesh_ports: dict[str, int]

    def pubsub_env(self, name: str, **extra: str) -> dict[str, str]:
        """Environment of pubsub pod ``name`` (p1, p2: example.com; pr: redistr.com)."""
        relays: tuple[RelayApp, ...]
        if name == "pr":
            domain, relays = "redistr.com", (self.r,)
        else:
            domain, relays = "example.com", (self.a, self.b)
        env = {
            **self.env,
            "APEXMESH_PUBSUB_DOMAINS": domain,
            "APEXMESH_ACCESS_ADDRESS": f"127.0.0.1:{self.access.grpc_port}",
            "APEXMESH_RELAY_ADDRESSES": ",".join(f"127.0.0.1:{r.grpc_port}" for r in relays),
            "APEXMESH_PUBSUB_POD_ID": name,
            "APEXMESH_PUBSUB_GRPC_PORT": str(self.ports[name]),
            "APEXMESH_PUBSUB_HTTP_PORT": "0",
            "APEXMESH_PUBSUB_LEASE_MS": "2000",
            "APEXMESH_PUBSUB_TICK_SECONDS": "0.05",
            # Bursts of 1,000 first-time access checks on a loaded 2-core machine.
            "APEXMESH_RELAY_TIMEOUT_SECONDS": "10",
            "APEXMESH_PUBSUB_MAX_MESSAGE_OCTETS": str(MAX_MESSAGE_OCTETS),
        }
        if domain == "example.com":
            env["APEXMESH_PRESENCE_ADDRESS"] = f"127.0.0.1:{self.ports['presence']}"
        else:
            env["APEXMESH_PUBSUB_UPSTREAMS"] = f"{TOPIC}@redistr.com=example.com"
            env["APEXMESH_PUBSUB_UPSTREAM_DURATION"] = "4"
        env.update(extra)
        return env

    def relay(self, pod: str) -> RelayApp:
        return {"a": self.a, "b": self.b, "r": self.r}[pod]


@contextlib.asynccontextmanager
async def pubsub_mesh(
    redis_server: RedisServer,
    keys: Keys,
    tmp_path: Path,
    *,
    pubsub_in_process: tuple[str, ...] = ("p1", "p2", "pr"),
    both_pods: bool = False,
) -> AsyncIterator[PubsubMesh]:
    """``both_pods``: each example.com relay knows both pubsub pods (its own first) and
    skips an unreachable one; otherwise each relay knows only its own."""
    common = base_env(redis_server, keys)
    seed = tmp_path / "access-seed.xml"
    seed.write_bytes(SEED)
    schema = tmp_path / "service.xsd"
    schema.write_bytes(LOCAL_SCHEMA)
    common["APEXMESH_PUBSUB_SCHEMAS"] = f"{LOCAL_SCHEMA_URI}={schema}"
    access = AccessApp(
        AccessSettings.from_env(
            {
                **common,
                "APEXMESH_DOMAINS": "example.com,redistr.com",
                "APEXMESH_ACCESS_GRPC_PORT": "0",
                "APEXMESH_ACCESS_HTTP_PORT": "0",
                "APEXMESH_ACCESS_SEED_FILE": str(seed),
                "APEXMESH_ACCESS_RESYNC_SECONDS": "0.2",
            }
        )
    )
    relays: list[RelayApp] = []
    others: list[PresenceApp | PubsubApp | ReportApp] = []
    await access.start()
    ports = {name: free_port() for name in ("p1", "p2", "pr", "presence", "report")}
    mesh_ports = {"example.com": free_port(), "redistr.com": free_port()}
    try:
        for pod, domain, pubsub, other in (
            ("a", "example.com", "p1", "redistr.com"),
            ("b", "example.com", "p2", "redistr.com"),
            ("r", "redistr.com", "pr", "example.com"),
        ):
            env = relay_env(
                common,
                domain=domain,
                pod_id=f"{domain}-{pod}",
                mesh_port=mesh_ports[domain] if pod != "b" else 0,
                access_port=access.grpc_port,
                report_port=ports["report"] if domain == "example.com" else free_port(),
                routes={other: mesh_ports[other]},
                lease_ms=LEASE_MS,
            )
            services = f"pubsub=127.0.0.1:{ports[pubsub]}"
            if both_pods and domain == "example.com":
                other_pod = "p2" if pubsub == "p1" else "p1"
                services += f"|127.0.0.1:{ports[other_pod]}"
            if domain == "example.com":
                services += f",presence=127.0.0.1:{ports['presence']}"
                env["APEXMESH_PRESENCE_ADDRESS"] = f"127.0.0.1:{ports['presence']}"
            env["APEXMESH_RELAY_SERVICES"] = services
            relay = RelayApp(RelaySettings.from_env(env))
            relays.append(relay)
            await relay.start()
        a, b, r = relays
        presence = PresenceApp(
            PresenceSettings.from_env(
                {
                    **common,
                    "APEXMESH_PRESENCE_DOMAINS": "example.com",
                    "APEXMESH_ACCESS_ADDRESS": f"127.0.0.1:{access.grpc_port}",
                    "APEXMESH_RELAY_ADDRESSES": f"127.0.0.1:{a.grpc_port},127.0.0.1:{b.grpc_port}",
                    "APEXMESH_PRESENCE_GRPC_PORT": str(ports["presence"]),
                    "APEXMESH_PRESENCE_HTTP_PORT": "0",
                    "APEXMESH_PRESENCE_TICK_SECONDS": "0.05",
                }
            )
        )
        others.append(presence)
        await presence.start()
        # statusResponse data (RFC 3340 6.2): how a publisher sees section 4.7.1's code.
        report = ReportApp(
            ReportSettings.from_env(
                {
                    **common,
                    "APEXMESH_REPORT_DOMAINS": "example.com",
                    "APEXMESH_RELAY_ADDRESSES": f"127.0.0.1:{a.grpc_port},127.0.0.1:{b.grpc_port}",
                    "APEXMESH_REPORT_GRPC_PORT": str(ports["report"]),
                    "APEXMESH_REPORT_HTTP_PORT": "0",
                }
            )
        )
        others.append(report)
        await report.start()
        mesh = PubsubMesh(common, access, a, b, r, presence, {}, ports, mesh_ports)
        for name in pubsub_in_process:
            app = PubsubApp(PubsubSettings.from_env(mesh.pubsub_env(name)))
            others.append(app)
            await app.start()
            mesh.pubsub[name] = app
        await relays_ready(relays)
        yield mesh
    finally:
        await stop_watched([*relays, *others])
        await access.stop()


@contextlib.asynccontextmanager
async def started_mesh(
    redis_server: RedisServer,
    keys: Keys,
    tmp_path: Path,
    *,
    pubsub_in_process: tuple[str, ...] = ("p1", "p2", "pr"),
    both_pods: bool = False,
) -> AsyncIterator[PubsubMesh]:
    """:func:`pubsub_mesh`, retried when a port was taken meanwhile."""
    async with retried(
        lambda: pubsub_mesh(
            redis_server,
            keys,
            tmp_path,
            pubsub_in_process=pubsub_in_process,
            both_pods=both_pods,
        )
    ) as running:
        yield running


@pytest.fixture
async def mesh(redis_server: RedisServer, keys: Keys, tmp_path: Path) -> AsyncIterator[PubsubMesh]:
    async with started_mesh(redis_server, keys, tmp_path) as running:
        yield running


async def until(predicate: Callable[[], Awaitable[bool]], within: float = 5.0) -> None:
    """Return once the async ``predicate`` is true; TimeoutError after ``within`` s
    (scaled: tests/support/polling.py)."""
    await wait_until(predicate, within, every=0.02)


@dataclass
class Party:
    """An attached endpoint with its pubsub helper."""

    client: ApexClient
    attachment: Attachment
    pubsub: PubsubClient
    seen: list[AnyServiceMessage] = field(default_factory=list)

    async def message(self, within: float = 5.0) -> AnyServiceMessage:
        async with asyncio.timeout(scaled(within)):
            return await self.pubsub.next_message()

    async def publication(self, within: float = 5.0) -> tuple[str, ReceivedData]:
        async with asyncio.timeout(scaled(within)):
            return await self.pubsub.next_publication()


Attach = Callable[..., Awaitable[Party]]


@pytest.fixture
async def attach(mesh: PubsubMesh) -> AsyncIterator[Attach]:
    """``await attach("mike@example.com", pod="a")``: an SDK client attached there."""
    async with contextlib.AsyncExitStack() as stack:
        helpers: list[PubsubClient] = []

        async def _attach(endpoint: str, pod: str = "a", domain: str | None = None) -> Party:
            client = await stack.enter_async_context(endpoint_client(mesh.relay(pod).edge_port))
            attachment = await client.attach(endpoint)
            helper = PubsubClient(attachment, domain=domain)
            helpers.append(helper)
            return Party(client, attachment, helper)

        try:
            yield _attach
        finally:
            for helper in helpers:
                await helper.aclose()


#: Test modules whose relays and endpoints (all in this process) run on uvloop, as every
#: service does in production (apexmesh/ops/runner.py): the 1,000-lease test holds two
#: relays, access, report, presence and 1,000 endpoints in this one process, and on the
#: default loop a 2-core machine can hold its lease-end cancels behind the subscribe waves.
UVLOOP_MODULES: Final = frozenset({"test_pubsub_processes.py"})


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> LoopFactories:
    return loop_factories(item, UVLOOP_MODULES)
