"""What watching the mesh costs a pubsub pod: the dashboard open on 100,000 topics
(issue #33).

Starts a redis-server of its own, commits ``--topics`` topics with one subscription each
through the pubsub store (the Lua commit the service uses: the topics, the subscriptions
and their events in the log), then a pubsub pod and the dashboard as processes (the
dashboard's context lists that pod). Once the pod's catalogue holds every topic, it
measures the pod process's CPU (user + system, from /proc) over ``--window`` seconds in
three states:

* ``open``: the dashboard polling every second with a browser's event stream open on
  it (what the page receives), and the topics view's page read every 10 s;
* ``idle``: the same pod with the dashboard stopped (what the pod costs on its own);
* ``baseline``: what the dashboard did before issue #33, the whole ``/topics`` and
  ``/subscriptions`` listings read once a second, one after the other.

and, apart from the pod's own background (which grows with the catalogue it holds),
the CPU of the dashboard's reads alone: 300 rounds of its calls back to back, less the
idle rate over that time, per round (one round a second). The issue's target: that
figure, and ``open`` less ``idle``, under 2 % of a core. The last line of output is JSON: a
list of figures (name, value, unit, baseline, ratio).

    .venv/bin/python bench/dashboard_cost.py               # 100,000 topics, 30 s windows
    .venv/bin/python bench/dashboard_cost.py --topics 10000 --window 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from figures import figure
from loads import cpu_seconds, free_port
from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import RedisError

from apexmesh.aio.tasks import within
from apexmesh.apex.endpoint import Endpoint
from apexmesh.ops.targets import Context, Target, write_context
from apexmesh.pubsub.changes import Subscribed, Subscription, TopicCreated
from apexmesh.store.keys import Keys
from apexmesh.store.pubsub import PubsubStore

ROOT = Path(__file__).resolve().parents[1]
DOMAIN = "example.com"
PREFIX = "dashcost"
#: Commits in flight while seeding.
WAVE = 400
#: Seconds a process may take to come up.
START_SECONDS = 1800.0


async def seed(redis: Redis, topics: int) -> None:
    """``topics`` topics, each with one subscriber whose lease runs for a day."""
    store = PubsubStore(redis, Keys(PREFIX), "bench-seed")
    owner = Endpoint.parse(f"fred@{DOMAIN}")
    now = int(time.time() * 1000)

    async def one(index: int) -> None:
        name = f"bench.{index:06}"
        who = Endpoint.parse(f"s{index}@{DOMAIN}")
        lease = Subscription(
            topic=name, subscriber=who, originator=who, trans_id=1, expires_ms=now + 86_400_000
        )
        changes: list[Any] = [TopicCreated(name, owner), Subscribed(lease, renewed=False)]
        if await store.commit(DOMAIN, name, None, changes, [], now) is None:
            raise RuntimeError(f"seeding {name} was refused")

    for start in range(0, topics, WAVE):
        await asyncio.gather(*(one(i) for i in range(start, min(start + WAVE, topics))))


class Bench:
    """The processes of one run, stopped by :meth:`close`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.read_token = secrets.token_urlsafe(24)
        self.admin_token = secrets.token_urlsafe(24)
        self.processes: dict[str, asyncio.subprocess.Process] = {}
        self.redis_port = free_port()
        self.pod_port = free_port()
        self.dashboard_port = free_port()

    async def start_redis(self) -> Redis:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/install installs it)")
        self.processes["redis"] = await asyncio.create_subprocess_exec(
            binary,
            *("--bind", "127.0.0.1", "--port", str(self.redis_port), "--save", ""),
            *("--appendonly", "no"),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        pool = BlockingConnectionPool(host="127.0.0.1", port=self.redis_port, max_connections=16)
        redis = Redis.from_pool(pool)
        deadline = time.monotonic() + 30
        while True:
            try:
                await redis.ping()
            except (OSError, RedisError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)  # not listening yet
            else:
                return redis

    async def spawn(self, name: str, module: str, env: dict[str, str]) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        self.processes[name] = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            module,
            env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
            stdout=log,
            stderr=log,
        )

    async def start_pod(self) -> None:
        await self.spawn(
            "pubsub",
            "services.pubsub",
            {
                "APEXMESH_DEV": "1",
                "APEXMESH_REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
                "APEXMESH_REDIS_PREFIX": PREFIX,
                "APEXMESH_ADMIN_TOKEN": self.admin_token,
                "APEXMESH_ADMIN_READ_TOKEN": self.read_token,
                "APEXMESH_PUBSUB_DOMAINS": DOMAIN,
                "APEXMESH_PUBSUB_POD_ID": "pubsub-bench-1",
                # Nothing is published: the access service and relays are never called.
                "APEXMESH_ACCESS_ADDRESS": "127.0.0.1:9",
                "APEXMESH_RELAY_ADDRESSES": "127.0.0.1:9",
                "APEXMESH_PUBSUB_GRPC_PORT": str(free_port()),
                "APEXMESH_PUBSUB_HTTP_PORT": str(self.pod_port),
                "APEXMESH_LOG_LEVEL": "WARNING",
            },
        )

    async def start_dashboard(self) -> None:
        context = self.workdir / "context.yaml"
        write_context(
            context,
            Context(
                name="bench",
                services=(
                    Target(
                        name="pubsub-example.com-1",
                        service="pubsub",
                        domain=DOMAIN,
                        admin_url=f"http://127.0.0.1:{self.pod_port}",
                    ),
                ),
                admin_token=self.admin_token,
                read_token=self.read_token,
            ),
        )
        await self.spawn(
            "dashboard",
            "services.dashboard",
            {
                "APEXMESH_DASHBOARD_CONTEXT": str(context),
                "APEXMESH_DASHBOARD_TOKEN": self.read_token,
                "APEXMESH_DASHBOARD_HTTP_PORT": str(self.dashboard_port),
                "APEXMESH_LOG_LEVEL": "WARNING",
            },
        )

    async def stop(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await within(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()

    async def close(self) -> None:
        for name in list(self.processes)[::-1]:
            await self.stop(name)

    def pid(self, name: str) -> int:
        return self.processes[name].pid


async def until(what: str, check: Any, seconds: float = START_SECONDS) -> Any:
    """Poll ``check()`` (an awaitable factory) until it returns a true value."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            value = await check()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        await asyncio.sleep(0.2)  # polling a process over HTTP: no event to await
    raise RuntimeError(f"{what}: not within {seconds:.0f} s")


async def window(pid: int, seconds: float) -> float:
    """The process's CPU over ``seconds``, as a percentage of one core."""
    began, cpu = time.monotonic(), cpu_seconds(pid)
    await asyncio.sleep(seconds)
    return 100 * (cpu_seconds(pid) - cpu) / (time.monotonic() - began)


async def open_browser(http: httpx.AsyncClient, stop: asyncio.Event) -> int:
    """What an open overview receives (the event stream), with the topics view's
    page read every 10 s; the number of states received."""
    states = 0

    async def pages() -> None:
        while not stop.is_set():
            await http.get("/api/topics", params={"domain": DOMAIN, "limit": 50})
            await http.get("/api/history")
            try:
                await within(stop.wait(), 10)
            except TimeoutError:
                continue

    pager = asyncio.create_task(pages())
    async with http.stream("GET", "/api/events", timeout=None) as events:
        async for line in events.aiter_lines():
            if line.startswith("event: state"):
                states += 1
            if stop.is_set():
                break
    await pager
    return states


async def rounds_cost(
    pod: httpx.AsyncClient, root: str, pid: int, idle: float, rounds: int
) -> float:
    """CPU of the pod per second of polling, measured apart from its background: the
    calls of ``rounds`` dashboard rounds back to back (``/readyz``, ``/metrics``,
    ``/summary?first=20``, and ``/info`` every tenth), the CPU minus the idle rate over
    the same time, per round; one round a second makes it a percentage of a core."""
    began, cpu = time.monotonic(), cpu_seconds(pid)
    for index in range(rounds):
        (await pod.get(f"{root}/readyz")).raise_for_status()
        (await pod.get(f"{root}/metrics")).raise_for_status()
        (await pod.get("/summary", params={"first": 20})).raise_for_status()
        if index % 10 == 0:
            (await pod.get("/info")).raise_for_status()
    elapsed = time.monotonic() - began
    spent = cpu_seconds(pid) - cpu - idle / 100 * elapsed
    return 100 * max(0.0, spent) / rounds


async def old_dashboard(pod: httpx.AsyncClient, stop: asyncio.Event) -> int:
    """The reads of the dashboard before issue #33: every listing, whole, each second."""
    rounds = 0
    while not stop.is_set():
        began = time.monotonic()
        (await pod.get("/topics")).raise_for_status()
        (await pod.get("/subscriptions")).raise_for_status()
        rounds += 1
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
    return rounds


async def run(topics: int, seconds: float) -> list[dict[str, Any]]:
    bench = Bench(Path(tempfile.mkdtemp(prefix="apex-bench-dashboard-")))
    try:
        redis = await bench.start_redis()
        began = time.monotonic()
        await seed(redis, topics)
        print(f"seeded {topics} topics in {time.monotonic() - began:.1f} s", flush=True)
        await redis.aclose()
        await bench.start_pod()
        pod = httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{bench.pod_port}/admin/v1",
            headers={"Authorization": f"Bearer {bench.read_token}"},
            timeout=600,
        )

        async def loaded() -> bool:
            answer = await pod.get("/summary")
            return answer.status_code == 200 and answer.json()["domains"][0]["topics"] >= topics

        await until("the pod's catalogue", loaded)
        print(f"pod up, catalogue loaded ({time.monotonic() - began:.1f} s)", flush=True)
        pid = bench.pid("pubsub")

        idle = await window(pid, seconds)
        print(f"idle pod: {idle:.2f} % of a core", flush=True)
        per_round = await rounds_cost(pod, f"http://127.0.0.1:{bench.pod_port}", pid, idle, 300)
        print(f"one dashboard round a second: {per_round:.2f} % of a core", flush=True)

        await bench.start_dashboard()
        base = f"http://127.0.0.1:{bench.dashboard_port}"
        browser = httpx.AsyncClient(base_url=base, timeout=60)
        await until("the dashboard", lambda: ready(browser))
        await browser.get(f"/login?token={bench.read_token}")  # the session cookie
        stop = asyncio.Event()
        watcher = asyncio.create_task(open_browser(browser, stop))
        await asyncio.sleep(3)  # the first poll rounds and the stream under way
        opened = await window(pid, seconds)
        stop.set()
        states = await watcher
        await browser.aclose()
        print(f"dashboard open: {opened:.2f} % of a core ({states} states)", flush=True)
        await bench.stop("dashboard")

        stop = asyncio.Event()
        poller = asyncio.create_task(old_dashboard(pod, stop))
        before = await window(pid, seconds)
        stop.set()
        rounds = await poller
        print(f"old reads: {before:.2f} % of a core ({rounds} rounds)", flush=True)
        await pod.aclose()
    finally:
        await bench.close()
    return [
        figure(f"pubsub pod CPU, dashboard open on {topics} topics", opened, "% of a core", before),
        figure("pubsub pod CPU, no dashboard", idle, "% of a core"),
        figure("pubsub pod CPU of the dashboard's reads (a round a second)", per_round, "%"),
        figure("rounds of the old whole listings in the window", rounds, "rounds"),
    ]


async def ready(http: httpx.AsyncClient) -> bool:
    return (await http.get("/readyz")).status_code == 200


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--window", type=float, default=30.0, help="seconds per measure")
    args = parser.parse_args()
    figures = asyncio.run(run(args.topics, args.window))
    print(json.dumps(figures))
    return 0 if figures[2]["value"] < 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
