"""The relay's security defaults against a running pod in production settings
(tests/support/secure.py): privacy required before anything else (RFC 3080 sections 3
and 9), SASL failures throttled (RFC 4422 section 6.2), DIGEST-MD5 for every name the
relay answers to, and the SDK's errors carrying the relay's code and reason."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from apexmesh.aio import AuthenticationError, ChannelStartError, ConnectionClosedError, connect
from apexmesh.beep.sasl import SaslClientExchange
from apexmesh.beep.tuning import TLS_PROFILE, sasl_profile
from apexmesh.client import connect_endpoint
from apexmesh.store.keys import Keys
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer
from tests.support.secure import HOST, PASSWORDS, SecureRelay, secure_relay

pytestmark = pytest.mark.integration

APEX = "http://iana.org/beep/APEX"


@pytest.fixture
async def pod(locked_redis: RedisServer, keys: Keys, tmp_path: Path) -> AsyncIterator[SecureRelay]:
    async with secure_relay(locked_redis, keys, tmp_path) as running:
        yield running


async def test_before_tls_the_greeting_offers_only_tls(pod: SecureRelay) -> None:
    conn = await connect("127.0.0.1", pod.port)
    try:
        assert conn.greeting.result().profiles == (TLS_PROFILE,)
        with pytest.raises(ChannelStartError) as apex:
            await conn.open_channel(APEX)
        assert apex.value.code == 550
        exchange = SaslClientExchange(
            "PLAIN", authcid="fred@example.com", password="flintstone", host=HOST
        )
        with pytest.raises(AuthenticationError) as plain:
            await conn.authenticate("PLAIN", exchange)
        assert plain.value.code == 538
    finally:
        await conn.close()


async def test_after_tls_apex_and_sasl_are_offered(pod: SecureRelay) -> None:
    conn = await pod.session()
    try:
        offered = conn.greeting.result().profiles
        assert APEX in offered
        assert sasl_profile("SCRAM-SHA-256") in offered
        assert TLS_PROFILE not in offered
    finally:
        await conn.close()


async def test_an_authenticated_endpoint_exchanges_data(pod: SecureRelay) -> None:
    async with (
        await pod.client("fred@example.com") as one,
        await pod.client("barney@example.com", "DIGEST-MD5") as two,
    ):
        fred = await one.attach("fred@example.com")
        barney = await two.attach("barney@example.com")
        await fred.send("barney@example.com", b"over TLS")
        async with asyncio.timeout(scaled(5)):
            assert (await barney.receive()).content == b"over TLS"


async def test_digest_md5_accepts_the_pods_host_name(pod: SecureRelay) -> None:
    # Vortex builds digest-uri from the host it dialled: beep/relay1.example.com.
    client = await connect_endpoint(
        "127.0.0.1",
        pod.port,
        ssl_context=pod.client_context(),
        server_hostname=HOST,
        sasl=("DIGEST-MD5", "wilma@example.com", PASSWORDS["wilma@example.com"]),
    )
    async with client:
        await client.attach("wilma@example.com")


async def test_sasl_failures_are_throttled_logged_counted_then_closed_with_421(
    pod: SecureRelay, caplog: pytest.LogCaptureFixture
) -> None:
    conn = await pod.session()
    codes: list[int] = []
    waits: list[float] = []
    loop = asyncio.get_running_loop()
    with caplog.at_level("WARNING", logger="apexmesh.audit"):
        for _ in range(2):
            exchange = SaslClientExchange(
                "SCRAM-SHA-256", authcid="fred@example.com", password="guess", host=HOST
            )
            started = loop.time()
            with pytest.raises(AuthenticationError) as failed:
                await conn.authenticate("SCRAM-SHA-256", exchange)
            waits.append(loop.time() - started)
            codes.append(int(failed.value.code or 0))
            assert "authentication failure" in str(failed.value)
        # the third failure (APEXMESH_RELAY_SASL_MAX_FAILURES=3) closes the session
        exchange = SaslClientExchange(
            "SCRAM-SHA-256", authcid="fred@example.com", password="guess", host=HOST
        )
        with pytest.raises((AuthenticationError, ConnectionClosedError)):
            await conn.authenticate("SCRAM-SHA-256", exchange)
        async with asyncio.timeout(scaled(5)):
            ended = await conn.closed
    assert codes == [535, 535]
    # the second attempt waited out the delay of the first failure (50 ms)
    assert waits[1] >= 0.04
    assert getattr(ended, "code", None) == 421
    lines = [r.getMessage() for r in caplog.records if "authentication failed" in r.getMessage()]
    assert len(lines) == 3
    assert all("SCRAM-SHA-256" in line and "127.0.0.1" in line for line in lines)
    assert "reply code 535" in lines[0]
    assert "session held" in lines[0]
    assert "session closed" in lines[2]
    metrics = generate_latest(pod.relay.registry).decode()
    assert 'apexmesh_auth_failures_total{mechanism="SCRAM-SHA-256",service="relay"} 3.0' in metrics


async def test_a_new_session_from_a_guessing_address_is_closed_at_its_first_failure(
    pod: SecureRelay,
) -> None:
    for _ in range(3):
        conn = await pod.session()
        exchange = SaslClientExchange(
            "DIGEST-MD5", authcid="fred@example.com", password="guess", host=HOST
        )
        with pytest.raises((AuthenticationError, ConnectionClosedError)):
            await conn.authenticate("DIGEST-MD5", exchange)
        await conn.close()
    conn = await pod.session()
    exchange = SaslClientExchange(
        "DIGEST-MD5", authcid="fred@example.com", password="guess", host=HOST
    )
    with pytest.raises((AuthenticationError, ConnectionClosedError)):
        await conn.authenticate("DIGEST-MD5", exchange)
    async with asyncio.timeout(scaled(5)):
        ended = await conn.closed
    assert getattr(ended, "code", None) == 421


async def test_the_relay_reads_its_certificate_names(pod: SecureRelay) -> None:
    assert {HOST, "example.com", "localhost", "127.0.0.1"} <= set(pod.relay.settings.host_names)
    assert pod.relay.settings.require_privacy
    assert not pod.relay.settings.dev
