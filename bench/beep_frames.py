"""Benchmark of the BEEP core: frame parsing and encoding, and a session echo.

Run: ``.venv/bin/python bench/beep_frames.py [--quick]``

Each figure is printed beside a baseline measured in the same run over the same buffer,
so the ratio is comparable across machines:

* parsing: a loop that only finds each header's CRLF, reads the size after the last
  space, and slices the payload (what any parser must at least do);
* encoding: concatenating a ready-made header, the payload and the trailer.

Splits feed the same buffer to the reader in random pieces (seeded), so the buffering
and the partial-header path are measured too; their baseline is the whole-buffer loop.

The session echo runs MSG/RPY exchanges between two in-memory sessions (4096-octet
windows, SEQ frames, reply ordering, all checks on). ``session_echo`` takes the function
that carries octets between the sessions, so a transport adapter can time the same
exchange over loopback TCP by passing its own. The loopback TCP echo runs the same
exchanges through the asyncio adapter (``apexmesh.aio``) over real sockets, 256 MSGs in
flight, beside a bare asyncio stream echo of the same octets at the same depth.

The last line of output is JSON: a list of {name, value, unit, baseline, ratio}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from figures import figure
from pipeline import pipelined

from apexmesh.aio import (
    AcceptChannel,
    BeepConnection,
    Channel,
    ConnectionClosedError,
    connect,
    listen,
)
from apexmesh.beep import events as ev
from apexmesh.beep.frames import FrameReader, encode_frame
from apexmesh.beep.management import ProfileOffer
from apexmesh.beep.mime import build_entity
from apexmesh.beep.session import Role, Session, SessionConfig

PROFILE = "http://example.org/beep/echo"
Result = dict[str, Any]


def best_of(repeats: int, fn: Callable[[], int]) -> tuple[float, int]:
    """Run ``fn`` (which returns an item count) and return (best seconds, items)."""
    best = float("inf")
    items = 0
    for _ in range(repeats):
        start = time.perf_counter()
        items = fn()
        best = min(best, time.perf_counter() - start)
    return best, items


def frame_buffer(payload_size: int, count: int) -> bytes:
    payload = bytes(range(256)) * (payload_size // 256) + b"x" * (payload_size % 256)
    parts = []
    seqno = 0
    for msgno in range(count):
        parts.append(encode_frame("MSG", 1, msgno % 2147483648, False, seqno, payload))
        seqno = (seqno + payload_size) % (1 << 32)
    return b"".join(parts)


def parse_whole(buf: bytes) -> int:
    reader = FrameReader(1 << 20)
    reader.feed(buf)
    n = 0
    next_frame = reader.next_frame
    while next_frame() is not None:
        n += 1
    return n


def parse_split(buf: bytes, cuts: list[int]) -> int:
    reader = FrameReader(1 << 20)
    feed = reader.feed
    next_frame = reader.next_frame
    n = 0
    prev = 0
    for cut in cuts:
        feed(buf[prev:cut])
        prev = cut
        while next_frame() is not None:
            n += 1
    return n


def baseline_parse(buf: bytes) -> int:
    """The least a parser must do: find the header end, read the size, slice."""
    find = buf.find
    rfind = buf.rfind
    pos = 0
    end = len(buf)
    n = 0
    while pos < end:
        nl = find(b"\r\n", pos)
        size = int(buf[rfind(b" ", pos, nl) + 1 : nl])
        start = nl + 2
        _payload = buf[start : start + size]
        pos = start + size + 5
        n += 1
    return n


def random_cuts(length: int, mean: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    cuts = []
    pos = 0
    while pos < length:
        pos = min(length, pos + rng.randint(1, 2 * mean))
        cuts.append(pos)
    return cuts


def encode_many(payload: bytes, count: int) -> int:
    size = len(payload)
    seqno = 0
    for msgno in range(count):
        encode_frame("MSG", 1, msgno, False, seqno, payload)
        seqno += size
    return count


def baseline_encode(payload: bytes, count: int) -> int:
    header = b"MSG 1 0 . 0 %d\r\n" % len(payload)
    join = b"".join
    for _ in range(count):
        join((header, payload, b"END\r\n"))
    return count


def memory_pump(initiator: Session, listener: Session) -> tuple[list[ev.Event], list[ev.Event]]:
    """Carry octets both ways until both sessions are quiet; return their events."""
    ini_events: list[ev.Event] = []
    lis_events: list[ev.Event] = []
    while True:
        a = initiator.data_to_send()
        b = listener.data_to_send()
        if not a and not b:
            return ini_events, lis_events
        if a:
            lis_events += listener.receive_data(a)
        if b:
            ini_events += initiator.receive_data(b)


Pump = Callable[[Session, Session], tuple[list[ev.Event], list[ev.Event]]]


def session_echo(
    exchanges: int, payload_size: int = 64, batch: int = 256, pump: Pump = memory_pump
) -> int:
    """Run ``exchanges`` MSG/RPY round trips, ``batch`` in flight at a time; return count."""
    initiator = Session(Role.INITIATOR, SessionConfig())
    listener = Session(Role.LISTENER, SessionConfig(profiles=(PROFILE,)))
    pump(initiator, listener)
    channel = initiator.start_channel([ProfileOffer(uri=PROFILE)])
    pump(initiator, listener)
    listener.accept_channel(channel, PROFILE)
    pump(initiator, listener)
    payload = build_entity(b"e" * payload_size)
    done = 0
    send_msg = initiator.send_msg
    send_rpy = listener.send_rpy
    while done < exchanges:
        n = min(batch, exchanges - done)
        for _ in range(n):
            send_msg(channel, payload)
        replies = 0
        while replies < n:
            ini_events, lis_events = pump(initiator, listener)
            for event in lis_events:
                if type(event) is ev.MessageReceived:
                    send_rpy(channel, event.msgno, event.payload)
            replies += sum(1 for e in ini_events if type(e) is ev.ReplyReceived)
            if not lis_events and not ini_events:
                break
        if replies != n:
            raise RuntimeError(f"echo lost replies: {replies} of {n}")
        done += n
    return done


LOOPBACK_PROFILE = "http://apex-mesh.dev/beep/echo"
#: MSGs in flight in the loopback echo (pipelining depth, same for the raw baseline).
LOOPBACK_DEPTH = 256


async def _serve_echo(channel: Channel) -> None:
    while True:
        try:
            incoming = await channel.receive()
        except ConnectionClosedError:
            return
        incoming.reply(incoming.payload)


async def _accept_echo(
    conn: BeepConnection,  # noqa: ARG001  (StartHandler signature)
    request: ev.ChannelStartRequested,  # noqa: ARG001
) -> AcceptChannel:
    return AcceptChannel(profile=LOOPBACK_PROFILE, serve=_serve_echo)


async def loopback_echo(count: int, size: int = 256) -> float:
    """MSG/RPY exchanges per second through the asyncio adapter over loopback TCP."""
    config = SessionConfig(profiles=(LOOPBACK_PROFILE,), receive_window_octets=256 * 1024)
    server = await listen("127.0.0.1", 0, config, on_start=_accept_echo)
    port = server.sockets[0].getsockname()[1]
    conn = await connect("127.0.0.1", port, SessionConfig(receive_window_octets=256 * 1024))
    channel = await conn.open_channel(LOOPBACK_PROFILE)
    payload = build_entity(b"x" * size)
    await pipelined(lambda: channel.send(payload), LOOPBACK_DEPTH, LOOPBACK_DEPTH)  # warm-up
    last = await channel.send(payload)
    assert last.payload == payload
    started = time.perf_counter()
    await pipelined(lambda: channel.send(payload), count, LOOPBACK_DEPTH)
    elapsed = time.perf_counter() - started
    await conn.close()
    server.close()
    await server.wait_closed()
    return count / elapsed


async def raw_tcp_echo(count: int, size: int = 256) -> float:
    """Baseline: fixed-size messages echoed one by one by a bare asyncio stream server
    (no framing, no headers, no windows), with the same number in flight."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                writer.write(await reader.readexactly(size))
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    message = b"x" * size
    started = time.perf_counter()
    sent = 0
    while sent < count:
        batch = min(LOOPBACK_DEPTH, count - sent)
        writer.write(message * batch)
        await reader.readexactly(size * batch)
        sent += batch
    elapsed = time.perf_counter() - started
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()
    return count / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    args = parser.parse_args(argv)
    scale = 10 if args.quick else 1
    repeats = 3 if args.quick else 5
    results: list[Result] = []

    for payload_size, count in ((256, 200_000), (16 * 1024, 8_000)):
        count //= scale
        buf = frame_buffer(payload_size, count)
        label = "256B" if payload_size == 256 else "16KiB"
        base_t, n = best_of(repeats, lambda buf=buf: baseline_parse(buf))
        assert n == count
        whole_t, n = best_of(repeats, lambda buf=buf: parse_whole(buf))
        assert n == count
        cuts = random_cuts(len(buf), min(payload_size, 1500), seed=payload_size)
        split_t, n = best_of(repeats, lambda buf=buf, cuts=cuts: parse_split(buf, cuts))
        assert n == count
        results.append(figure(f"parse_{label}_whole", count / whole_t, "frames/s", count / base_t))
        results.append(figure(f"parse_{label}_split", count / split_t, "frames/s", count / base_t))
        payload = buf[buf.find(b"\r\n") + 2 :][:payload_size]
        enc_count = count
        base_e, _ = best_of(repeats, lambda p=payload, c=enc_count: baseline_encode(p, c))
        enc_t, _ = best_of(repeats, lambda p=payload, c=enc_count: encode_many(p, c))
        results.append(figure(f"encode_{label}", enc_count / enc_t, "frames/s", enc_count / base_e))
        mib = len(buf) / (1 << 20)
        print(
            f"{label:>6}: parse whole {count / whole_t:>12,.0f} frames/s ({mib / whole_t:,.0f} "
            f"MiB/s)  split {count / split_t:>12,.0f}  baseline {count / base_t:>12,.0f}  "
            f"encode {enc_count / enc_t:>12,.0f} (baseline {enc_count / base_e:,.0f})"
        )

    exchanges = 100_000 // scale
    echo_t, n = best_of(1, lambda: session_echo(exchanges))
    assert n == exchanges
    results.append(figure("session_echo_msg_rpy", n / echo_t, "exchanges/s"))
    results.append(figure("session_echo_messages", 2 * n / echo_t, "messages/s"))
    print(
        f"session echo: {n:,} MSG/RPY exchanges in {echo_t:.2f} s = {n / echo_t:,.0f} "
        f"exchanges/s ({2 * n / echo_t:,.0f} messages/s)"
    )
    tcp_rate = asyncio.run(loopback_echo(exchanges))
    raw_rate = asyncio.run(raw_tcp_echo(exchanges))
    results.append(figure("loopback_tcp_echo_msg_rpy", tcp_rate, "exchanges/s", raw_rate))
    print(
        f"loopback TCP echo: {exchanges:,} MSG/RPY exchanges, {tcp_rate:,.0f} exchanges/s "
        f"(raw asyncio echo of the same 256-octet messages at the same depth: {raw_rate:,.0f}/s)"
    )
    sys.stdout.flush()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
