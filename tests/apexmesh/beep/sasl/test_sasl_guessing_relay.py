"""Issue #34: password guessing across BEEP sessions meets the throttle
(apexmesh/beep/sasl/throttle.py), end to end: a relay in production settings
(tests/support/secure.py: TLS, then SCRAM-SHA-256, real sockets), a guesser that opens a
new session for every try from one loopback address, and honest users on others
(127.0.0.0/8 is all loopback: a client picks its source address).

Before the fix the answer to every guess came at once (the delay only held the next read
of a session the guesser had already left): 50 wrong passwords, 50 fast 535s.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest

from apexmesh.aio import AuthenticationError, BeepConnection, ConnectionClosedError, connect
from apexmesh.beep.sasl import SaslClientExchange
from apexmesh.beep.sasl.throttle import ThrottlePolicy
from apexmesh.store.keys import Keys
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer
from tests.support.secure import HOST, PASSWORDS, SecureRelay, secure_relay

pytestmark = pytest.mark.integration

FRED: Final = "fred@example.com"
#: Holds small enough for a test, the shape of the defaults (doubling to a cap).
BASE_MS: Final = 10
MAX_MS: Final = 320
#: Timers fire a little early or late; a hold is measured from the client's side.
SLACK: Final = 0.005


@contextlib.asynccontextmanager
async def tls_session(pod: SecureRelay, source: str) -> AsyncIterator[BeepConnection]:
    """A new BEEP session from ``source``, tuned to TLS; closed on exit."""
    conn = await connect(
        "127.0.0.1",
        pod.port,
        ssl_context=pod.client_context(),
        server_hostname=HOST,
        local_host=source,
    )
    try:
        await conn.start_tls()
        yield conn
    finally:
        await conn.close(timeout=scaled(2.0))


async def attempt(pod: SecureRelay, source: str, identity: str, password: str) -> tuple[int, float]:
    """One guess in a session of its own: (reply code, seconds from the SASL start to the
    verdict). 250 stands for success."""
    async with tls_session(pod, source) as conn:
        exchange = SaslClientExchange(
            "SCRAM-SHA-256", authcid=identity, password=password, host=HOST
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await conn.authenticate("SCRAM-SHA-256", exchange)
        except AuthenticationError as failed:
            return int(failed.code or 0), loop.time() - started
        except ConnectionClosedError as closed:
            return int(closed.code or 0), loop.time() - started
        return 250, loop.time() - started


def guessing_env(**overrides: int) -> dict[str, str]:
    settings = {
        "DELAY_MS": BASE_MS,
        "MAX_DELAY_MS": MAX_MS,
        "MAX_FAILURES": 3,
        "REFUSE_AFTER": 1000,
        "IDENTITY_AFTER": 1000,
        **overrides,
    }
    return {f"APEXMESH_RELAY_SASL_{name}": str(value) for name, value in settings.items()}


def policy_of(pod: SecureRelay) -> ThrottlePolicy:
    return pod.relay.settings.sasl_throttle


async def test_fifty_guesses_in_fifty_sessions_from_one_address_are_slowed(
    locked_redis: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with secure_relay(locked_redis, keys, tmp_path, guessing_env()) as pod:
        policy = policy_of(pod)
        results = [await attempt(pod, "127.0.0.11", FRED, f"guess-{n}") for n in range(1, 51)]
        assert [code for code, _ in results] == [535] * 50
        # Each verdict waited its hold, in a new session every time: 10, 20, 40 ... 320 ms.
        waits = [waited for _, waited in results]
        for n, waited in enumerate(waits, start=1):
            assert waited >= policy.delay(n) - SLACK, (n, waited)
        # The guesser's time spent waiting for verdicts (what the throttle governs; the
        # TCP and TLS set-up of each session come on top): at the first five's pace the
        # fifty would take ten times as long, they take more than half as long again
        # (without the throttle: about ten times, each verdict as quick as the first).
        assert sum(waits) >= 15 * sum(waits[:5]), (sum(waits), sum(waits[:5]))
        # The right password still works, at once, from another address.
        code, waited = await attempt(pod, "127.0.0.12", FRED, PASSWORDS[FRED])
        assert code == 250
        assert waited < 5.0


async def test_an_unknown_user_meets_the_same_throttle_as_a_known_one(
    locked_redis: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with secure_relay(locked_redis, keys, tmp_path, guessing_env()) as pod:
        policy = policy_of(pod)
        known = [await attempt(pod, "127.0.0.21", FRED, f"guess-{n}") for n in range(6)]
        unknown = [
            await attempt(pod, "127.0.0.22", "nobody@example.com", f"guess-{n}") for n in range(6)
        ]
        assert [code for code, _ in known] == [code for code, _ in unknown] == [535] * 6
        for n, ((_, waited_known), (_, waited_unknown)) in enumerate(
            zip(known, unknown, strict=True), start=1
        ):
            assert waited_known >= policy.delay(n) - SLACK
            assert waited_unknown >= policy.delay(n) - SLACK
        # and the next session of either address is refused alike once past the limit
        # (the refusal test below); the error text is the same generic one:
        async with tls_session(pod, "127.0.0.22") as conn:
            exchange = SaslClientExchange(
                "SCRAM-SHA-256", authcid="nobody@example.com", password="x", host=HOST
            )
            with pytest.raises(AuthenticationError) as failed:
                await conn.authenticate("SCRAM-SHA-256", exchange)
        assert str(failed.value).endswith("535 authentication failure")


async def test_past_the_limit_an_address_is_refused_before_any_password_is_checked(
    locked_redis: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    env = guessing_env(REFUSE_AFTER=4)
    async with secure_relay(locked_redis, keys, tmp_path, env) as pod:
        codes = [(await attempt(pod, "127.0.0.31", FRED, f"guess-{n}"))[0] for n in range(4)]
        assert codes == [535] * 4
        # The right password from the guessing address: 421, unchecked; the guesser
        # cannot tell a right guess from a wrong one.
        async with tls_session(pod, "127.0.0.31") as conn:
            exchange = SaslClientExchange(
                "SCRAM-SHA-256", authcid=FRED, password=PASSWORDS[FRED], host=HOST
            )
            with pytest.raises(AuthenticationError) as refused:
                await conn.authenticate("SCRAM-SHA-256", exchange)
            assert refused.value.code == 421
            assert "too many failed authentications" in str(refused.value)
            async with asyncio.timeout(scaled(5)):
                ended = await conn.closed
            assert getattr(ended, "code", None) == 421
        # Fred from his own address is not locked out.
        assert (await attempt(pod, "127.0.0.32", FRED, PASSWORDS[FRED]))[0] == 250


async def test_an_identity_guessed_from_many_addresses_is_slowed(
    locked_redis: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    env = guessing_env(IDENTITY_AFTER=3, DELAY_MS=100, MAX_DELAY_MS=400)
    async with secure_relay(locked_redis, keys, tmp_path, env) as pod:
        waits = [(await attempt(pod, f"127.0.1.{n}", FRED, f"guess-{n}"))[1] for n in range(1, 7)]
        # every address fails once (100 ms each); fred's 4th, 5th and 6th failures are
        # held by the identity rule: 100, 200, 400 ms
        assert waits[3] >= 0.1 - SLACK
        assert waits[4] >= 0.2 - SLACK
        assert waits[5] >= 0.4 - SLACK
        # and never refused: fred himself gets in from yet another address
        assert (await attempt(pod, "127.0.2.1", FRED, PASSWORDS[FRED]))[0] == 250
