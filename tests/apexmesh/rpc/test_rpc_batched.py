"""Unary calls batched over one stream (apexmesh/rpc/batched.py), against real gRPC
servers: calls in flight share stream messages, each call keeps the unary contract
(its response, its own failure code, its deadline), a broken stream tells "reached
nobody" from "cut off", and a callee without the stream gets unary calls."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest
from prometheus_client import CollectorRegistry

from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from apexmesh.ops.logs import correlation_id
from apexmesh.rpc.batched import BatchedCaller, serve_batched
from apexmesh.rpc.channels import RECOVERY_OPTIONS, internal_channel
from apexmesh.rpc.server import ACCEPTED_PING_INTERVAL_MS, create_server
from tests.support.fake_relay import ScriptedRelay, scripted_relays
from tests.support.polling import scaled, still_true, wait_until

pytestmark = pytest.mark.integration

Caller = BatchedCaller[relay_pb2.SubmitRequest, relay_pb2.SubmitResponse]


@asynccontextmanager
async def caller_of(address: str) -> AsyncIterator[Caller]:
    channel = internal_channel(address)
    stub = relay_pb2_grpc.RelayServiceStub(channel)
    caller: Caller = BatchedCaller(
        stub.SubmitStream, stub.Submit, relay_pb2.SubmitResponse.FromString, name="test"
    )
    try:
        yield caller
    finally:
        await caller.aclose()
        await channel.close()


def request(n: int) -> relay_pb2.SubmitRequest:
    return relay_pb2.SubmitRequest(originator="apex=pubsub@example.com", submission_id=f"s{n}")


async def settle(calls: list[asyncio.Future[relay_pb2.SubmitResponse]]) -> list[object]:
    return list(await asyncio.gather(*calls, return_exceptions=True))


def code_of(outcome: object) -> object:
    if isinstance(outcome, grpc.aio.AioRpcError):
        return outcome.code()
    assert isinstance(outcome, relay_pb2.SubmitResponse)
    return outcome.status.code


async def test_calls_in_flight_share_stream_messages() -> None:
    relay = ScriptedRelay()
    async with scripted_relays(relay) as (address,), caller_of(address) as caller:
        outcomes = await settle(
            [asyncio.ensure_future(caller.call(request(n), timeout=scaled(5))) for n in range(500)]
        )
    assert [code_of(o) for o in outcomes] == [250] * 500
    assert sorted(relay.calls) == sorted(f"s{n}" for n in range(500))
    assert 1 <= relay.batches <= 10  # 500 calls, a handful of stream messages


async def test_an_idle_caller_sends_each_call_at_once() -> None:
    relay = ScriptedRelay()
    async with scripted_relays(relay) as (address,), caller_of(address) as caller:
        for n in range(3):
            response = await caller.call(request(n), timeout=scaled(5))
            assert response.status.code == 250
    assert relay.batches == 3


async def test_a_handler_that_aborts_fails_its_call_only() -> None:
    hold = asyncio.Event()
    relay = ScriptedRelay(grpc.StatusCode.RESOURCE_EXHAUSTED, hold=hold)
    async with scripted_relays(relay) as (address,), caller_of(address) as caller:
        calls = [
            asyncio.ensure_future(caller.call(request(n), timeout=scaled(5))) for n in range(4)
        ]
        await wait_until(lambda: relay.inflight == 4, what="4 calls in flight")
        hold.set()
        outcomes = await settle(calls)
    codes = [code_of(o) for o in outcomes]
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 1
    assert codes.count(250) == 3


async def test_a_call_not_answered_in_time_is_deadline_exceeded() -> None:
    hold = asyncio.Event()
    relay = ScriptedRelay(hold=hold)
    async with scripted_relays(relay) as (address,), caller_of(address) as caller:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await caller.call(request(1), timeout=0.2)  # held: meant to expire
        hold.set()
        # The stream outlives the call: the next one is answered on it.
        assert (await caller.call(request(2), timeout=scaled(5))).status.code == 250
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_the_correlation_id_of_each_call_reaches_its_handler() -> None:
    relay = ScriptedRelay()

    async def call_as(caller: Caller, cid: str, n: int) -> None:
        correlation_id.set(cid)
        await caller.call(request(n), timeout=scaled(5))

    async with scripted_relays(relay) as (address,), caller_of(address) as caller:
        await asyncio.gather(*(call_as(caller, f"cid-{n}", n) for n in range(20)))
    assert sorted(zip(relay.calls, relay.correlation_ids, strict=True)) == sorted(
        (f"s{n}", f"cid-{n}") for n in range(20)
    )


async def test_a_broken_stream_cuts_off_what_the_callee_took_and_then_reaches_nobody(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "apexmesh.rpc.batched")
    hold = asyncio.Event()
    relay = ScriptedRelay(hold=hold)
    async with scripted_relays(relay) as (address,), caller_of(address) as caller:
        calls = [
            asyncio.ensure_future(caller.call(request(n), timeout=scaled(5))) for n in range(3)
        ]
        await wait_until(lambda: relay.inflight == 3, what="3 calls in flight")
        # The relay goes away with the three calls in its handlers.
    outcomes = await settle(calls)
    assert {code_of(o) for o in outcomes} <= {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
    }  # cut off: the relay may have relayed them
    async with caller_of(address) as caller:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await caller.call(request(9), timeout=scaled(5))
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE  # nothing listens: nobody
    # A real failure is a WARNING with the call's details (calls were cut off).
    broke = [r for r in caplog.records if "stream broke" in r.getMessage()]
    assert broke, caplog.text
    assert all(r.levelno == logging.WARNING for r in broke)
    assert "calls cut off" in broke[0].getMessage()


async def test_a_callee_without_the_stream_gets_unary_calls() -> None:
    relay = ScriptedRelay(streams=False)
    async with scripted_relays(relay) as (address,), caller_of(address) as caller:
        outcomes = await settle(
            [asyncio.ensure_future(caller.call(request(n), timeout=scaled(5))) for n in range(5)]
        )
        later = await caller.call(request(5), timeout=scaled(5))
    assert [code_of(o) for o in outcomes] == [250] * 5
    assert later.status.code == 250
    assert sorted(relay.calls) == [f"s{n}" for n in range(6)]
    assert relay.batches == 0


class BoundedRelay(ScriptedRelay):
    """Handles at most three calls of a stream at once."""

    async def SubmitStream(  # noqa: N802
        self,
        request_iterator: AsyncIterator[common_pb2.CallBatch],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[common_pb2.CallBatch]:
        async for batch in serve_batched(
            request_iterator,
            context,
            self.Submit,
            relay_pb2.SubmitRequest.FromString,
            max_handling=3,
        ):
            yield batch


async def test_a_callee_handles_a_bounded_number_of_calls_of_a_stream_at_once() -> None:
    hold = asyncio.Event()
    relay = BoundedRelay(hold=hold)
    async with scripted_relays(relay) as (address,), caller_of(address) as caller:
        calls = [
            asyncio.ensure_future(caller.call(request(n), timeout=scaled(5))) for n in range(10)
        ]
        await wait_until(lambda: relay.inflight == 3, what="3 calls in flight")
        # Nothing more is handled while the three are held.
        await still_true(lambda: relay.inflight == 3, 0.05)
        hold.set()
        outcomes = await settle(calls)
    assert [code_of(o) for o in outcomes] == [250] * 10
    assert relay.peak == 3


async def test_batched_calls_are_counted_as_the_unary_calls_they_stand_for() -> None:
    registry = CollectorRegistry()
    relay = ScriptedRelay(grpc.StatusCode.RESOURCE_EXHAUSTED)
    server, port = await create_server(
        [lambda s: relay_pb2_grpc.add_RelayServiceServicer_to_server(relay, s)],
        registry=registry,
    )
    try:
        async with caller_of(f"127.0.0.1:{port}") as caller:
            outcomes = await settle(
                [
                    asyncio.ensure_future(caller.call(request(n), timeout=scaled(5)))
                    for n in range(6)
                ]
            )
    finally:
        await server.stop(None)
    assert sorted(map(str, map(code_of, outcomes))) == sorted(
        ["250"] * 5 + [str(grpc.StatusCode.RESOURCE_EXHAUSTED)]
    )
    service = "apexmesh.contracts.relay.v1.RelayService"
    unary = {"grpc_type": "unary", "grpc_service": service, "grpc_method": "Submit"}
    sample = registry.get_sample_value
    assert sample("grpc_server_started_total", unary) == 6
    assert sample("grpc_server_handled_total", {**unary, "grpc_code": "OK"}) == 5
    assert sample("grpc_server_handled_total", {**unary, "grpc_code": "RESOURCE_EXHAUSTED"}) == 1
    assert sample("grpc_server_handling_seconds_count", unary) == 6
    stream = {"grpc_type": "bidi_stream", "grpc_service": service, "grpc_method": "SubmitStream"}
    assert sample("grpc_server_started_total", stream) == 1


def test_servers_accept_the_keepalive_pings_of_the_mesh_clients() -> None:
    client_interval = dict(RECOVERY_OPTIONS)["grpc.keepalive_time_ms"]
    assert client_interval > ACCEPTED_PING_INTERVAL_MS


async def test_an_idle_stream_outlives_keepalive_pings() -> None:
    """The mesh's numbers scaled down 20-fold: a client pinging every second on a stream
    that carries nothing, a server accepting a ping every half second. With gRPC's
    default (a ping per five minutes) the server ends such a stream with GOAWAY
    "too_many_pings" after the third ping, and every idle stream between services broke
    once a minute."""
    relay = ScriptedRelay()
    server, port = await create_server(
        [lambda s: relay_pb2_grpc.add_RelayServiceServicer_to_server(relay, s)],
        accepted_ping_interval_ms=500,
    )
    channel = internal_channel(
        f"127.0.0.1:{port}",
        options=[
            ("grpc.keepalive_time_ms", 1000),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.http2.min_time_between_pings_ms", 1000),
            ("grpc.http2.min_sent_ping_interval_without_data_ms", 1000),
        ],
    )
    stub = relay_pb2_grpc.RelayServiceStub(channel)
    caller: Caller = BatchedCaller(
        stub.SubmitStream, stub.Submit, relay_pb2.SubmitResponse.FromString, name="idle"
    )
    try:
        assert (await caller.call(request(1), timeout=scaled(5))).status.code == 250
        # The behaviour under test: the stream stays idle past several keepalive pings.
        await asyncio.sleep(5)
        assert (await caller.call(request(2), timeout=scaled(5))).status.code == 250
    finally:
        await caller.aclose()
        await channel.close()
        await server.stop(None)
    assert relay.streams_opened == 1  # both calls on the one stream: it never broke


async def test_calls_outlive_a_callee_that_ends_connections_by_age(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The pubsub pods' connection age scaled down: connections end after about a
    second (GOAWAY, then a second of grace before the callee cuts what is still open),
    calls take 0.2 s each and a hundred are always in flight for 3.5 s. A stream opened
    just before a GOAWAY takes calls for 0.3 s more, answered within 0.2 s after that:
    half a second of the grace to spare for a loaded machine (with half a second of
    grace there was none, and it failed once in a full suite run). A stream
    kept for the caller's life was cut at every connection's end, its calls failing
    ``UNKNOWN`` ("max connection age"); streams retired after 0.3 s drain on the old
    connection while the next stream opens on a new one, and every call succeeds."""
    relay = ScriptedRelay(latency=0.2)
    server, port = await create_server(
        [lambda s: relay_pb2_grpc.add_RelayServiceServicer_to_server(relay, s)],
        options=[
            ("grpc.max_connection_age_ms", 1000),
            ("grpc.max_connection_age_grace_ms", 1000),
        ],
    )
    channel = internal_channel(f"127.0.0.1:{port}")
    stub = relay_pb2_grpc.RelayServiceStub(channel)
    caller: Caller = BatchedCaller(
        stub.SubmitStream,
        stub.Submit,
        relay_pb2.SubmitResponse.FromString,
        name="aged",
        stream_seconds=0.3,
        drain_seconds=5.0,
    )
    outcomes: list[object] = []
    numbers = iter(range(1_000_000))

    async def keep_calling(until_time: float) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < until_time:
            try:
                outcomes.append(
                    code_of(await caller.call(request(next(numbers)), timeout=scaled(5)))
                )
            except grpc.aio.AioRpcError as exc:
                outcomes.append(exc.code())

    try:
        end = asyncio.get_running_loop().time() + 3.5
        await asyncio.gather(*(keep_calling(end) for _ in range(100)))
    finally:
        await caller.aclose()
        await channel.close()
        await server.stop(None)
    failures = [outcome for outcome in outcomes if outcome != 250]
    assert len(outcomes) > 1_000
    assert failures == []
    assert relay.streams_opened >= 3  # it did rotate
    # The normal rotation is no WARNING (it was one on every 60 s connection age).
    warned = [r for r in caplog.records if r.name == "apexmesh.rpc.batched" and r.levelno >= 30]
    assert not warned, caplog.text


async def test_a_call_after_the_channel_closed_fails_and_leaves_no_task_error() -> None:
    """A service stopping closes its channels while calls may still come (a journal
    entry redone, a late delivery). Such a call fails with an RpcError; the stream task
    it started does not die of grpc's UsageError "Channel is closed." (76 "Task
    exception was never retrieved" lines in one relay's log at the end of a bench)."""
    reported: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        async with scripted_relays(ScriptedRelay()) as [address]:
            channel = internal_channel(address)
            stub = relay_pb2_grpc.RelayServiceStub(channel)
            caller: Caller = BatchedCaller(
                stub.SubmitStream, stub.Submit, relay_pb2.SubmitResponse.FromString, name="late"
            )
            await channel.close()
            try:
                with pytest.raises(grpc.RpcError):
                    await caller.call(request(1), timeout=scaled(5))
            finally:
                await caller.aclose()
        gc.collect()
        await asyncio.sleep(0)  # the loop reports an unretrieved task error on a later turn
    finally:
        loop.set_exception_handler(None)
    assert [c.get("message") for c in reported] == []
