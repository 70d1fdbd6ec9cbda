"""Benchmark of the SDK's receive path, beside a redis-py subscriber in the same run.

Run: ``.venv/bin/python bench/sdk_receive.py [--messages N] [--quick] [--loop asyncio]``

What is measured is the CPU of the subscribing process per delivery, the way an
application runs it: this process attaches a real :class:`~apexmesh.client.ApexClient`
as ``sub1@example.com`` over real loopback TCP to a *feeder*, a separate process (this
file with ``--feed beep``) that plays the relay. The feeder answers the greeting and the
channel start (the piggybacked attach with ``<ok />``), then sends pre-built BEEP MSG
frames on the APEX channel as fast as the client's window (RFC 3081 SEQ) lets it, and
reads the client's ``ok`` replies. The application takes each delivery with
``Attachment.receive()`` and reads its ``content``. Two delivery shapes, 256-octet
payloads:

* ``fanout``: a plain topic publication as a relay fans it out: ``multipart/related``
  with a boundary derived from the part (a new one per publication, as
  ``apexmesh.pubsub.wire.forward_payload`` writes it), the control part
  ``<data content='cid:...'>`` from ``apex=pubsub/bench@example.com`` to
  ``sub1@example.com`` with the dataHopping option, and the binary part;
* ``p2p``: a plain data from ``fred@example.com`` as the SDK's ``Attachment.submit``
  encodes it (a relay forwards it as received).

Beside them, in the same run, the baseline: a redis-py asyncio subscriber (the redis-py
the project depends on, with the parser a default install uses: hiredis is reported
when present) receives the same 256-octet payloads from a feeder process (``--feed
redis``) that plays a Redis server: it answers the connection's commands and the
SUBSCRIBE, then writes RESP2 pubsub ``message`` frames, the octets redis-server writes
for each PUBLISH to a subscribed connection, as fast as TCP takes them. A fake server
rather than redis-server and a publisher: on two shared cores a real server and its
publisher would compete with the subscriber being measured and cap its rate, while the
subscriber's work per message (read, RESP parse, the message dict) is the same.

CPU per delivery is the client process's user + system time (``time.process_time``)
from the moment the feeder is told to start to the last delivery (and, for apex-mesh,
the feeder's count of ``ok`` replies), divided by the deliveries; the wall rate is
deliveries over the same interval. Each run prints delivered / expected (and the ok
replies the feeder counted), and the load average, since the machine is shared; CPU per
delivery is much less sensitive to load than rates. Target (issue #28): under 20 us per
delivery. ``--profile FILE`` writes a cProfile of the apex-mesh runs. The last line of
output is JSON: a list of figures (name, value, unit, baseline, ratio).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib.util
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import figure

from apexmesh.aio.tasks import within
from apexmesh.apex.content import MimePart
from apexmesh.apex.data import Data, Originator, Recipient
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.party import data_hopping_option
from apexmesh.beep import events as ev
from apexmesh.beep.frames import RPY, FrameReader, SeqFrame, encode_seq
from apexmesh.beep.limits import DEFAULT_WINDOW_OCTETS, MAX_NUMBER, SEQNO_MODULUS
from apexmesh.beep.mime import beep_xml
from apexmesh.beep.session import Role, Session, SessionConfig
from apexmesh.client import connect_endpoint
from apexmesh.client.client import APEX_PROFILE
from apexmesh.client.outgoing import as_recipients, encode_data
from apexmesh.pubsub.elements import topic_endpoint
from apexmesh.pubsub.wire import forward_payload

SUBSCRIBER = "sub1@example.com"
PAYLOAD_OCTETS = 256
#: Distinct payloads each feeder cycles through (content, Content-ID and boundary vary).
POOL = 1024
SHAPES = ("fanout", "p2p")
#: Octets of frames the BEEP feeder writes at once (at most; the window bounds it too).
WRITE_OCTETS = 64 * 1024
#: Seconds a run may take before the bench gives up on it.
RUN_TIMEOUT = 1800.0
#: The window the feeder advertises for the client's replies.
REPLY_WINDOW = 1 << 20
_OK = beep_xml(b"<ok />")


def body(index: int) -> bytes:
    """The 256-octet content of delivery ``index`` (binary, distinct per index)."""
    head = index.to_bytes(8, "big")
    return head + bytes((index + i) % 256 for i in range(PAYLOAD_OCTETS - len(head)))


def beep_payloads(shape: str) -> list[bytes]:
    """The BEEP message payloads of a shape (see the module docstring)."""
    subscriber = Endpoint.parse(SUBSCRIBER)
    if shape == "p2p":
        fred = Endpoint.parse("fred@example.com")
        recipients = as_recipients(SUBSCRIBER)
        return [
            encode_data(originator=fred, recipients=recipients, content=body(i))
            for i in range(POOL)
        ]
    origin = Originator(identity=topic_endpoint("bench", "example.com"))
    hopping = data_hopping_option(1_234_567, 8, report_errors=True)
    payloads = []
    for i in range(POOL):
        content_id = f"{i + 1}.pub@example.com"
        data = Data(
            content=f"cid:{content_id}",
            originator=origin,
            recipients=(Recipient(identity=subscriber),),
            options=(hopping,),
        )
        part = MimePart(content_id, "application/octet-stream", (), body(i))
        payloads.append(forward_payload(data, (part,)))
    return payloads


def resp_message(channel: bytes, data: bytes) -> bytes:
    """A RESP2 pubsub message frame, as redis-server writes it to a subscriber."""
    return b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
        len(channel),
        channel,
        len(data),
        data,
    )


# --------------------------------------------------------------------------- feeders


class BeepFeeder(asyncio.Protocol):
    """The relay's side: the greeting and channel start through the sans-I/O session,
    then pre-built MSG frames within the client's window, its replies counted."""

    def __init__(self, payloads: list[bytes], count: int) -> None:
        self.session = Session(Role.LISTENER, SessionConfig(profiles=(APEX_PROFILE,)))
        self.payloads = payloads
        self.count = count
        self.transport: asyncio.Transport | None = None
        self.channel = -1
        self.started = asyncio.get_running_loop().create_future()
        self.finished = asyncio.get_running_loop().create_future()
        self.going = False
        self.reader = FrameReader(1 << 20)
        self.seqno = 0
        self.recv_seqno = 0
        self.partial = b""
        self.credit = DEFAULT_WINDOW_OCTETS
        self.sent = 0
        self.oks = 0
        self.errors = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._flush_session()

    def _flush_session(self) -> None:
        out = self.session.data_to_send()
        if out and self.transport is not None:
            self.transport.write(out)

    def data_received(self, data: bytes) -> None:
        if self.channel < 0:
            for event in self.session.receive_data(data):
                if isinstance(event, ev.ChannelStartRequested):
                    self.session.accept_channel(event.channel, APEX_PROFILE, "<ok />")
                    self.channel = event.channel
            self._flush_session()
            if self.channel >= 0 and self.transport is not None:
                self.transport.write(encode_seq(self.channel, 0, REPLY_WINDOW))
            if self.channel >= 0 and not self.started.done():
                self.started.set_result(None)
            return
        self.reader.feed(data)
        received = 0
        while (frame := self.reader.next_frame()) is not None:
            if type(frame) is SeqFrame:
                if frame.channel == self.channel:
                    self.credit = frame.window - (self.seqno - frame.ackno) % SEQNO_MODULUS
            elif frame.channel == self.channel:
                received += len(frame.payload)
                if frame.more:  # a reply cut by the window: the rest follows
                    self.partial += frame.payload
                    continue
                reply, self.partial = self.partial + frame.payload, b""
                if frame.keyword == RPY and reply == _OK:
                    self.oks += 1
                else:
                    self.errors += 1
        if received and self.transport is not None:
            # The window for the client's replies (RFC 3081 3.1.3): open it as they come.
            self.recv_seqno = (self.recv_seqno + received) % SEQNO_MODULUS
            self.transport.write(encode_seq(self.channel, self.recv_seqno, REPLY_WINDOW))
        if self.oks + self.errors >= self.count and not self.finished.done():
            self.finished.set_result(None)
        self.pump()

    def pump(self) -> None:
        if not self.going or self.transport is None:
            return
        chunks: list[bytes] = []
        octets = 0
        payloads = self.payloads
        while self.sent < self.count and octets < WRITE_OCTETS:
            payload = payloads[self.sent % len(payloads)]
            size = len(payload)
            if size > self.credit:
                break
            msgno = self.sent % (MAX_NUMBER + 1)
            chunks += (b"MSG %d %d . %d %d\r\n" % (self.channel, msgno, self.seqno, size),)
            chunks += (payload, b"END\r\n")
            self.seqno = (self.seqno + size) % SEQNO_MODULUS
            self.credit -= size
            self.sent += 1
            octets += size
        if chunks:
            self.transport.write(b"".join(chunks))
            if octets >= WRITE_OCTETS:
                asyncio.get_running_loop().call_soon(self.pump)

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002
        if not self.started.done():
            self.started.set_exception(ConnectionError("closed before the channel started"))
        if not self.finished.done():
            self.finished.set_result(None)


#: The answer to ``HELLO``: this stand-in speaks RESP2 only, as a Redis before 6 did.
#: redis-py 8 opens each connection with ``HELLO 3`` and on this error falls back to
#: RESP2, the protocol of the message frames below (and of redis-py before 8).
HELLO_REPLY = b"-ERR unknown command 'HELLO'\r\n"


class RedisFeeder(asyncio.Protocol):
    """A Redis server as one subscriber sees it: every command answered (SUBSCRIBE with
    its confirmation), then pubsub message frames as fast as TCP takes them."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.channel: bytes | None = None
        self.subscribed = asyncio.get_running_loop().create_future()
        self.closed = asyncio.get_running_loop().create_future()
        self.writable = asyncio.Event()
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (command := self._command()) is not None and self.transport is not None:
            name = command[0].upper()
            if name == b"SUBSCRIBE":
                self.channel = command[1]
                self.transport.write(
                    b"*3\r\n$9\r\nsubscribe\r\n"
                    + b"$%d\r\n%s\r\n:1\r\n" % (len(self.channel), self.channel)
                )
                if not self.subscribed.done():
                    self.subscribed.set_result(None)
            elif name == b"PING":
                self.transport.write(b"+PONG\r\n")
            elif name == b"HELLO":
                self.transport.write(HELLO_REPLY)
            else:
                self.transport.write(b"+OK\r\n")

    def _command(self) -> list[bytes] | None:
        """One RESP array of bulk strings from the buffer, or None when incomplete."""
        buf = self.buffer
        if not buf.startswith(b"*"):
            return None
        end = buf.find(b"\r\n")
        if end < 0:
            return None
        items, pos = [], end + 2
        for _ in range(int(buf[1:end])):
            end = buf.find(b"\r\n", pos)
            if end < 0:
                return None
            size = int(buf[pos + 1 : end])
            if len(buf) < end + 2 + size + 2:
                return None
            items.append(buf[end + 2 : end + 2 + size])
            pos = end + 2 + size + 2
        self.buffer = buf[pos:]
        return items

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    async def stream(self) -> None:
        if self.transport is None or self.channel is None:
            raise ConnectionError("no subscriber")
        frames = [resp_message(self.channel, body(i)) for i in range(POOL)]
        sent = 0
        while sent < self.count:
            await self.writable.wait()
            batch = min(self.count - sent, 64)
            self.transport.write(b"".join(frames[(sent + i) % POOL] for i in range(batch)))
            sent += batch

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002
        if not self.subscribed.done():
            self.subscribed.set_exception(ConnectionError("closed before SUBSCRIBE"))
        if not self.closed.done():
            self.closed.set_result(None)


async def feed(kind: str, shape: str, count: int) -> None:
    """The feeder process: print the port, wait for the client, for "go" on stdin, feed,
    print what was counted (JSON), exit when the client is gone."""
    loop = asyncio.get_running_loop()
    protocols: list[Any] = []
    connected = asyncio.Event()
    payloads = beep_payloads(shape) if kind == "beep" else []

    def factory() -> asyncio.Protocol:
        made: asyncio.Protocol = (
            BeepFeeder(payloads, count) if kind == "beep" else RedisFeeder(count)
        )
        protocols.append(made)
        connected.set()
        return made

    server = await loop.create_server(factory, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    go = loop.run_in_executor(None, sys.stdin.readline)
    await connected.wait()
    protocol = protocols[0]
    if isinstance(protocol, BeepFeeder):
        await protocol.started
        await go
        protocol.going = True
        protocol.pump()
        await protocol.finished
        print(json.dumps({"sent": protocol.sent, "oks": protocol.oks, "errors": protocol.errors}))
        sys.stdout.flush()
        if protocol.transport is not None:
            protocol.transport.close()
    else:
        await protocol.subscribed
        await go
        await protocol.stream()
        print(json.dumps({"sent": count}), flush=True)
        await protocol.closed
    server.close()


# --------------------------------------------------------------------------- clients


@dataclass
class Run:
    """One subscriber's figures."""

    delivered: int
    expected: int
    cpu_us: float
    #: The part of ``cpu_us`` spent in the kernel (socket reads and writes, mostly).
    system_us: float
    rate: float
    feeder: dict[str, Any]
    feeder_cpu_us: float

    @classmethod
    def of(
        cls,
        delivered: int,
        count: int,
        cpu: tuple[float, float],
        wall: float,
        feeder: dict[str, Any],
        feeder_cpu: float,
    ) -> Run:
        """The figures of ``count`` deliveries from seconds spent (user, system)."""
        user, system = cpu
        return cls(
            delivered,
            count,
            1e6 * (user + system) / count,
            1e6 * system / count,
            count / wall,
            feeder,
            1e6 * feeder_cpu / count,
        )


class Feeder:
    """A feeder process of this file."""

    def __init__(self, kind: str, shape: str, count: int) -> None:
        self.args = ("--feed", kind, "--shape", shape, "--messages", str(count))
        self.process: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Feeder:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            *self.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return self

    def _running(self) -> asyncio.subprocess.Process:
        if self.process is None or self.process.stdin is None or self.process.stdout is None:
            raise RuntimeError("the feeder is not running")
        return self.process

    async def port(self) -> int:
        stdout = self._running().stdout
        return int(await stdout.readline()) if stdout is not None else 0

    def go(self) -> None:
        stdin = self._running().stdin
        if stdin is not None:
            stdin.write(b"go\n")

    async def report(self) -> dict[str, Any]:
        stdout = self._running().stdout
        line = await stdout.readline() if stdout is not None else b""
        return json.loads(line) if line else {}

    def cpu_seconds(self) -> float:
        stat = Path(f"/proc/{self._running().pid}/stat").read_text()
        fields = stat.rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def __aexit__(self, *exc: object) -> None:
        if self.process is None:
            return
        if self.process.returncode is None:
            try:
                await within(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


async def apex_subscriber(shape: str, count: int, profile: cProfile.Profile | None) -> Run:
    """The SDK as an application uses it, fed ``count`` deliveries of ``shape``."""
    async with Feeder("beep", shape, count) as feeder:
        client = await connect_endpoint("127.0.0.1", await feeder.port())
        try:
            attachment = await client.attach(SUBSCRIBER)
            octets = delivered = 0
            feeder_cpu = feeder.cpu_seconds()
            if profile is not None:
                profile.enable()
            cpu, started = os.times(), time.perf_counter()
            feeder.go()
            while delivered < count:
                received = await attachment.receive()
                octets += len(received.content)
                delivered += 1
            wall = time.perf_counter() - started
            report = await feeder.report()
            user, system = _spent(cpu)
            if profile is not None:
                profile.disable()
            feeder_cpu = feeder.cpu_seconds() - feeder_cpu
            if octets != count * PAYLOAD_OCTETS:
                raise SystemExit(f"apex-mesh {shape}: {octets} content octets, not 256 each")
        finally:
            await client.close(timeout=5)
    return Run.of(delivered, count, (user, system), wall, report, feeder_cpu)


def _spent(since: os.times_result) -> tuple[float, float]:
    """User and system seconds this process spent since ``since``."""
    now = os.times()
    return now.user - since.user, now.system - since.system


async def redis_subscriber(count: int) -> Run:
    """A redis-py asyncio subscriber fed ``count`` messages."""
    from redis.asyncio import Redis

    async with Feeder("redis", "redis", count) as feeder:
        connection = Redis(host="127.0.0.1", port=await feeder.port())
        pubsub = connection.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe("bench")
            await pubsub.get_message(timeout=None)  # the confirmation (ignored: None)
            octets = delivered = 0
            feeder_cpu = feeder.cpu_seconds()
            cpu, started = os.times(), time.perf_counter()
            feeder.go()
            while delivered < count:
                message = await pubsub.get_message(timeout=None)
                if message is not None and message["type"] == "message":
                    octets += len(message["data"])
                    delivered += 1
            wall = time.perf_counter() - started
            user, system = _spent(cpu)
            feeder_cpu = feeder.cpu_seconds() - feeder_cpu
            report = await feeder.report()
            if octets != count * PAYLOAD_OCTETS:
                raise SystemExit(f"redis-py: {octets} content octets, not 256 each")
        finally:
            await pubsub.aclose()
            await connection.aclose()
    return Run.of(delivered, count, (user, system), wall, report, feeder_cpu)


def load() -> str:
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return f"load average {one} {five} {fifteen}"


def show(system: str, run: Run) -> None:
    extra = ""
    if "oks" in run.feeder:
        extra = f"; ok replies {run.feeder['oks']:,}, errors {run.feeder['errors']:,}"
    print(
        f"  {system:>18}: delivered {run.delivered:,} / expected {run.expected:,}{extra}; "
        f"{run.cpu_us:.1f} us CPU per delivery ({run.system_us:.1f} in the kernel), "
        f"{run.rate:,.0f} deliveries/s "
        f"(feeder {run.feeder_cpu_us:.1f} us/delivery); {load()}",
        flush=True,
    )


async def bench(
    count: int,
    shapes: tuple[str, ...],
    profile_path: str | None,
    *,
    repeat: int = 3,
    baseline: bool = True,
) -> list[Any]:
    """Each system ``repeat`` times, in turns (so that the load of a shared machine falls
    on all alike); the figures are each system's run with the least CPU per delivery."""
    hiredis = importlib.util.find_spec("hiredis") is not None
    print(
        f"SDK receive path, {count:,} deliveries of {PAYLOAD_OCTETS} octets per run, "
        f"{repeat} runs each; redis-py {redis_version()} parser: "
        f"{'hiredis' if hiredis else 'pure Python (hiredis not installed)'}; {load()}",
        flush=True,
    )
    profile = cProfile.Profile() if profile_path else None
    runs: dict[str, list[Run]] = {}
    for _ in range(repeat):
        if baseline:
            run = await redis_subscriber(count)
            show("redis-py", run)
            runs.setdefault("redis", []).append(run)
        for shape in shapes:
            run = await apex_subscriber(shape, count, profile)
            show(f"apex-mesh {shape}", run)
            runs.setdefault(shape, []).append(run)
            if run.delivered != run.expected or run.feeder.get("oks") != count:
                raise SystemExit(f"{shape}: not every delivery was delivered and answered ok")
    if profile is not None and profile_path is not None:
        profile.dump_stats(profile_path)
    best = {name: min(each, key=lambda run: run.cpu_us) for name, each in runs.items()}
    redis = best.get("redis")
    print("best of each:", flush=True)
    figures = []
    if redis is not None:
        show("redis-py", redis)
        figures.append(figure("redis_py_cpu_per_message", redis.cpu_us, "us"))
    for shape in shapes:
        mine = best[shape]
        show(f"apex-mesh {shape}", mine)
        base = (None, None) if redis is None else (redis.cpu_us, redis.rate)
        figures.append(figure(f"sdk_{shape}_cpu_per_delivery", mine.cpu_us, "us", base[0]))
        figures.append(figure(f"sdk_{shape}_deliveries", mine.rate, "deliveries/s", base[1]))
    return figures


def redis_version() -> str:
    import redis

    return str(redis.__version__)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="2,000 deliveries, one run each")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each system")
    parser.add_argument("--shape", choices=(*SHAPES, "redis"), default=None)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--profile", default=None, help="write a cProfile of the SDK runs")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip redis-py (to profile the SDK alone)"
    )
    parser.add_argument("--feed", choices=("beep", "redis"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    count = 2_000 if args.quick else args.messages
    run: Callable[[Awaitable[Any]], Any] = uvloop.run if args.loop == "uvloop" else asyncio.run
    if args.feed is not None:
        run(feed(args.feed, args.shape or "fanout", count))
        return
    shapes = SHAPES if args.shape in (None, "redis") else (args.shape,)
    figures = run(
        within(
            bench(
                count,
                shapes,
                args.profile,
                repeat=1 if args.quick else args.repeat,
                baseline=not args.no_baseline,
            ),
            RUN_TIMEOUT,
        )
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
