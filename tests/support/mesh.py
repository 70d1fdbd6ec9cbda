"""A real APEX mesh on loopback for tests: access, report and relay services in-process.

Two relay pods serve ``example.com`` (sharing Redis and the access service), one relay
serves ``rubble.com``; each domain has its own report service (``apex=report@DOMAIN``,
RFC 3340 section 6.2) and the domains reach each other over apex-mesh through static
routes (``APEXMESH_RELAY_ROUTES``). Everything talks over real sockets: BEEP over TCP,
gRPC between services, a real redis-server. The one access service serves both domains.

Ports are 0 (the kernel's choice) except the mesh ports and the report services' gRPC
ports, which the relays must know before they start (routes and report addresses): those
are reserved below the kernel's ephemeral range (tests/support/ports.py), so nothing
takes them before their server binds.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol, TypeVar

import grpc

from apexmesh.aio import BeepConnection, Channel, connect
from apexmesh.apex.content import parse_payload
from apexmesh.beep.management import ProfileOffer
from apexmesh.beep.mime import beep_xml, split_entity
from apexmesh.beep.xml import Element, parse_xml
from apexmesh.client import ApexClient, Attachment, ReceivedData, connect_endpoint
from apexmesh.store.keys import Keys
from services.access.app import AccessApp
from services.access.settings import AccessSettings
from services.relay.app import RelayApp
from services.relay.settings import RelaySettings
from services.report.app import ReportApp
from services.report.settings import ReportSettings
from tests.support.polling import scaled, wait_until
from tests.support.redis_server import RedisServer, free_port

APEX: Final = "http://iana.org/beep/APEX"
#: Bearer tokens of the services' admin APIs in these meshes (apexmesh/ops/admin.py).
ADMIN_TOKEN: Final = "test-admin-token-0123456789"
READ_TOKEN: Final = "test-read-token-0123456789"

#: Access entries of the test mesh (RFC 3341): everybody may send data to these owners;
#: ``dino@example.com`` has none, so data to dino is refused (core:data, 537).
SEED: Final = b"""<access-entries>
  <access owner='barney@example.com' actor='*@*' actions='core:data' />
  <access owner='fred@example.com' actor='*@*' actions='core:data' />
  <access owner='wilma@example.com' actor='*@*' actions='core:data' />
  <access owner='pebbles@example.com' actor='*@*' actions='core:data' />
  <access owner='barney@rubble.com' actor='*@*' actions='core:data' />
  <access owner='betty@rubble.com' actor='*@*' actions='core:data' />
</access-entries>
"""

#: SASL identities the relays know (``identity:password``; RFC 3340 section 3.2).
SASL_USERS: Final = "barney:rubble\nfred:flintstone\n"
PASSWORDS: Final = {"barney": "rubble", "fred": "flintstone"}


def base_env(redis_server: RedisServer, keys: Keys) -> dict[str, str]:
    return {
        "APEXMESH_DEV": "1",
        "APEXMESH_REDIS_URL": redis_server.url,
        "APEXMESH_REDIS_PREFIX": keys.prefix,
        "APEXMESH_SHUTDOWN_GRACE": "0.2",
        "APEXMESH_ADMIN_TOKEN": ADMIN_TOKEN,
        "APEXMESH_ADMIN_READ_TOKEN": READ_TOKEN,
    }


def relay_env(
    common: Mapping[str, str],
    *,
    domain: str,
    pod_id: str,
    mesh_port: int,
    access_port: int,
    report_port: int,
    routes: Mapping[str, int],
    lease_ms: int,
) -> dict[str, str]:
    return {
        **common,
        "APEXMESH_DOMAINS": domain,
        "APEXMESH_RELAY_POD_ID": pod_id,
        "APEXMESH_RELAY_EDGE_PORT": "0",
        "APEXMESH_RELAY_MESH_PORT": str(mesh_port),
        "APEXMESH_RELAY_GRPC_PORT": "0",
        "APEXMESH_RELAY_HTTP_PORT": "0",
        "APEXMESH_ACCESS_ADDRESS": f"127.0.0.1:{access_port}",
        "APEXMESH_REPORT_ADDRESS": f"127.0.0.1:{report_port}",
        "APEXMESH_RELAY_ROUTES": ",".join(f"{d}=127.0.0.1:{p}" for d, p in routes.items()),
        "APEXMESH_RELAY_LEASE_MS": str(lease_ms),
        # a cold access decision under load: the same deadline, scaled (tests/README.md)
        "APEXMESH_RELAY_ACCESS_TIMEOUT": str(scaled(2.0)),
    }


@dataclass
class Mesh:
    """The running mesh; ``a`` and ``b`` are the example.com pods."""

    env: dict[str, str]
    access: AccessApp
    a: RelayApp
    b: RelayApp
    rubble: RelayApp
    report_example: ReportApp
    report_rubble: ReportApp
    mesh_ports: dict[str, int]
    report_ports: dict[str, int]

    @property
    def relays(self) -> tuple[RelayApp, ...]:
        return (self.a, self.b, self.rubble)

    def relay_env(self, pod_id: str, *, lease_ms: int, mesh_port: int = 0) -> dict[str, str]:
        """Environment of one more example.com relay pod (e.g. a subprocess)."""
        return relay_env(
            self.env,
            domain="example.com",
            pod_id=pod_id,
            mesh_port=mesh_port,
            access_port=self.access.grpc_port,
            report_port=self.report_ports["example.com"],
            routes={"rubble.com": self.mesh_ports["rubble.com"]},
            lease_ms=lease_ms,
        )


#: Attempts at starting the mesh: a reserved port a foreign server (outside the suite's
#: locks) took meanwhile costs one restart of the whole mesh.
START_ATTEMPTS: Final = 4

T = TypeVar("T")


class App(Protocol):
    """A service of the mesh run in the test's process: what the harness stops."""

    async def stop(self) -> None: ...


@contextlib.asynccontextmanager
async def retried(
    start: Callable[[], contextlib.AbstractAsyncContextManager[T]],
) -> AsyncIterator[T]:
    """Enter ``start()``; when it fails because a port picked free a moment before was
    taken meanwhile (OSError, or the RuntimeError grpc raises), it has cleaned up after
    itself and a fresh one is entered, up to :data:`START_ATTEMPTS` times."""
    for attempt in range(START_ATTEMPTS):
        stack = contextlib.AsyncExitStack()
        try:
            running = await stack.enter_async_context(start())
        except (OSError, RuntimeError):
            await stack.aclose()
            if attempt == START_ATTEMPTS - 1:
                raise
            continue
        async with stack:
            yield running
        return


async def stop_all(apps: list[App]) -> None:
    """Relays first (they call the others), each group stopped concurrently."""
    await asyncio.gather(*(app.stop() for app in apps if isinstance(app, RelayApp)))
    await asyncio.gather(*(app.stop() for app in apps if not isinstance(app, RelayApp)))
    apps.clear()


#: Seconds the mesh may take to stop before the harness shows what every task awaits.
STOP_STALL_SECONDS: Final = 10.0


async def stop_watched(apps: list[App]) -> None:
    """Stop every app. A stop that stalls is a bug to see, not to hide: after
    :data:`STOP_STALL_SECONDS` the stack of every task goes to stderr (shown with the
    failing test), then the stop is awaited still."""
    stopping = asyncio.ensure_future(stop_all(apps))
    done, _ = await asyncio.wait({stopping}, timeout=STOP_STALL_SECONDS)
    if not done:
        print(f"mesh stop stalled for {STOP_STALL_SECONDS}s; tasks:", file=sys.stderr)
        for task in asyncio.all_tasks():
            print(task, file=sys.stderr)
            with contextlib.suppress(TypeError):  # a Cython frame (grpc) has no line
                task.print_stack(file=sys.stderr)
    await stopping


@contextlib.asynccontextmanager
async def running_mesh(
    redis_server: RedisServer, keys: Keys, tmp_path: Path, *, lease_ms: int = 10_000
) -> AsyncIterator[Mesh]:
    """Start the whole mesh; stop every app on exit."""
    common = base_env(redis_server, keys)
    seed = tmp_path / "access-seed.xml"
    seed.write_bytes(SEED)
    sasl = tmp_path / "relay-sasl"
    sasl.write_text(SASL_USERS, encoding="utf-8")
    common["APEXMESH_RELAY_SASL_FILE"] = str(sasl)
    started: list[App] = []
    try:
        for attempt in range(START_ATTEMPTS):
            try:
                mesh = await _start(common, seed, lease_ms, started)
                break
            except (OSError, RuntimeError):  # grpc raises RuntimeError for a taken port
                await stop_all(started)
                if attempt == START_ATTEMPTS - 1:
                    raise
        yield mesh
    finally:
        await stop_watched(started)


async def _start(common: dict[str, str], seed: Path, lease_ms: int, started: list[App]) -> Mesh:
    access = AccessApp(
        AccessSettings.from_env(
            {
                **common,
                "APEXMESH_DOMAINS": "example.com,rubble.com",
                "APEXMESH_ACCESS_GRPC_PORT": "0",
                "APEXMESH_ACCESS_HTTP_PORT": "0",
                "APEXMESH_ACCESS_SEED_FILE": str(seed),
            }
        )
    )
    started.append(access)
    await access.start()
    mesh_ports = {"example.com": free_port(), "rubble.com": free_port()}
    report_ports = {"example.com": free_port(), "rubble.com": free_port()}
    pods: dict[str, RelayApp] = {}
    for pod_id, domain, mesh_port, other in (
        ("example-a", "example.com", mesh_ports["example.com"], "rubble.com"),
        ("example-b", "example.com", 0, "rubble.com"),
        ("rubble-a", "rubble.com", mesh_ports["rubble.com"], "example.com"),
    ):
        relay = RelayApp(
            RelaySettings.from_env(
                relay_env(
                    common,
                    domain=domain,
                    pod_id=pod_id,
                    mesh_port=mesh_port,
                    access_port=access.grpc_port,
                    report_port=report_ports[domain],
                    routes={other: mesh_ports[other]},
                    lease_ms=lease_ms,
                )
            )
        )
        started.append(relay)
        await relay.start()
        pods[pod_id] = relay
    reports: dict[str, ReportApp] = {}
    for domain, relays in (
        ("example.com", (pods["example-a"], pods["example-b"])),
        ("rubble.com", (pods["rubble-a"],)),
    ):
        report = ReportApp(
            ReportSettings.from_env(
                {
                    **common,
                    "APEXMESH_REPORT_DOMAINS": domain,
                    "APEXMESH_RELAY_ADDRESSES": ",".join(
                        f"127.0.0.1:{r.grpc_port}" for r in relays
                    ),
                    "APEXMESH_REPORT_GRPC_PORT": str(report_ports[domain]),
                    "APEXMESH_REPORT_HTTP_PORT": "0",
                }
            )
        )
        started.append(report)
        await report.start()
        reports[domain] = report
    await relays_ready(pods.values())
    return Mesh(
        env=common,
        access=access,
        a=pods["example-a"],
        b=pods["example-b"],
        rubble=pods["rubble-a"],
        report_example=reports["example.com"],
        report_rubble=reports["rubble.com"],
        mesh_ports=mesh_ports,
        report_ports=report_ports,
    )


async def relay_ready(relay: RelayApp) -> bool:
    """What the relay's /readyz waits for before Kubernetes sends it sessions: its access
    cache subscribed and the access service answering over the relay's own channel."""
    if not relay.checker.synced:
        return False
    try:
        await relay.access.version()
    except grpc.aio.AioRpcError:
        return False
    return True


async def relays_ready(relays: Iterable[RelayApp], within: float = 10.0) -> None:
    """Return once every relay is :func:`relay_ready`, as a harness must before a test
    sends: a test that sent sooner saw its first access check run past the relay's
    deadline and fail closed (421) on a loaded machine."""
    for relay in relays:
        await wait_until(
            lambda relay=relay: relay_ready(relay),
            within,
            what=f"relay {relay.settings.pod_id} ready",
        )


@contextlib.asynccontextmanager
async def endpoint_client(port: int) -> AsyncIterator[ApexClient]:
    """An endpoint SDK client on a relay's apex-edge port, closed on exit."""
    client = await connect_endpoint("127.0.0.1", port, timeout=scaled(5.0))
    try:
        yield client
    finally:
        await client.close(timeout=scaled(5.0))


async def receive(attachment: Attachment, within: float = 5.0) -> ReceivedData:
    """The attachment's next data; TimeoutError when none comes within ``within`` s."""
    async with asyncio.timeout(scaled(within)):
        return await attachment.receive()


@contextlib.asynccontextmanager
async def beep_session(port: int) -> AsyncIterator[BeepConnection]:
    """A raw BEEP session (for exact bytes), closed on exit."""
    conn = await connect("127.0.0.1", port, timeout=scaled(5.0))
    try:
        yield conn
    finally:
        await conn.close()


async def apex_channel(conn: BeepConnection, piggyback: str | None = None) -> Channel:
    """Start the APEX profile, optionally with an element piggybacked (section 4.2)."""
    return await conn.open_channel(ProfileOffer(uri=APEX, content=piggyback))


def answer_of(kind: str, payload: bytes) -> tuple[str, str, dict[str, str]]:
    """(RPY/ERR, element tag, attributes) of a reply to an APEX MSG."""
    root = parse_xml(split_entity(payload).body)
    return kind, str(root.tag), {str(k): str(v) for k, v in root.attrib.items()}


async def ask(channel: Channel, xml: str | bytes, within: float = 5.0) -> tuple[str, str, str]:
    """Send one APEX element as a MSG; return (RPY/ERR, tag, code or '')."""
    body = xml.encode() if isinstance(xml, str) else xml
    async with asyncio.timeout(scaled(within)):
        reply = await channel.request(beep_xml(body))
    kind, tag, attrs = answer_of(reply.kind, reply.payload)
    return kind, tag, attrs.get("code", "")


def start_answer(channel: Channel) -> tuple[str, str]:
    """(tag, code) of the element piggybacked on the channel start's reply."""
    assert channel.reply_content is not None
    root = parse_xml(channel.reply_content.encode())
    return str(root.tag), str(root.get("code", ""))


async def ask_payload(
    channel: Channel, payload: bytes, within: float = 5.0
) -> tuple[str, str, str]:
    """Send a complete BEEP payload (entity headers included); (RPY/ERR, tag, code)."""
    async with asyncio.timeout(scaled(within)):
        reply = await channel.request(payload)
    kind, tag, attrs = answer_of(reply.kind, reply.payload)
    return kind, tag, attrs.get("code", "")


BOUNDARY: Final = "apexmesh-test-boundary"


def cid_payload(control: str, content_id: str = "1@example.com", body: bytes = b"hi") -> bytes:
    """A multipart/related payload: ``control`` then one part named ``content_id``
    (RFC 3340 section 4.1, the ``cid:`` form of the examples)."""
    head = (
        f'Content-Type: multipart/related; boundary="{BOUNDARY}"; type="application/beep+xml"'
        f"\r\n\r\n--{BOUNDARY}\r\nContent-Type: application/beep+xml\r\n\r\n{control}"
        f"\r\n--{BOUNDARY}\r\nContent-Type: text/plain\r\nContent-ID: <{content_id}>\r\n\r\n"
    )
    return head.encode() + body + f"\r\n--{BOUNDARY}--\r\n".encode()


async def receive_msg(channel: Channel, within: float = 5.0) -> tuple[bytes, Element]:
    """The next MSG the relay sends on ``channel``, answered ``<ok />``: its payload and
    its control element (the start part of a multipart payload)."""
    async with asyncio.timeout(scaled(within)):
        incoming = await channel.receive()
    incoming.reply(beep_xml(b"<ok />"))
    return incoming.payload, parse_xml(parse_payload(incoming.payload).control)
