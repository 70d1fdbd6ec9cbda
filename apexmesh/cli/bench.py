"""``apexctl bench``: load a running mesh as endpoints and print rates and latency
percentiles (as ``nats bench``), with a progress bar.

The shapes are the project's benches' (bench/relay_throughput.py, bench/pubsub_fanout.py),
run against whatever mesh the context names, with TLS and SASL as any endpoint:

* ``bench pub TOPIC --as E``: publications of ``--size`` octets to a topic of E's domain,
  ``--in-flight`` unanswered at once (each answered when the relay took it into custody);
  the rate of answered publications and each one's answer time;
* ``bench sub TOPIC --as E --sub-as S``: the same publications with S subscribed (on
  another ready relay pod when the domain has several): deliveries per second and each
  publication's time from send to delivery;
* ``bench request TO --as E``: data with a statusRequest (RFC 3340 section 5.1) to TO,
  ``--in-flight`` at once, each timed until its statusResponse: request-reply round trips
  per second, every one checked 250.

The first 8 octets of each content carry its send time (``perf_counter_ns``, this
process's clock), so latencies need no clock agreement. Percentiles are p50, p90, p99,
p99.9 and the maximum, in milliseconds. ``--json`` prints the figures only.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)

from apexmesh.aio.tasks import within
from apexmesh.apex.endpoint import Endpoint
from apexmesh.cli import traffic
from apexmesh.cli.base import app, fail, mesh, options, run, show
from apexmesh.cli.output import Format, err
from apexmesh.client.pubsub import PubsubClient
from apexmesh.ops.adminclient import AdminClient
from apexmesh.ops.targets import Context

bench_app = typer.Typer(help="Load the mesh: rates and latency percentiles.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

_STAMP = struct.Struct("!Q")


def content(size: int) -> bytes:
    """A content of ``size`` octets (at least 8) stamped with its send time."""
    return _STAMP.pack(time.perf_counter_ns()) + b"." * max(0, size - _STAMP.size)


def sent_at(body: bytes) -> int:
    return int(_STAMP.unpack_from(body)[0])


def percentiles(latencies_ns: list[int]) -> dict[str, float]:
    """p50, p90, p99, p99.9 and max in milliseconds (nearest rank)."""
    if not latencies_ns:
        return {}
    ordered = sorted(latencies_ns)

    def rank(q: float) -> float:
        index = min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))
        return round(ordered[index] / 1e6, 3)

    return {
        "p50_ms": rank(0.50),
        "p90_ms": rank(0.90),
        "p99_ms": rank(0.99),
        "p999_ms": rank(0.999),
        "max_ms": round(ordered[-1] / 1e6, 3),
    }


@dataclass
class Run:
    """One bench's counts and timings."""

    name: str
    count: int
    done: int = 0
    failed: int = 0
    latencies: list[int] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    ended: float = 0.0

    def figures(self, **extra: Any) -> dict[str, Any]:
        seconds = (self.ended or time.perf_counter()) - self.started
        return {
            "bench": self.name,
            "count": self.count,
            "done": self.done,
            "failed": self.failed,
            "seconds": round(seconds, 3),
            "rate_per_s": round(self.done / seconds, 1) if seconds > 0 else 0.0,
            **percentiles(self.latencies),
            **extra,
        }


def _nothing(_: int = 1) -> None:
    """The progress of a bench whose output is for a script (``--json``)."""


@contextlib.contextmanager
def progress_of(run_: Run, quiet: bool) -> Iterator[Callable[..., None]]:
    """A progress bar on stderr, advanced with the returned function."""
    if quiet:
        yield _nothing
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task(run_.name, total=run_.count)
        yield lambda n=1: bar.advance(task, n)


async def _pipelined(count: int, in_flight: int, one: Callable[[int], Awaitable[None]]) -> None:
    """Run ``one(i)`` for i < count with at most ``in_flight`` at once."""
    window = asyncio.Semaphore(in_flight)
    tasks: set[asyncio.Task[None]] = set()

    async def guarded(i: int) -> None:
        try:
            await one(i)
        finally:
            window.release()

    for i in range(count):
        await window.acquire()
        task = asyncio.ensure_future(guarded(i))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)


As = Annotated[str, typer.Option("--as", help="The endpoint that sends.")]
Count = Annotated[int, typer.Option(help="How many data.")]
Size = Annotated[int, typer.Option(help="Octets of each content (>= 8).")]
InFlight = Annotated[int, typer.Option(help="Data sent and not answered at once.")]


def _go(ctx: typer.Context, work: Callable[[Context, AdminClient], Awaitable[Run]]) -> None:
    with mesh(ctx) as context:

        async def go() -> Run:
            async with AdminClient(context, timeout=options(ctx).timeout) as admin:
                return await work(context, admin)

        result = run(go())
    figures = result.figures()
    show(ctx, figures, title=result.name)
    if result.failed or result.done < result.count:
        raise typer.Exit(1)


def _quiet(ctx: typer.Context) -> bool:
    return options(ctx).fmt is not Format.TABLE


@bench_app.command("pub")
def bench_pub(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="A topic of the sender's domain.")],
    sender: As,
    count: Count = 10_000,
    size: Size = 256,
    in_flight: InFlight = 100,
) -> None:
    """Publish COUNT data to TOPIC: publications answered per second, answer times."""
    _check(size)

    async def work(context: Context, admin: AdminClient) -> Run:
        domain = Endpoint.parse(sender).domain
        relay = (await traffic.ready_relays(admin, context, domain))[0]
        credentials = traffic.Credentials(context)
        result = Run(f"pub {topic}@{domain} via {relay.name}", count)
        async with traffic.attached(context, credentials, sender, relay) as (attachment, _):
            pubsub = PubsubClient(attachment, domain=domain)
            try:
                with progress_of(result, _quiet(ctx)) as advance:

                    async def one(_: int) -> None:
                        began = time.perf_counter_ns()
                        try:
                            await pubsub.publish(topic, content(size), confirm=False)
                        except Exception:  # noqa: BLE001  (counted as a failure)
                            result.failed += 1
                        else:
                            result.done += 1
                            result.latencies.append(time.perf_counter_ns() - began)
                        advance()

                    result.started = time.perf_counter()
                    await _pipelined(count, in_flight, one)
                    result.ended = time.perf_counter()
            finally:
                await pubsub.aclose()
        return result

    _go(ctx, work)


@bench_app.command("sub")
def bench_sub(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="A topic of the sender's domain.")],
    sender: As,
    subscriber: Annotated[str, typer.Option("--sub-as", help="The endpoint that subscribes.")],
    count: Count = 10_000,
    size: Size = 256,
    in_flight: InFlight = 100,
    wait: Annotated[float, typer.Option(help="Seconds to wait for the last delivery.")] = 30.0,
) -> None:
    """Publish COUNT data to TOPIC with a subscriber: deliveries per second, send-to-
    delivery times."""
    _check(size)

    async def work(context: Context, admin: AdminClient) -> Run:
        domain = Endpoint.parse(sender).domain
        relays = await traffic.ready_relays(admin, context, domain)
        sub_relays = await traffic.ready_relays(admin, context, Endpoint.parse(subscriber).domain)
        sub_relay = next((r for r in sub_relays if r.name != relays[0].name), sub_relays[0])
        credentials = traffic.Credentials(context)
        result = Run(f"sub {topic}@{domain}: {relays[0].name} -> {sub_relay.name}", count)
        async with (
            traffic.attached(context, credentials, subscriber, sub_relay) as (receiving, _),
            traffic.attached(context, credentials, sender, relays[0]) as (sending, _),
        ):
            listener = PubsubClient(receiving, domain=domain)
            publisher = PubsubClient(sending, domain=domain)
            try:
                await listener.subscribe(topic, duration=max(60, int(wait) * 4))
                with progress_of(result, _quiet(ctx)) as advance:

                    async def receive_all() -> None:
                        while result.done < count:
                            _, data = await listener.next_publication()
                            result.latencies.append(time.perf_counter_ns() - sent_at(data.content))
                            result.done += 1
                            advance()

                    async def one(_: int) -> None:
                        try:
                            await publisher.publish(topic, content(size), confirm=False)
                        except Exception:  # noqa: BLE001  (counted as a failure)
                            result.failed += 1

                    result.started = time.perf_counter()
                    receiving_task = asyncio.ensure_future(receive_all())
                    await _pipelined(count, in_flight, one)
                    with contextlib.suppress(TimeoutError):
                        await within(asyncio.shield(receiving_task), wait)
                    receiving_task.cancel()
                    result.ended = time.perf_counter()
                with contextlib.suppress(Exception):
                    await listener.cancel(topic)
            finally:
                await publisher.aclose()
                await listener.aclose()
        return result

    _go(ctx, work)


@bench_app.command("request")
def bench_request(
    ctx: typer.Context,
    recipient: Annotated[str, typer.Argument(help="The endpoint that is sent to.")],
    sender: As,
    count: Count = 2_000,
    size: Size = 256,
    in_flight: InFlight = 50,
    receive_as: Annotated[
        bool, typer.Option(help="Attach the recipient too (apexctl knows its password).")
    ] = True,
) -> None:
    """Send COUNT data with a statusRequest to RECIPIENT and wait for each report:
    round trips per second and round-trip times (each must be 250)."""
    _check(size)

    async def work(context: Context, admin: AdminClient) -> Run:
        domain = Endpoint.parse(sender).domain
        relays = await traffic.ready_relays(admin, context, domain)
        credentials = traffic.Credentials(context)
        result = Run(f"request {sender} -> {recipient} via {relays[0].name}", count)
        async with contextlib.AsyncExitStack() as stack:
            if receive_as:
                to_relays = await traffic.ready_relays(
                    admin, context, Endpoint.parse(recipient).domain
                )
                to_relay = next((r for r in to_relays if r.name != relays[0].name), to_relays[0])
                receiving, _ = await stack.enter_async_context(
                    traffic.attached(context, credentials, recipient, to_relay)
                )
                drain = asyncio.ensure_future(_discard(receiving))
                stack.callback(drain.cancel)
            sending, _ = await stack.enter_async_context(
                traffic.attached(context, credentials, sender, relays[0])
            )
            with progress_of(result, _quiet(ctx)) as advance:

                async def one(_: int) -> None:
                    began = time.perf_counter_ns()
                    try:
                        sent = await sending.send(recipient, content(size), status_request=True)
                        reports = await sent.reports(1, timeout=30.0)
                        codes = {int(d.reply.code) for r in reports for d in r.destinations}
                    except Exception:  # noqa: BLE001  (counted as a failure)
                        result.failed += 1
                    else:
                        if codes == {250}:
                            result.done += 1
                            result.latencies.append(time.perf_counter_ns() - began)
                        else:
                            result.failed += 1
                    advance()

                result.started = time.perf_counter()
                await _pipelined(count, in_flight, one)
                result.ended = time.perf_counter()
        return result

    _go(ctx, work)


async def _discard(attachment: Any) -> None:
    while True:
        await attachment.receive()


def _check(size: int) -> None:
    if size < _STAMP.size:
        raise fail(f"--size must be at least {_STAMP.size}", 2)


__all__ = ["bench_app", "percentiles"]
