"""The README's run command: the whole mesh on this machine, and a short demo.

Starts redis-server (with a password), two relay pods for example.com, one for
rubble.com, an access, a report and a presence service per domain and a pubsub pod behind
each relay pod, each its own process (apexmesh.ops.localmesh), none in development mode,
waits until all are ready, then: fred@example.com (on relay pod 1) sends to
barney@example.com (attached to pod 2) and to wilma@rubble.com (across domains), each
with statusRequest, and to dino@example.com, who is not attached. The relays require
privacy (their greeting offers only TLS before tuning): every endpoint tunes TLS, then
authenticates with SASL SCRAM-SHA-256 under its full identity. It prints what arrives
and the reports that come back; barney then subscribes to fred's presence (RFC 3343) and
sees fred leave and attach again; a pubsub topic gets two subscribers and a
publication; finally fred sends to dino, not attached, with hold4Endpoint and
dataTiming (RFC 3342): dino attaches and gets it, fred gets the final hop report. It
then prints the dashboard's address and the line that points apexctl at this mesh (its
context file, apexctl.yaml in the workdir), and keeps the mesh running until interrupted
(or exits with --exit-after-demo). With --snapshot it then runs the Spark snapshot job
once per domain, as the chart's CronJob does (``python -m spark.snapshot``, storage in the
workdir), and prints what each run wrote (docs/snapshot.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import ssl
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from apexmesh.aio.tasks import within
from apexmesh.apex.presence import Publish, check_timestamp
from apexmesh.apex.timing import DATA_TIMING, DataTiming, data_timing_of
from apexmesh.client import ApexClient, XmlContent, connect_endpoint
from apexmesh.client.attachment import Attachment
from apexmesh.client.presence import PresenceClient
from apexmesh.client.pubsub import PubsubClient
from apexmesh.ops.localmesh import DEMO_TOPIC, DOMAINS, LocalMesh, Relay, snapshot_environment

TIMEOUT = 10.0


def say(who: str, text: str) -> None:
    print(f"{who:>18} | {text}", flush=True)


async def endpoint(mesh: LocalMesh, relay: Relay, name: str, context: ssl.SSLContext) -> ApexClient:
    return await connect_endpoint(
        "127.0.0.1",
        relay.edge_port,
        ssl_context=context,
        server_hostname="localhost",
        sasl=("SCRAM-SHA-256", name, mesh.passwords[name]),
    )


async def fred_state(presence: PresenceClient) -> str:
    """Wait for the next publish about fred and say whether fred is attached."""
    while True:
        message = await within(presence.next_message(), TIMEOUT)
        if isinstance(message, Publish):
            for item in message.presence.tuples:
                if item.destination == "apex:fred@example.com":
                    stamp = check_timestamp(message.time_stamp, "timeStamp")
                    attached = item.available_at(stamp)
                    return "fred@example.com " + ("attached" if attached else "left")


async def pubsub_step(fred: Attachment, barney: Attachment, wilma: Attachment) -> None:
    """A topic with two subscribers on different relay pods and a publisher."""
    pubsub = {
        "fred@example.com": PubsubClient(fred),
        "barney@example.com": PubsubClient(barney),
        "wilma@rubble.com": PubsubClient(wilma, domain="example.com"),
    }
    try:
        answer = await pubsub["barney@example.com"].create_topic(DEMO_TOPIC)
        say("barney@example.com", f"createtopic {DEMO_TOPIC}: {answer.to_xml().decode()}")
        for who in ("fred@example.com", "barney@example.com"):
            answer = await pubsub[who].subscribe(DEMO_TOPIC, duration=60)
            say(who, f"subscribe {DEMO_TOPIC}: {answer.to_xml().decode()}")
        topics = await pubsub["fred@example.com"].list_topics()
        say("fred@example.com", f"listtopics: {', '.join(topics)}")
        await pubsub["wilma@rubble.com"].publish(
            DEMO_TOPIC, b"bedrock quarry closes early", content_type="text/plain"
        )
        say("wilma@rubble.com", f"published to apex=pubsub/{DEMO_TOPIC}@example.com")
        for who in ("fred@example.com", "barney@example.com"):
            topic, data = await within(pubsub[who].next_publication(), TIMEOUT)
            say(who, f"pubsub {topic}: received {data.content!r} from {data.originator}")
    finally:
        for helper in pubsub.values():
            await helper.aclose()


async def party_step(
    mesh: LocalMesh, fred: Attachment, context: ssl.SSLContext, clients: list[ApexClient]
) -> None:
    """RFC 3342: data held for an endpoint that is not attached (hold4Endpoint), with a
    deadline and a final hop report (dataTiming), delivered when it attaches."""
    result = await fred.send(
        "dino@example.com",
        b"pick me up at five",
        content_type="text/plain",
        hold=True,
        timing=DataTiming(no_later_than=60_000, return_trip=20_000),
    )
    say("fred@example.com", "sent to dino@example.com (not attached) with hold4Endpoint and")
    say("fred@example.com", "dataTiming noLaterThan 60000 returnTrip 20000: relay said ok")
    await asyncio.sleep(0.5)
    pod2 = mesh.relay("example.com", 1)
    dino_client = await endpoint(mesh, pod2, "dino@example.com", context)
    clients.append(dino_client)
    dino = await dino_client.attach("dino@example.com")
    say("dino@example.com", f"attached to {pod2.name}")
    data = await within(dino.receive(), TIMEOUT)
    (option,) = [o for o in data.options if o.internal == DATA_TIMING]
    left = data_timing_of(option).no_later_than
    say("dino@example.com", f"received held {data.content!r}, noLaterThan now {left} ms")
    for report in await result.reports(1, timeout=TIMEOUT):
        for destination in report.destinations:
            say(
                "fred@example.com",
                f"final hop report: {destination.identity} -> {int(destination.reply.code)}",
            )


async def demo(mesh: LocalMesh) -> None:
    context = ssl.create_default_context(cafile=str(mesh.ca_file))
    pod1, pod2 = mesh.relay("example.com", 0), mesh.relay("example.com", 1)
    rubble = mesh.relay("rubble.com", 0)
    clients = []
    try:
        fred_client = await endpoint(mesh, pod1, "fred@example.com", context)
        barney_client = await endpoint(mesh, pod2, "barney@example.com", context)
        wilma_client = await endpoint(mesh, rubble, "wilma@rubble.com", context)
        clients += [fred_client, barney_client, wilma_client]
        fred = await fred_client.attach("fred@example.com")
        say("fred@example.com", f"attached to {pod1.name} (TLS + SCRAM-SHA-256)")
        barney = await barney_client.attach("barney@example.com")
        say("barney@example.com", f"attached to {pod2.name}")
        wilma = await wilma_client.attach("wilma@rubble.com")
        say("wilma@rubble.com", f"attached to {rubble.name}")

        result = await fred.send(
            ["barney@example.com", "wilma@rubble.com"],
            b"yabba dabba doo",
            content_type="text/plain",
            status_request=True,
        )
        say(
            "fred@example.com",
            "sent 'yabba dabba doo' to barney@example.com and "
            "wilma@rubble.com with statusRequest: relay said ok",
        )
        for who, attachment in (("barney@example.com", barney), ("wilma@rubble.com", wilma)):
            data = await within(attachment.receive(), TIMEOUT)
            say(who, f"received {data.content!r} ({data.content_type}) from {data.originator}")
        reports = await result.reports(2, timeout=TIMEOUT)
        for report in reports:
            for destination in report.destinations:
                say(
                    "fred@example.com",
                    f"statusResponse transID {report.trans_id}: "
                    f"{destination.identity} -> {int(destination.reply.code)}",
                )

        missing = await fred.send(
            "dino@example.com", XmlContent(b"<note>anyone home?</note>"), status_request=True
        )
        say("fred@example.com", "sent a note to dino@example.com, who is not attached")
        for report in await missing.reports(1, timeout=TIMEOUT):
            for destination in report.destinations:
                reply = destination.reply
                say(
                    "fred@example.com",
                    f"statusResponse: {destination.identity} -> {int(reply.code)} {reply.text}",
                )

        # Presence (RFC 3343): barney subscribes to fred's presence entry and sees the
        # mesh's own tuple for fred change as fred leaves and comes back.
        presence = PresenceClient(barney)
        subscription = await presence.subscribe("fred@example.com", duration=60)
        say("barney@example.com", "subscribed to fred@example.com's presence")
        say("barney@example.com", f"presence: {await fred_state(presence)}")
        await fred.terminate()
        say("fred@example.com", "terminated its attachment")
        say("barney@example.com", f"presence: {await fred_state(presence)}")
        fred = await fred_client.attach("fred@example.com")
        say("fred@example.com", f"attached again to {pod1.name}")
        say("barney@example.com", f"presence: {await fred_state(presence)}")
        await presence.terminate(subscription)
        answer = await within(presence.next_message(), TIMEOUT)
        say("barney@example.com", f"ended the subscription: {answer.to_xml().decode()}")

        # Pubsub (draft-schwartz-apex-pubsub, issue #7): barney creates a topic, fred
        # (pod 1) and barney (pod 2) subscribe, wilma publishes from rubble.com; the
        # relays replicate one data element to both subscribers.
        await pubsub_step(fred, barney, wilma)

        # The party pack (RFC 3342, issue #5): hold4Endpoint and dataTiming.
        await party_step(mesh, fred, context, clients)
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()


async def snapshot_step(mesh: LocalMesh, workdir: Path) -> bool:
    """Run the snapshot job once per domain (each domain's services use their own key
    prefix), the domains' runs side by side (each is mostly a JVM starting), and print
    what each wrote; False when a run failed."""
    redis_url = getattr(mesh, "redis_url", None)
    if not isinstance(redis_url, str):
        say("snapshot", "this mesh does not expose its Redis: no snapshot run")
        return False

    async def one(domain: str) -> bool:
        env = {**os.environ, **snapshot_environment(redis_url, domain, workdir)}
        storage = env["APEXMESH_SNAPSHOT_STORAGE"]
        say("snapshot", f"{domain}: python -m spark.snapshot (storage {storage})")
        job = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "spark.snapshot",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await job.communicate()
        if job.returncode != 0:
            say("snapshot", f"{domain}: failed ({job.returncode}): {err.decode()[-2000:]}")
            return False
        for line in out.decode().splitlines():
            if line.startswith("snapshot "):
                say("snapshot", f"{domain}: {line}")
        for line in written_files(Path(storage), workdir):
            say("snapshot", line)
        return True

    return all(await asyncio.gather(*(one(domain) for domain in DOMAINS)))


def written_files(storage: Path, workdir: Path) -> list[str]:
    """A line per file the snapshot job wrote under ``storage`` (a quick directory walk
    once the job has ended)."""
    return [
        f"  {path.relative_to(workdir)} ({path.stat().st_size} bytes)"
        for path in sorted(storage.rglob("*"))
        if path.is_file() and not path.name.startswith(".")
    ]


async def main(argv: list[str], make_mesh: Callable[[Path], LocalMesh] = LocalMesh) -> int:
    """Start a mesh (``make_mesh``: the local processes, or scripts/container_mesh.py's
    containers), run the demo, stop."""
    parser = argparse.ArgumentParser(description="Run the apex-mesh locally with a demo.")
    parser.add_argument(
        "--exit-after-demo",
        action="store_true",
        help="stop the mesh after the demo instead of waiting for Ctrl-C",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where logs, certificates and Redis data go (default: a temp dir)",
    )
    parser.add_argument(
        "--snapshot",
        action="store_true",
        help="after the demo, run the Spark snapshot job once per domain and print what it wrote",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="log level of every service (JSON lines in the workdir's *.log)",
    )
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="apex-mesh-"))
    mesh = make_mesh(workdir)
    mesh.log_level = args.log_level
    say("mesh", f"starting redis-server and services; logs in {workdir}")
    snapshot_failed = False
    try:
        await mesh.start()
        for child in mesh.children:
            ports = {k: v for k, v in child.info.items() if k.endswith("_port")}
            say("mesh", f"{child.name} ready {ports}")
        await demo(mesh)
        if args.snapshot and not await snapshot_step(mesh, workdir):
            snapshot_failed = True
        if mesh.dashboard_url:
            say("mesh", f"dashboard: {mesh.dashboard_url}login?token={mesh.read_token}")
        # The one line to point apexctl at this mesh (docs/operations.md).
        venv = Path(sys.executable).parent
        say("mesh", f'apexctl: export APEXCTL_CONTEXT={mesh.context_file} PATH="{venv}:$PATH"')
        if not args.exit_after_demo:
            say("mesh", "running; press Ctrl-C to stop")
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
    finally:
        say("mesh", "stopping")
        await mesh.stop()
        codes = mesh.exit_codes()
        say("mesh", f"stopped; exit codes {codes}")
    clean = all(code == 0 for code in mesh.exit_codes().values())
    return 0 if clean and not snapshot_failed else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
