"""A relay as production runs it, for tests: not a development run, so TLS is required
before anything else (the greeting offers only TLS), endpoints authenticate with SASL
under their full identity, Redis needs a password, and the access service decides every
attach and data. One example.com relay pod with its access service, in-process, over
real sockets and a real (password-protected) redis-server.

The relay's certificate (a CA made for the test run) names ``relay1.example.com``,
``example.com``, ``localhost`` and ``127.0.0.1``: a client that dials the pod by its
host name authenticates with DIGEST-MD5's ``beep/relay1.example.com`` too.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trustme

from apexmesh.aio import BeepConnection, connect
from apexmesh.beep.sasl import SaslClientExchange
from apexmesh.client import ApexClient, connect_endpoint
from apexmesh.store.keys import Keys
from services.access.app import AccessApp
from services.access.settings import AccessSettings
from services.relay.app import RelayApp
from services.relay.settings import RelaySettings
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer

#: The pod's host name (certificate and DIGEST-MD5 digest-uri).
HOST: Final = "relay1.example.com"

#: SASL identities: endpoints by their full identity (docs/sdk.md).
PASSWORDS: Final = {
    "fred@example.com": "flintstone",
    "barney@example.com": "rubble",
    "wilma@example.com": "pebbles",
}

SEED: Final = b"""<access-entries>
  <access owner='barney@example.com' actor='*@*' actions='core:data' />
  <access owner='fred@example.com' actor='*@*' actions='core:data' />
  <access owner='wilma@example.com' actor='*@*' actions='core:data' />
</access-entries>
"""


@dataclass
class SecureRelay:
    """The running relay and what a client needs to reach it."""

    relay: RelayApp
    access: AccessApp
    ca: trustme.CA

    @property
    def port(self) -> int:
        return self.relay.edge_port

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        self.ca.configure_trust(context)
        return context

    async def client(self, identity: str, mechanism: str = "SCRAM-SHA-256") -> ApexClient:
        """An endpoint SDK client: TLS, then SASL as ``identity``."""
        return await connect_endpoint(
            "127.0.0.1",
            self.port,
            ssl_context=self.client_context(),
            server_hostname=HOST,
            sasl=(mechanism, identity, PASSWORDS[identity]),
            timeout=scaled(10.0),
        )

    async def session(self, identity: str | None = None) -> BeepConnection:
        """A raw BEEP session tuned to TLS (and authenticated when ``identity`` is
        given), for exact bytes."""
        conn = await connect(
            "127.0.0.1", self.port, ssl_context=self.client_context(), server_hostname=HOST
        )
        await conn.start_tls()
        if identity is not None:
            exchange = SaslClientExchange(
                "SCRAM-SHA-256", authcid=identity, password=PASSWORDS[identity], host=HOST
            )
            await conn.authenticate("SCRAM-SHA-256", exchange)
        return conn


def relay_env(
    redis_url: str, keys: Keys, tmp_path: Path, access_port: int, cert: Path, key: Path
) -> dict[str, str]:
    sasl = tmp_path / "relay-sasl"
    sasl.write_text("".join(f"{who}:{pw}\n" for who, pw in PASSWORDS.items()), encoding="utf-8")
    return {
        "APEXMESH_REDIS_URL": redis_url,
        "APEXMESH_REDIS_PREFIX": keys.prefix,
        "APEXMESH_SHUTDOWN_GRACE": "0.2",
        "APEXMESH_DOMAINS": "example.com",
        "APEXMESH_RELAY_POD_ID": "secure-a",
        "APEXMESH_RELAY_EDGE_PORT": "0",
        "APEXMESH_RELAY_MESH_PORT": "0",
        "APEXMESH_RELAY_GRPC_PORT": "0",
        "APEXMESH_RELAY_HTTP_PORT": "0",
        "APEXMESH_ACCESS_ADDRESS": f"127.0.0.1:{access_port}",
        "APEXMESH_RELAY_TLS_CERT": str(cert),
        "APEXMESH_RELAY_TLS_KEY": str(key),
        "APEXMESH_RELAY_SASL_FILE": str(sasl),
        # quick throttling, so that a test sees the whole policy in well under a second
        "APEXMESH_RELAY_SASL_DELAY_MS": "50",
        "APEXMESH_RELAY_SASL_MAX_DELAY_MS": "200",
        "APEXMESH_RELAY_SASL_MAX_FAILURES": "3",
    }


@contextlib.asynccontextmanager
async def secure_relay(
    redis_server: RedisServer,
    keys: Keys,
    tmp_path: Path,
    extra: Mapping[str, str] | None = None,
) -> AsyncIterator[SecureRelay]:
    """Start the access service and the relay (no development mode); stop both on exit."""
    assert redis_server.password is not None, "production settings need a Redis password"
    ca = trustme.CA()
    issued = ca.issue_cert(HOST, "example.com", "localhost", "127.0.0.1")
    cert, key = tmp_path / "relay-cert.pem", tmp_path / "relay-key.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    seed = tmp_path / "access-seed.xml"
    seed.write_bytes(SEED)
    access = AccessApp(
        AccessSettings.from_env(
            {
                "APEXMESH_REDIS_URL": redis_server.url,
                "APEXMESH_REDIS_PREFIX": keys.prefix,
                "APEXMESH_SHUTDOWN_GRACE": "0.2",
                "APEXMESH_DOMAINS": "example.com",
                "APEXMESH_ACCESS_GRPC_PORT": "0",
                "APEXMESH_ACCESS_HTTP_PORT": "0",
                "APEXMESH_ACCESS_SEED_FILE": str(seed),
            }
        )
    )
    await access.start()
    relay: RelayApp | None = None
    try:
        env = relay_env(redis_server.url, keys, tmp_path, access.grpc_port, cert, key)
        relay = RelayApp(RelaySettings.from_env({**env, **(extra or {})}))
        await relay.start()
        yield SecureRelay(relay, access, ca)
    finally:
        if relay is not None:
            await relay.stop()
        await access.stop()
