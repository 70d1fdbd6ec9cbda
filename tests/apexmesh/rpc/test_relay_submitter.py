"""The relays' Submit client against real gRPC servers: which failures are retried,
where, with which submission id, and how many Submits are out at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest

from apexmesh.rpc.relay import RelaySubmitter, SubmitSource
from apexmesh.rpc.retry import RetryPolicy
from tests.support.fake_relay import ScriptedRelay, scripted_relays
from tests.support.polling import still_true, wait_until
from tests.support.redis_server import free_port

pytestmark = pytest.mark.integration


@asynccontextmanager
async def submitter(
    addresses: list[str], attempts: int = 4, **options: object
) -> AsyncIterator[RelaySubmitter]:
    """A submitter that retries at once (no backoff), ``attempts`` times at most."""
    policy = RetryPolicy(attempts=attempts, first_backoff_seconds=0.0)
    client = RelaySubmitter(addresses, timeout=2.0, policy=policy, **options)  # type: ignore[arg-type]
    try:
        yield client
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    ],
)
async def test_a_cut_off_call_is_retried_on_the_same_relay_with_its_id(
    code: grpc.StatusCode,
) -> None:
    first, second = ScriptedRelay(code, code), ScriptedRelay(code, code)
    async with scripted_relays(first, second) as addresses, submitter(addresses) as client:
        outcome = await client.submit("apex=pubsub@example.com", b"x", key="k", submission_id="s1")
    called = first if first.calls else second
    assert outcome.code == 250
    assert called.calls == ["s1", "s1", "s1"]  # same relay, same id: it relays once
    assert list(called.relayed) == ["s1"]
    assert not (second if called is first else first).calls


async def test_without_an_id_a_cut_off_call_is_not_retried() -> None:
    relay = ScriptedRelay(grpc.StatusCode.INTERNAL)
    async with scripted_relays(relay) as addresses, submitter(addresses) as client:
        outcome = await client.submit("apex=presence@example.com", b"x")
    assert (outcome.code, outcome.source) == (451, SubmitSource.ABORTED)
    assert relay.calls == [""]


async def test_attempts_are_bounded_and_the_last_code_is_answered() -> None:
    relay = ScriptedRelay(*[grpc.StatusCode.DEADLINE_EXCEEDED] * 10)
    seen: list[tuple[str, str]] = []
    async with (
        scripted_relays(relay) as addresses,
        submitter(addresses, attempts=3, observe=lambda a, o: seen.append((a, o))) as client,
    ):
        outcome = await client.submit("apex=pubsub@example.com", b"x", submission_id="s2")
    assert (outcome.code, outcome.source) == (451, SubmitSource.ABORTED)
    assert relay.calls == ["s2"] * 3
    assert [o for _, o in seen] == ["failed", "failed", "failed", "gave-up"]


async def test_an_unavailable_relay_is_skipped_with_the_same_id() -> None:
    relay = ScriptedRelay()
    async with scripted_relays(relay) as addresses:
        dead = f"127.0.0.1:{free_port()}"
        async with submitter([dead, *addresses]) as client:
            outcome = await client.submit(
                "apex=pubsub@example.com", b"x", key="fixed", submission_id="s3"
            )
    assert outcome.code == 250
    assert relay.calls == ["s3"]


async def test_no_relay_reachable_is_421_after_bounded_rounds() -> None:
    dead = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    seen: list[str] = []
    async with submitter(dead, attempts=4, observe=lambda _a, o: seen.append(o)) as client:
        outcome = await client.submit("apex=pubsub@example.com", b"x", submission_id="s4")
    assert (outcome.code, outcome.source) == (421, SubmitSource.UNAVAILABLE)
    assert seen == ["unavailable"] * 4 + ["gave-up"]


async def test_a_shared_limit_bounds_the_submits_out_at_once() -> None:
    hold = asyncio.Event()
    relay = ScriptedRelay(hold=hold)
    limit = asyncio.Semaphore(3)
    async with scripted_relays(relay) as addresses, submitter(addresses, limit=limit) as client:
        calls = [
            asyncio.ensure_future(client.submit("apex=pubsub@example.com", b"x")) for _ in range(10)
        ]
        await wait_until(lambda: relay.inflight == 3, what="three submits held in flight")
        # Nothing more gets through while the three are held.
        await still_true(lambda: relay.inflight == 3, 0.05)
        hold.set()
        outcomes = await asyncio.gather(*calls)
    assert [o.code for o in outcomes] == [250] * 10
    assert relay.peak == 3


async def test_a_relay_of_an_earlier_version_gets_unary_submits_retried_alike() -> None:
    relay = ScriptedRelay(grpc.StatusCode.UNKNOWN, streams=False)
    async with scripted_relays(relay) as addresses, submitter(addresses) as client:
        outcome = await client.submit("apex=pubsub@example.com", b"x", submission_id="s9")
    assert outcome.code == 250
    assert relay.calls == ["s9", "s9"]  # unary, cut off once, retried with its id
    assert relay.batches == 0
