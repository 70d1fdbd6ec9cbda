"""The apex-mesh side of the pubsub benchmark (bench/pubsub_fanout.py): the local mesh in
a development run, a publisher on relay pod 1 and subscriber sessions on both relay pods,
with what the bench reads of the mesh's processes (pids, garbage collector time, and on
a Redis Cluster the commands each primary ran).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loads import Tally, stamp

from apexmesh.apex.elements import Reply
from apexmesh.client import ApexClient, Attachment, connect_endpoint
from apexmesh.client.outgoing import XmlContent
from apexmesh.client.pubsub import pubsub_message
from apexmesh.ops.localmesh import LocalMesh
from apexmesh.pubsub.elements import CreateTopic, Subscribe, topic_endpoint
from apexmesh.pubsub.subscription_elements import (
    ContentSubscribe,
    SelectorSpec,
    SubscriptionReply,
)
from tests.support.cluster_mesh import ClusterLocalMesh
from tests.support.redis_cluster import RedisClusterNodes

DOMAIN = "example.com"
#: The bench's own process in CPU tables: publisher and subscribers of both systems.
CLIENTS = "bench (endpoints)"
#: Times an operation is sent before the bench gives up on its reply.
REQUEST_ATTEMPTS = 5
#: Sessions opened (or operations sent) at once while a scenario is set up.
SETUP_WAVE = 500

#: Content scenario: selector groups (each publication matches one: 1 %).
CONTENT_GROUPS = 100


class ApexSide:
    """The local mesh, a publisher on relay pod 1 and subscribers on both pods."""

    def __init__(
        self,
        topics: Sequence[str],
        *,
        dashboard: bool = False,
        settings: dict[str, str] | None = None,
        cluster: RedisClusterNodes | None = None,
    ) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="apex-bench-pubsub-"))
        #: The Redis Cluster the mesh keeps its state on (--redis cluster), else None:
        #: the mesh's own redis-server.
        self.cluster = cluster
        self.mesh: LocalMesh
        if cluster is not None:
            self.mesh = ClusterLocalMesh(
                workdir, cluster.url, dev=True, topics=topics, settings=settings
            )
        else:
            # The dashboard only with --dashboard: it polls every pod's admin API each
            # second, which is what that option measures (issue #33: its cost must not
            # show here).
            self.mesh = LocalMesh(
                workdir, dev=True, topics=topics, dashboard=dashboard, settings=settings
            )
        self.clients: list[ApexClient] = []
        self.publisher: Attachment | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._trans = 0

    async def __aenter__(self) -> ApexSide:
        await self.mesh.start()
        client = await self._connect(0)
        self.publisher = await client.attach(f"fred@{DOMAIN}")
        return self

    async def _connect(self, pod: int) -> ApexClient:
        client = await connect_endpoint("127.0.0.1", self.mesh.relay(DOMAIN, pod).edge_port)
        self.clients.append(client)
        return client

    def pids(self) -> dict[str, int]:
        found = {
            c.name: c.process.pid
            for c in self.mesh.children
            if c.process is not None and ("example.com" in c.name or c.name == "dashboard")
        }
        if self.cluster is not None:
            for node in self.cluster.nodes:
                if node.process is not None:
                    found[f"redis :{node.port}"] = node.process.pid
        elif (pid := self.mesh.redis_pid) is not None:
            found["redis-server"] = pid
        found[CLIENTS] = os.getpid()
        return found

    async def command_counts(self) -> dict[int, int]:
        """Commands each primary of the cluster has run so far, by port ({} without one)."""
        if self.cluster is None:
            return {}
        return await asyncio.to_thread(self.cluster.command_counts)

    async def gc_seconds(self) -> dict[str, float]:
        """Seconds each relay and pubsub process spent in the garbage collector so far
        (``apexmesh_gc_pause_seconds_total`` of its /metrics)."""

        def scrape(port: int) -> float:
            url = f"http://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as answer:
                text = answer.read().decode()
            return sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("apexmesh_gc_pause_seconds_total{")
            )

        children = [
            c
            for c in self.mesh.children
            if c.process is not None and c.module in ("services.relay", "services.pubsub")
        ]
        found = await asyncio.gather(
            *(asyncio.to_thread(scrape, int(c.info["http_port"])) for c in children)
        )
        return {c.name: seconds for c, seconds in zip(children, found, strict=True)}

    async def request(
        self, attachment: Attachment, target: str, xml: bytes, accept: tuple[int, ...] = (250,)
    ) -> None:
        """Send an operation and wait for its reply; sent again (the same operation:
        idempotent) when no reply came within 10 s: a reply racing a fresh attachment's
        registration can be refused 550 by the relay pod that does not see it yet."""
        for _ in range(REQUEST_ATTEMPTS):
            await attachment.send(target, XmlContent(xml))
            try:
                async with asyncio.timeout(10):
                    while True:
                        answer = pubsub_message(await attachment.receive())
                        if isinstance(answer, Reply | SubscriptionReply):
                            if answer.code not in accept:
                                raise RuntimeError(
                                    f"{attachment.endpoint}: {xml!r} answered {answer.code}"
                                )
                            return
            except TimeoutError:
                continue
        raise RuntimeError(f"{attachment.endpoint}: no reply to {xml[:80]!r}")

    async def create_topics(self, topics: Sequence[str]) -> None:
        assert self.publisher is not None
        service = f"apex=pubsub@{DOMAIN}"
        # One outstanding request at a time keeps replies in order on one attachment;
        # topics are created by several creators at once instead.
        creators = [self.publisher]
        for index in range(min(50, len(topics)) - 1):
            client = await self._connect(index % 2)
            creators.append(await client.attach(f"creator{index}@{DOMAIN}"))

        async def create(creator: Attachment, names: Sequence[str]) -> None:
            for name in names:
                self._trans += 1
                op = CreateTopic(topic=name, trans_id=self._trans % 2_147_483_647 or 1)
                await self.request(creator, service, op.to_xml(), (250, 553))  # 553: exists

        shares = [topics[i :: len(creators)] for i in range(len(creators))]
        await asyncio.gather(*(create(c, s) for c, s in zip(creators, shares, strict=True)))

    async def subscribe(
        self,
        prefix: str,
        topic_of: Sequence[str | Sequence[str]],
        tally: Tally,
        selector_of: Callable[[int], str] | None = None,
    ) -> None:
        """One subscriber session per entry of ``topic_of`` (its topic, or its topics:
        one endpoint subscribed to each), alternating between the two relay pods; each
        subscribes (with the JMS selector ``selector_of(index)`` when given), then reads
        into ``tally``."""
        attachments: list[Attachment] = []
        service = f"apex=pubsub@{DOMAIN}"
        for start in range(0, len(topic_of), SETUP_WAVE):

            async def one(index: int) -> Attachment:
                client = await self._connect(index % 2)
                attachment = await client.attach(f"{prefix}{index}@{DOMAIN}")
                entry = topic_of[index]
                topics = (entry,) if isinstance(entry, str) else tuple(entry)

                async def subscribe(topic: str, trans_id: int) -> None:
                    op: Subscribe | ContentSubscribe = Subscribe(
                        subscriber=attachment.endpoint,
                        topic=topic,
                        trans_id=trans_id,
                        duration=3600,
                    )
                    if selector_of is not None:
                        op = ContentSubscribe(
                            subscriber=attachment.endpoint,
                            topic=topic,
                            trans_id=trans_id,
                            duration=3600,
                            selector=SelectorSpec(selector_class="JMS", text=selector_of(index)),
                        )
                    await self.request(attachment, service, op.to_xml())

                await asyncio.gather(*(subscribe(t, n) for n, t in enumerate(topics, start=1)))
                return attachment

            indices = range(start, min(len(topic_of), start + SETUP_WAVE))
            attachments += await asyncio.gather(*(one(i) for i in indices))

        async def reader(attachment: Attachment) -> None:
            while True:
                content = (await attachment.receive()).content
                if content.startswith(b"<m "):
                    content = content.split(b"'")[3]  # the stamp of a content publication
                tally.seen(content)

        self._readers = [asyncio.ensure_future(reader(a)) for a in attachments]

    def publish(self, topic: str, index: int, sent: float) -> asyncio.Future[Any]:
        assert self.publisher is not None
        return self.publisher.submit(str(topic_endpoint(topic, DOMAIN)), stamp(index, sent))

    def publish_content(self, topic: str, index: int, sent: float) -> asyncio.Future[Any]:
        """``<m g='index mod 100' s='stamp'/>``: matches the subscribers of one group."""
        assert self.publisher is not None
        head = f"{sent:<24.9f}{index:<10}"
        body = f"<m g='{index % CONTENT_GROUPS}' s='{head}'/>".encode()
        return self.publisher.submit(str(topic_endpoint(topic, DOMAIN)), XmlContent(body))

    async def send(self, topic: str, index: int, due: float) -> object:
        assert self.publisher is not None
        return await self.publisher.send(str(topic_endpoint(topic, DOMAIN)), stamp(index, due))

    async def close_subscribers(self) -> None:
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        self._readers = []
        keep, others = self.clients[:1], self.clients[1:]
        await asyncio.gather(*(c.close(timeout=10) for c in others), return_exceptions=True)
        self.clients = keep

    async def __aexit__(self, *_exc: object) -> None:
        await self.close_subscribers()
        for client in self.clients:
            await client.close(timeout=5)
        await self.mesh.stop()
