"""A real mesh with the presence service, in-process: access, two example.com relay pods
configured with apex=presence (``APEXMESH_RELAY_SERVICES`` and the attach hook) and the
presence service, a real redis-server; endpoints are SDK clients over real TCP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from apexmesh.client import ApexClient, Attachment
from apexmesh.client.presence import PresenceClient, PresenceMessage
from apexmesh.store.keys import Keys
from services.access.app import AccessApp
from services.access.settings import AccessSettings
from services.presence.app import PresenceApp
from services.presence.settings import PresenceSettings
from services.relay.app import RelayApp
from services.relay.settings import RelaySettings
from tests.support.mesh import base_env, endpoint_client, relay_env, retried
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer, free_port

#: Access entries (RFC 3341): data to everybody; wilma and barney may subscribe to fred,
#: fred may watch himself (his own entry grants him everything), pebbles may publish for
#: fred; dino holds no presence token at all.
SEED: Final = b"""<access-entries>
  <access owner='fred@example.com' actor='*@*' actions='core:data' />
  <access owner='fred@example.com' actor='wilma@example.com'
          actions='core:data presence:subscribe' />
  <access owner='fred@example.com' actor='barney@example.com'
          actions='core:data presence:subscribe presence:watch' />
  <access owner='fred@example.com' actor='pebbles@example.com'
          actions='core:data presence:publish' />
  <access owner='wilma@example.com' actor='*@*' actions='core:data' />
  <access owner='barney@example.com' actor='*@*' actions='core:data' />
  <access owner='pebbles@example.com' actor='*@*' actions='core:data' />
  <access owner='dino@example.com' actor='*@*' actions='core:data' />
  <access owner='apex=presence@example.com' actor='*@*' actions='core:data' />
</access-entries>
"""

#: Short leases so a killed pod's attachments lapse quickly.
LEASE_MS: Final = 1000


@dataclass
class PresenceMesh:
    env: dict[str, str]
    access: AccessApp
    a: RelayApp
    b: RelayApp
    presence: PresenceApp | None
    presence_port: int

    def relay_env(self, pod_id: str) -> dict[str, str]:
        return {
            **relay_env(
                self.env,
                domain="example.com",
                pod_id=pod_id,
                mesh_port=0,
                access_port=self.access.grpc_port,
                report_port=free_port(),
                routes={},
                lease_ms=LEASE_MS,
            ),
            "APEXMESH_RELAY_SERVICES": f"presence=127.0.0.1:{self.presence_port}",
            "APEXMESH_PRESENCE_ADDRESS": f"127.0.0.1:{self.presence_port}",
        }

    def presence_env(self) -> dict[str, str]:
        return {
            **self.env,
            "APEXMESH_PRESENCE_DOMAINS": "example.com",
            "APEXMESH_ACCESS_ADDRESS": f"127.0.0.1:{self.access.grpc_port}",
            "APEXMESH_RELAY_ADDRESSES": ",".join(
                f"127.0.0.1:{relay.grpc_port}" for relay in (self.a, self.b)
            ),
            "APEXMESH_PRESENCE_GRPC_PORT": str(self.presence_port),
            "APEXMESH_PRESENCE_HTTP_PORT": "0",
            "APEXMESH_PRESENCE_TICK_SECONDS": "0.05",
        }


@contextlib.asynccontextmanager
async def presence_mesh(
    redis_server: RedisServer, keys: Keys, tmp_path: Path, *, in_process: bool = True
) -> AsyncIterator[PresenceMesh]:
    common = base_env(redis_server, keys)
    seed = tmp_path / "access-seed.xml"
    seed.write_bytes(SEED)
    access = AccessApp(
        AccessSettings.from_env(
            {
                **common,
                "APEXMESH_DOMAINS": "example.com",
                "APEXMESH_ACCESS_GRPC_PORT": "0",
                "APEXMESH_ACCESS_HTTP_PORT": "0",
                "APEXMESH_ACCESS_SEED_FILE": str(seed),
                "APEXMESH_ACCESS_RESYNC_SECONDS": "0.2",
            }
        )
    )
    relays: list[RelayApp] = []
    presence: PresenceApp | None = None
    await access.start()
    try:
        mesh = PresenceMesh(common, access, None, None, None, free_port())  # type: ignore[arg-type]
        for pod in ("example-a", "example-b"):
            relay = RelayApp(RelaySettings.from_env(mesh.relay_env(pod)))
            relays.append(relay)
            await relay.start()
        mesh.a, mesh.b = relays
        if in_process:
            presence = PresenceApp(PresenceSettings.from_env(mesh.presence_env()))
            await presence.start()
            mesh.presence = presence
        yield mesh
    finally:
        await asyncio.gather(*(relay.stop() for relay in relays))
        if presence is not None:
            await presence.stop()
        await access.stop()


@pytest.fixture
async def pmesh(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> AsyncIterator[PresenceMesh]:
    async with retried(lambda: presence_mesh(redis_server, keys, tmp_path)) as mesh:
        yield mesh


@dataclass
class Party:
    """An attached endpoint with its presence helper."""

    client: ApexClient
    attachment: Attachment
    presence: PresenceClient

    async def next(self, within: float = 5.0) -> PresenceMessage:
        async with asyncio.timeout(scaled(within)):
            return await self.presence.next_message()


Attach = Callable[..., Awaitable[Party]]


@pytest.fixture
async def attach(pmesh: PresenceMesh) -> AsyncIterator[Attach]:
    """``await attach("fred@example.com", pod="a")``: an SDK client attached there."""
    async with contextlib.AsyncExitStack() as stack:

        async def _attach(endpoint: str, pod: str = "a") -> Party:
            relay = pmesh.a if pod == "a" else pmesh.b
            client = await stack.enter_async_context(endpoint_client(relay.edge_port))
            attachment = await client.attach(endpoint)
            return Party(client, attachment, PresenceClient(attachment))

        yield _attach
