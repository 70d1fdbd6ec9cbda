"""Robust pubsub benchmark, phase 2: the service serving a robust topic, beside the same
run's plain topic fan-out (issue #19 "Must show").

Starts the local mesh (apexmesh.ops.localmesh: processes, two relay pods and two pubsub
pods for example.com, development run) and runs:

* ``plain``: one plain topic, 100 subscribers (each its own BEEP session, half on each
  relay pod), publications of 256 octets, 100 in flight (the relay's ``ok`` answers
  one): deliveries/s and p99 from publication to delivery;
* ``robust``: the same on a robust topic (each delivery with its subscriber's ``robust``
  option, every publication committed to the topic's stream before its ``ok``):
  deliveries/s and p99, and their ratio to ``plain`` (the issue's target: 0.7);
* ``repair``: one more robust subscriber asks, after the run, for the whole run again
  by link range (``gap``): ms until every redelivery and the ``gapreply`` arrived.

The subscribers here read raw deliveries (the stub's own cost is bench/robust_store.py's).
Every scenario prints delivered / expected; the last line is JSON: a list of figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import figure
from loads import IN_FLIGHT, Tally, windowed
from pubsub_fanout import DOMAIN, ApexSide, Result, measured

from apexmesh.client import Attachment
from apexmesh.client.outgoing import XmlContent
from apexmesh.pubsub.elements import CreateTopic, Subscribe
from apexmesh.pubsub.robust.elements import OPTION_NAME, robust_from_option
from apexmesh.pubsub.robust.operations import GapReply, GapRequest, parse_answer
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.pubsub.topic_description import TopicDescription, TopicSettings

PLAIN, ROBUST = "bench.plain", "bench.robust"
SERVICE = f"apex=pubsub@{DOMAIN}"


def report(name: str, result: Result) -> None:
    print(
        f"  {name}: {result.rate:,.0f} deliveries/s, p99 {result.latency['p99']:.1f} ms, "
        f"delivered {result.delivered:,} / {result.expected:,}, missing {result.missing}",
        flush=True,
    )


async def run(apex: ApexSide, topic: str, subscribers: int, publications: int) -> Result:
    tally = Tally([subscribers] * publications)
    await apex.subscribe(f"{topic.split('.')[1]}-sub", [topic] * subscribers, tally)

    async def publish() -> list[int]:
        return await windowed(
            lambda i: apex.publish(topic, i, time.perf_counter()), publications, IN_FLIGHT
        )

    result = await measured(tally, publish, [subscribers] * publications)
    await apex.close_subscribers()
    return result


class Repairer:
    """A robust subscriber that records the link seqs it gets, then asks for them all
    again: every delivery after the request is a redelivery (heartbeats included)."""

    def __init__(self, attachment: Attachment) -> None:
        self.attachment = attachment
        self.links: list[int] = []
        self.repairing = False
        self.redelivered = 0
        self.count: int | None = None
        self.complete = asyncio.Event()
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            received = await self.attachment.receive()
            option = next(
                (
                    o
                    for r in received.data.recipients
                    for o in r.options
                    if o.internal == OPTION_NAME
                ),
                None,
            )
            if option is None:
                answer = parse_answer(received.content)
                if isinstance(answer, GapReply):
                    self.count = answer.count
            else:
                info = robust_from_option(option)
                if not self.repairing:
                    if info.link_seq is not None and not info.heartbeat:
                        self.links.append(info.link_seq)
                    continue
                self.redelivered += 1
            if self.count is not None and self.redelivered >= self.count:
                self.complete.set()


async def repair(repairer: Repairer) -> tuple[float, int, int]:
    """(ms, link seqs redelivered, link seqs asked for) for a gap over the whole run."""
    first, last = min(repairer.links), max(repairer.links)
    repairer.repairing = True
    started = time.perf_counter()
    gap = GapRequest(topic=ROBUST, trans_id=77, link_from=first, link_to=last)
    await repairer.attachment.send(SERVICE, XmlContent(gap.to_xml()))
    async with asyncio.timeout(600):
        await repairer.complete.wait()
    return (time.perf_counter() - started) * 1000, repairer.redelivered, last - first + 1


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--publications", type=int, default=5_000)
    args = parser.parse_args(argv)
    figures: list[dict[str, Any]] = []
    async with ApexSide([PLAIN, ROBUST]) as apex:
        assert apex.publisher is not None
        await apex.create_topics([PLAIN])
        robust = RobustSettings(resolution=Resolution.BITS32, heartbeat_ms=5_000)
        create = CreateTopic(
            topic=ROBUST,
            trans_id=9,
            description=TopicDescription(settings=TopicSettings(robust=robust)),
        )
        await apex.request(apex.publisher, SERVICE, create.to_xml(), (250, 553))
        print(f"plain topic, {args.subscribers} subscribers on two relay pods", flush=True)
        plain = await run(apex, PLAIN, args.subscribers, args.publications)
        report("plain", plain)
        # On the publisher's session: the run closes every subscriber's session after it.
        attachment = await apex.clients[0].attach(f"repairer@{DOMAIN}")
        op = Subscribe(subscriber=attachment.endpoint, topic=ROBUST, trans_id=1, duration=3600)
        await apex.request(attachment, SERVICE, op.to_xml())
        repairer = Repairer(attachment)
        print(f"robust topic, {args.subscribers} subscribers on two relay pods", flush=True)
        result = await run(apex, ROBUST, args.subscribers, args.publications)
        report("robust", result)
        ratio = result.rate / plain.rate if plain.rate else 0.0
        print(f"  robust / plain: {ratio:.2f} (target 0.7)", flush=True)
        await asyncio.sleep(1.0)  # the repairer's last deliveries
        ms, count, asked = await repair(repairer)
        print(
            f"  repair by link range: {ms:,.0f} ms, redelivered {count:,} / expected {asked:,}",
            flush=True,
        )
        repairer.reader.cancel()
        figures += [
            figure("robust fan-out", result.rate, "deliveries/s", plain.rate),
            figure("robust p99", result.latency["p99"], "ms", plain.latency["p99"]),
            figure(f"repair of {count} link seqs", ms, "ms", None),
        ]
    print(json.dumps(figures))


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1:]))
