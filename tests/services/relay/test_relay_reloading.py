"""TLS and SASL material reloaded by a running relay process (issue #31, must show).

The relay runs as a real process in production settings (TLS required, SASL, a
password-protected Redis), its certificate, key and credentials file mounted the way the
kubelet mounts a Secret: files that are symlinks into ``..data``, itself a symlink to a
timestamped directory, swapped atomically on every change. The test changes the SASL
Secret (a new endpoint, a changed password) and the TLS Secret (a renewed certificate):
new sessions see the new certificate and authenticate with the new credentials, the
sessions opened before go on exchanging data, and the process is the same one
throughout. A bad change (a key that does not match) keeps what is loaded and is
counted as failed."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import trustme

from apexmesh.aio import AuthenticationError, BeepConnection, connect
from apexmesh.beep.sasl import SaslClientExchange
from apexmesh.client import ApexClient, connect_endpoint
from apexmesh.store.keys import Keys
from services.access.app import AccessApp
from services.access.settings import AccessSettings
from tests.support.polling import scaled, wait_until
from tests.support.processes import ServiceProcess
from tests.support.redis_server import RedisServer
from tests.support.secure import HOST, PASSWORDS, SEED, relay_env

pytestmark = pytest.mark.integration

CERT, KEY, SASL = "tls.crt", "tls.key", "passwords"


class SecretVolume:
    """A directory laid out as the kubelet lays out a mounted Secret (AtomicWriter):
    ``NAME -> ..data/NAME``, ``..data -> ..VERSION``; :meth:`write` makes a new version
    and swaps ``..data`` with one rename."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self._version = 0

    def write(self, files: dict[str, bytes]) -> None:
        self._version += 1
        version = self.root / f"..{self._version:04d}"
        version.mkdir()
        for name, content in files.items():
            (version / name).write_bytes(content)
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(Path("..data") / name)
        staging = self.root / "..data_tmp"
        staging.symlink_to(version.name)
        staging.replace(self.root / "..data")

    def path(self, name: str) -> Path:
        return self.root / name


def credentials(passwords: dict[str, str]) -> bytes:
    return "".join(f"{who}:{pw}\n" for who, pw in passwords.items()).encode()


def pems(issued: trustme.LeafCert) -> dict[str, bytes]:
    return {CERT: issued.cert_chain_pems[0].bytes(), KEY: issued.private_key_pem.bytes()}


@contextlib.asynccontextmanager
async def access_service(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> AsyncIterator[int]:
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
    try:
        yield access.grpc_port
    finally:
        await access.stop()


async def served_certificate(port: int, trust: ssl.SSLContext) -> bytes:
    """The DER certificate a new session to ``port`` is served after TLS tuning."""
    conn = await connect("127.0.0.1", port, ssl_context=trust, server_hostname=HOST)
    try:
        await conn.start_tls()
        assert conn.transport is not None
        ssl_object = conn.transport.get_extra_info("ssl_object")
        return bytes(ssl_object.getpeercert(binary_form=True))
    finally:
        await conn.close()


async def session(port: int, trust: ssl.SSLContext, identity: str, password: str) -> BeepConnection:
    conn = await connect("127.0.0.1", port, ssl_context=trust, server_hostname=HOST)
    await conn.start_tls()
    exchange = SaslClientExchange("SCRAM-SHA-256", authcid=identity, password=password, host=HOST)
    try:
        await conn.authenticate("SCRAM-SHA-256", exchange)
    except BaseException:
        await conn.close()
        raise
    return conn


async def client(port: int, trust: ssl.SSLContext, identity: str, password: str) -> ApexClient:
    return await connect_endpoint(
        "127.0.0.1",
        port,
        ssl_context=trust,
        server_hostname=HOST,
        sasl=("SCRAM-SHA-256", identity, password),
        timeout=scaled(10.0),
    )


def metric(text: str, name: str, **labels: str) -> float:
    wanted = name + (
        "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
    )
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float = 15.0) -> None:
    """Poll the coroutine function ``check`` until it returns true (scaled deadline)."""
    await wait_until(check, within, every=0.05, what=what)


@pytest.mark.timeout(120)
async def test_a_running_relay_takes_new_credentials_and_a_renewed_certificate_keeping_its_sessions(
    locked_redis: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    ca = trustme.CA()
    first = ca.issue_cert(HOST, "example.com", "localhost", "127.0.0.1")
    tls_volume, sasl_volume = SecretVolume(tmp_path / "tls"), SecretVolume(tmp_path / "sasl")
    tls_volume.write(pems(first))
    before = {who: pw for who, pw in PASSWORDS.items() if who != "wilma@example.com"}
    sasl_volume.write({SASL: credentials(before)})
    trust = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(trust)

    async with access_service(locked_redis, keys, tmp_path) as access_port:
        env = relay_env(
            locked_redis.url,
            keys,
            tmp_path,
            access_port,
            tls_volume.path(CERT),
            tls_volume.path(KEY),
        )
        env |= {
            "APEXMESH_RELAY_SASL_FILE": str(sasl_volume.path(SASL)),
            "APEXMESH_RELAY_RELOAD_SECONDS": "0.2",
            "APEXMESH_ADMIN_TOKEN": "reload-test-admin-token-0123",
        }
        relay = ServiceProcess("services.relay", env, tmp_path / "relay.log")
        info = await asyncio.to_thread(relay.start)
        pid = relay.process.pid
        port = info["edge_port"]
        metrics_url = f"http://127.0.0.1:{info['http_port']}/metrics"
        try:
            # Before: fred and barney attach with the first certificate and passwords.
            assert await served_certificate(port, trust) == first_der(first)
            fred_client = await client(port, trust, "fred@example.com", "flintstone")
            barney_client = await client(port, trust, "barney@example.com", "rubble")
            fred = await fred_client.attach("fred@example.com")
            barney = await barney_client.attach("barney@example.com")
            with pytest.raises(AuthenticationError):
                await session(port, trust, "wilma@example.com", "wilma-2")

            # The SASL Secret changes: a new endpoint, and barney's password changed.
            changed = {
                **before,
                "barney@example.com": "rubble-2",
                "wilma@example.com": "wilma-2",
            }
            sasl_volume.write({SASL: credentials(changed)})
            # The TLS Secret changes: the certificate renewed by the same CA.
            renewed = ca.issue_cert(HOST, "example.com", "localhost", "127.0.0.1")
            tls_volume.write(pems(renewed))

            async def serves_renewed() -> bool:
                return await served_certificate(port, trust) == first_der(renewed)

            await until(serves_renewed, "new sessions are served the renewed certificate")

            async def new_password_works() -> bool:
                try:
                    conn = await session(port, trust, "wilma@example.com", "wilma-2")
                except AuthenticationError:
                    return False
                await conn.close()
                return True

            await until(new_password_works, "wilma authenticates with the new credentials")
            with pytest.raises(AuthenticationError):
                await session(port, trust, "barney@example.com", "rubble")
            await (await session(port, trust, "barney@example.com", "rubble-2")).close()

            # The sessions opened before go on, both ways, over the first certificate.
            await fred.send("barney@example.com", b"after the reload")
            async with asyncio.timeout(scaled(10)):
                assert (await barney.receive()).content == b"after the reload"
            await barney.send("fred@example.com", b"and back")
            async with asyncio.timeout(scaled(10)):
                assert (await fred.receive()).content == b"and back"

            # A new endpoint attaches and exchanges data with an old session.
            async with await client(port, trust, "wilma@example.com", "wilma-2") as wilma_client:
                wilma = await wilma_client.attach("wilma@example.com")
                await fred.send("wilma@example.com", b"welcome")
                async with asyncio.timeout(scaled(10)):
                    assert (await wilma.receive()).content == b"welcome"

            # A bad change (a key of another certificate) keeps the renewed certificate.
            other = ca.issue_cert(HOST, "example.com", "localhost", "127.0.0.1")
            tls_volume.write({CERT: pems(other)[CERT], KEY: pems(first)[KEY]})

            async with httpx.AsyncClient(timeout=scaled(5.0)) as http:

                async def failure_counted() -> bool:
                    text = (await http.get(metrics_url)).text
                    return (
                        metric(
                            text,
                            "apexmesh_relay_material_reloads_total",
                            material="tls",
                            result="failed",
                        )
                        >= 1
                    )

                await until(failure_counted, "the bad key is counted as a failed reload")
                text = (await http.get(metrics_url)).text
            assert (
                metric(text, "apexmesh_relay_material_reloads_total", material="tls", result="ok")
                == 1
            )
            assert (
                metric(text, "apexmesh_relay_material_reloads_total", material="sasl", result="ok")
                == 1
            )
            assert await served_certificate(port, trust) == first_der(renewed)
            assert "cannot reload tls" in relay.stderr()

            # No restart: the same process served everything.
            assert relay.process.poll() is None
            assert relay.process.pid == pid
            await fred_client.close()
            await barney_client.close()
        finally:
            assert await asyncio.to_thread(relay.stop) == 0


def first_der(issued: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(issued.cert_chain_pems[0].bytes().decode())


@pytest.mark.timeout(120)
async def test_sighup_reloads_at_once_when_polling_is_off(
    locked_redis: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    """``APEXMESH_RELAY_RELOAD_SECONDS=0``: the files are looked at on SIGHUP only."""
    ca = trustme.CA()
    tls_volume, sasl_volume = SecretVolume(tmp_path / "tls"), SecretVolume(tmp_path / "sasl")
    tls_volume.write(pems(ca.issue_cert(HOST, "localhost", "127.0.0.1")))
    sasl_volume.write({SASL: credentials({"fred@example.com": "flintstone"})})
    trust = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(trust)
    async with access_service(locked_redis, keys, tmp_path) as access_port:
        env = relay_env(
            locked_redis.url,
            keys,
            tmp_path,
            access_port,
            tls_volume.path(CERT),
            tls_volume.path(KEY),
        )
        env |= {
            "APEXMESH_RELAY_SASL_FILE": str(sasl_volume.path(SASL)),
            "APEXMESH_RELAY_RELOAD_SECONDS": "0",
        }
        relay = ServiceProcess("services.relay", env, tmp_path / "relay.log")
        info = await asyncio.to_thread(relay.start)
        port = info["edge_port"]
        try:
            sasl_volume.write({SASL: credentials({"fred@example.com": "flintstone-2"})})
            # not looked at without the signal: the old password still works
            await (await session(port, trust, "fred@example.com", "flintstone")).close()
            relay.process.send_signal(signal.SIGHUP)

            async def reloaded() -> bool:
                return "reloaded sasl: 1 identities" in relay.stderr()

            await until(reloaded, "SIGHUP reloads the credentials")
            await (await session(port, trust, "fred@example.com", "flintstone-2")).close()
            assert relay.process.poll() is None
        finally:
            assert await asyncio.to_thread(relay.stop) == 0
