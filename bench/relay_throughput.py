"""End-to-end relay benchmark: data operations through the mesh, beside a raw BEEP echo.

Starts the local mesh (apexmesh.ops.localmesh) as processes in a development run (plain
BEEP, no SASL, so the comparison with the plaintext echo is fair), attaches a sender to
example.com's pod 1 and receivers to pod 1 (same pod) and pod 2 (other pod: one gRPC
hop more), and measures:

* throughput: data operations per second, 256-octet content, :data:`DEPTH` in flight
  (bench/pipeline.py, as the baseline), counted when the receiver has them all (every
  one answered ``ok`` by the relay and delivered);
* latency: p50 / p99 from send to receipt at a fixed offered rate;
* baseline, same run: a raw BEEP MSG/RPY echo over loopback TCP through the same asyncio
  adapter (bench/beep_frames.py ``loopback_echo``), exchanges per second, measured in
  slices alternating with the relay's (``--rounds``): this machine's speed drifts by a
  third within a minute, and both rates then see the same mix of it;
* CPU per data operation (user + system, microseconds) of the sender's relay pod, the
  receiver's pod and this process (both endpoints), during the throughput run: on a
  2-core machine the three share the cores, so these say where the time goes.

Everything runs on uvloop, as the services do (``apexmesh/ops/runner.py``).

Target of the relay issue: the other-pod path reaches at least 40 % of the raw echo's
messages per second. The last line of output is JSON: a list of figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

from beep_frames import loopback_echo
from figures import figure
from pipeline import pipelined

from apexmesh.client import Attachment, connect_endpoint
from apexmesh.ops.localmesh import LocalMesh

CONTENT_OCTETS = 256
DEPTH = 256  # data operations in flight per sender (the raw echo uses the same depth)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_of(mesh: LocalMesh, name: str) -> int:
    """The process id of the mesh's child ``name``."""
    child = next(c for c in mesh.children if c.name == name)
    assert child.process is not None
    return child.process.pid


async def throughput(sender: Attachment, receiver: Attachment, count: int) -> float:
    content = b"x" * CONTENT_OCTETS
    target = str(receiver.endpoint)

    async def drain() -> None:
        for _ in range(count):
            await receiver.receive()

    started = time.perf_counter()
    receiving = asyncio.ensure_future(drain())
    await pipelined(lambda: sender.submit(target, content), count, DEPTH)
    await asyncio.wait_for(receiving, 60)
    return count / (time.perf_counter() - started)


async def latency(
    sender: Attachment, receiver: Attachment, rate: float, seconds: float
) -> tuple[float, float]:
    target = str(receiver.endpoint)
    samples: list[float] = []
    count = int(rate * seconds)

    async def drain() -> None:
        for _ in range(count):
            data = await receiver.receive()
            samples.append(time.perf_counter() - float(data.content[:32].decode()))

    receiving = asyncio.ensure_future(drain())
    started = time.perf_counter()
    pending = []
    for index in range(count):
        due = started + index / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        stamp = f"{time.perf_counter():<32.9f}".encode()
        pending.append(
            asyncio.ensure_future(sender.send(target, stamp + b"x" * (CONTENT_OCTETS - 32)))
        )
    await asyncio.gather(*pending)
    await asyncio.wait_for(receiving, 60)
    samples.sort()
    return statistics.median(samples) * 1000, samples[int(len(samples) * 0.99) - 1] * 1000


async def interleaved(
    sender: Attachment,
    receiver: Attachment,
    pids: dict[str, int],
    *,
    count: int,
    rounds: int,
) -> tuple[float, float, dict[str, float]]:
    """The relay path and the raw echo measured in alternate slices of ``rounds`` each
    (``count`` data, then ``2 * count`` echo exchanges): both see the same mix of this
    machine's fast and slow moments, and each rate is its total operations over its
    total time. Returns (data/s, echo exchanges/s, CPU per data by process)."""
    relay_time = echo_time = 0.0
    cpu = dict.fromkeys(pids, 0.0)
    for _ in range(rounds):
        echo_count = 2 * count
        echo_time += echo_count / await loopback_echo(echo_count)
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        relay_time += count / await throughput(sender, receiver, count)
        for name, pid in pids.items():
            cpu[name] += cpu_seconds(pid) - before[name]
    data = count * rounds
    return (
        data / relay_time,
        2 * data / echo_time,
        {name: seconds / data * 1e6 for name, seconds in cpu.items()},
    )


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000, help="data per slice")
    parser.add_argument("--rounds", type=int, default=6, help="slices of each")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    mesh = LocalMesh(Path(tempfile.mkdtemp(prefix="apex-bench-")), dev=True)
    await mesh.start()
    clients = []
    try:
        pod1, pod2 = mesh.relay("example.com", 0), mesh.relay("example.com", 1)
        fred_client = await connect_endpoint("127.0.0.1", pod1.edge_port)
        near_client = await connect_endpoint("127.0.0.1", pod1.edge_port)
        far_client = await connect_endpoint("127.0.0.1", pod2.edge_port)
        clients = [fred_client, near_client, far_client]
        fred = await fred_client.attach("fred@example.com")
        near = await near_client.attach("barney@example.com")
        far = await far_client.attach("dino@example.com")
        pids = {
            "sender_pod": pid_of(mesh, pod1.name),
            "receiver_pod": pid_of(mesh, pod2.name),
            "endpoints": os.getpid(),
        }
        results = []
        echoes: list[float] = []
        for label, receiver in (("same_pod", near), ("other_pod", far)):
            await throughput(fred, receiver, 500)  # warm-up: connections, caches
            rate, echo_rate, cpu = await interleaved(
                fred, receiver, pids, count=args.count, rounds=args.rounds
            )
            echoes.append(echo_rate)
            p50, p99 = await latency(fred, receiver, args.rate, args.seconds)
            print(
                f"{label:>9}: {rate:,.0f} data/s, {rate / echo_rate:.0%} of the raw echo "
                f"({echo_rate:,.0f} exchanges/s, {args.rounds} alternate slices of each); "
                f"at {args.rate:.0f}/s p50 {p50:.2f} ms, p99 {p99:.2f} ms; CPU per data: "
                + ", ".join(f"{name} {micros:.0f} us" for name, micros in cpu.items())
            )
            results += [
                figure(f"relay_{label}_cpu_{name}", micros, "us/data")
                for name, micros in cpu.items()
                if label == "other_pod" or name != "receiver_pod"
            ]
            results += [
                figure(f"relay_{label}_throughput", rate, "data/s", echo_rate),
                figure(f"relay_{label}_latency_p50", p50, "ms"),
                figure(f"relay_{label}_latency_p99", p99, "ms"),
            ]
        results.append(figure("raw_beep_echo", sum(echoes) / len(echoes), "exchanges/s"))
    finally:
        for client in clients:
            await client.close()
        await mesh.stop()
    print(json.dumps(results))


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1:]))
