"""Issue #29, BEEP SASL, against a relay in production settings (tests/support/secure.py)
over real TCP and TLS:

- CRAM-MD5 (RFC 2195) is offered only when the operator asks for it
  (``APEXMESH_RELAY_SASL_CRAM_MD5=1``), and then authenticates an endpoint that
  exchanges data;
- DIGEST-MD5 accepts ``beep/<address>`` for the address the session was made to, an
  address the relay listens on that neither its certificate nor a setting names.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final

import pytest

from apexmesh.aio import AuthenticationError, BeepConnection, connect
from apexmesh.beep.sasl import SaslClientExchange
from apexmesh.beep.tuning import sasl_profile
from apexmesh.client import connect_endpoint
from apexmesh.store.keys import Keys
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer
from tests.support.secure import HOST, PASSWORDS, SecureRelay, secure_relay

pytestmark = pytest.mark.integration

CRAM_ON: Final = {"APEXMESH_RELAY_SASL_CRAM_MD5": "1"}
#: A loopback address of its own for the relay's apex-edge listener: not in the
#: certificate (relay1.example.com, example.com, localhost, 127.0.0.1), not configured.
EDGE_ADDRESS: Final = "127.0.0.7"


async def refused_with(
    conn: BeepConnection, mechanism: str, identity: str, password: str, host: str = HOST
) -> int:
    """The code a SASL exchange on ``conn`` fails with (250 when it succeeds); closes
    ``conn``."""
    try:
        exchange = SaslClientExchange(mechanism, authcid=identity, password=password, host=host)
        try:
            await conn.authenticate(mechanism, exchange)
        except AuthenticationError as failed:
            return int(failed.code or 0)
        return 250
    finally:
        await conn.close()


async def offered(pod: SecureRelay) -> tuple[str, ...]:
    conn = await pod.session()
    try:
        return conn.greeting.result().profiles
    finally:
        await conn.close()


async def test_cram_md5_is_off_unless_configured(
    locked_redis: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with secure_relay(locked_redis, keys, tmp_path) as pod:
        assert sasl_profile("CRAM-MD5") not in await offered(pod)
        assert pod.relay.settings.sasl_mechanisms == ("SCRAM-SHA-256", "DIGEST-MD5", "PLAIN")
        conn = await pod.session()
        # mechanism not available
        assert await refused_with(conn, "CRAM-MD5", "fred@example.com", "flintstone") == 550


async def test_cram_md5_authenticates_an_endpoint_over_tcp_and_tls(
    locked_redis: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with secure_relay(locked_redis, keys, tmp_path, CRAM_ON) as pod:
        profiles = await offered(pod)
        assert sasl_profile("CRAM-MD5") in profiles
        assert pod.relay.settings.sasl_mechanisms == (
            "SCRAM-SHA-256",
            "DIGEST-MD5",
            "CRAM-MD5",
            "PLAIN",
        )
        async with (
            await pod.client("fred@example.com", "CRAM-MD5") as one,
            await pod.client("barney@example.com") as two,
        ):
            fred = await one.attach("fred@example.com")
            barney = await two.attach("barney@example.com")
            await fred.send("barney@example.com", b"after CRAM-MD5")
            async with asyncio.timeout(scaled(10)):
                assert (await barney.receive()).content == b"after CRAM-MD5"
        # a wrong password is the usual generic 535
        conn = await pod.session()
        assert await refused_with(conn, "CRAM-MD5", "wilma@example.com", "wrong") == 535


async def test_cram_md5_is_refused_before_tls(
    locked_redis: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with secure_relay(locked_redis, keys, tmp_path, CRAM_ON) as pod:
        conn = await connect("127.0.0.1", pod.port)
        assert await refused_with(conn, "CRAM-MD5", "fred@example.com", "flintstone") == 538


async def test_digest_md5_accepts_the_address_the_relay_listens_on(
    locked_redis: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    env = {"APEXMESH_RELAY_EDGE_HOST": EDGE_ADDRESS}
    async with secure_relay(locked_redis, keys, tmp_path, env) as pod:
        names = pod.relay.settings.host_names
        assert EDGE_ADDRESS not in names  # neither certificate nor setting names it
        results = {}
        for digest_host in (EDGE_ADDRESS, "127.0.0.8"):
            conn = await connect(
                EDGE_ADDRESS, pod.port, ssl_context=pod.client_context(), server_hostname=HOST
            )
            await conn.start_tls()
            wilma = "wilma@example.com"
            # digest-uri beep/<digest_host>
            results[digest_host] = await refused_with(
                conn, "DIGEST-MD5", wilma, PASSWORDS[wilma], host=digest_host
            )
        # the address dialled is accepted; another address of the host is not
        assert results == {EDGE_ADDRESS: 250, "127.0.0.8": 535}
        # and the SDK's client, dialling the address, attaches
        client = await connect_endpoint(
            EDGE_ADDRESS,
            pod.port,
            ssl_context=pod.client_context(),
            server_hostname=HOST,
            sasl=("DIGEST-MD5", "barney@example.com", PASSWORDS["barney@example.com"]),
        )
        async with client:
            await client.attach("barney@example.com")
