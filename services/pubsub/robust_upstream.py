"""A robust topic redistributed from another domain (draft-schwartz 2.6): the
redistributing server subscribes as a robust subscriber with a stub of its own
(XEP-0040 1: "a subscriber to a pubsub component may well be a pubsub component in
itself, representing its own community of subscribers"; 2.3: "the pubsub component's
conversation to the source is akin to that of a subscriber to a pubsub component").

Before, the upstream's deliveries were republished as they came: a delivery lost
between the domains stayed lost downstream, heartbeats were published as empty
publications, and robust delivery stopped at the domain boundary. Now, on the pod that
sequences the local topic:

1. a delivery from the topic's configured upstream (data from ``apex=pubsub/TOPIC@UP``
   carrying a ``robust`` option for ``apex=pubsub/TOPIC@OURS``) goes into the upstream
   link's :class:`~apexmesh.pubsub.robust.stub.SubscriberStub` (heartbeats and
   redeliveries too); the stub's gap requests go to ``apex=pubsub@UP`` from
   ``apex=pubsub/TOPIC@OURS``, its repairs come back the same way;
2. what the stub delivers (in order, once) is sequenced locally like a publication of
   its source (``from``), with its publish type, item and permission token: the local
   subscribers get their own links, source seqs of this server (XEP 2.3 lets them be
   "an internal sequence number given to the incoming published data ... on a per
   source basis"), and the local permission table;
3. the stub's source marks are written with each publication it brings (the commit
   script's ``upstream`` key), so a pod taking the topic over resumes the stub from
   exactly what was sequenced: what the dead owner had not committed is asked again,
   what it had is recognised by the marks and not sequenced twice;
4. the upstream topic's sequence size and heartbeat interval are asked of the upstream
   (``sourcequery``, XEP 4) before the first delivery is taken, and kept with the marks.

The upstream's answers (``gapreply``, ``sourceinfo``, refusals) reach whichever pod
the relay picks: they are queued in Redis for the owner pod, whose robust task takes
them at its next round (:meth:`UpstreamLinks.tick`). The local topic must be created
robust (its own settings) before it is redistributed; docs/robust.md "Across domains".
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.data import Data
from apexmesh.apex.elements import reply_from
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import Option
from apexmesh.pubsub.elements import service_endpoint, topic_endpoint
from apexmesh.pubsub.robust._wire import OPTION_NAME, local
from apexmesh.pubsub.robust.elements import RobustReader
from apexmesh.pubsub.robust.operations import GapReply, SourceInfo, SourceQuery, parse_answer
from apexmesh.pubsub.robust.position import LinkPosition
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.stub import Deliver, Publication, SendGap, StubEvent, SubscriberStub
from apexmesh.pubsub.wire import element_payload
from apexmesh.rpc.relay import RelaySubmitter
from apexmesh.store.robust import RobustStore
from services.pubsub.robust_owner import OwnedTopic

_log = logging.getLogger(__name__)

#: transIDs of the redistributor's requests upstream: source queries from here, the
#: stubs' gap requests from :data:`STUB_TRANS` (each link's answers are its own, so the
#: stubs share the block); above the journal's, so an upstream ``reply`` is known to be
#: one of theirs.
UPSTREAM_TRANS: Final = 1_500_000_001
STUB_TRANS: Final = 1_600_000_001
#: Deliveries held while the upstream's settings are asked for (more are dropped: the
#: stub asks for them once it runs).
WAITING: Final = 10_000
#: A source query upstream not answered is asked again after this long (ms).
QUERY_AGAIN_MS: Final = 5_000

#: ``sequence(owned, publication, content_type, upstream_state)``: commit and fan out
#: one publication the stub delivered, writing the upstream link's state with it.
Sequence = Callable[[OwnedTopic, Publication, str, str], Awaitable[None]]
TopicKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class UpstreamState:
    """What is kept of an upstream link: the upstream topic's settings and the marks of
    what was sequenced from it."""

    resolution: Resolution
    heartbeat_ms: int
    position: LinkPosition | None = None

    def dumps(self) -> str:
        value: dict[str, Any] = {"seqbits": int(self.resolution), "heartbeatms": self.heartbeat_ms}
        if self.position is not None:
            value["position"] = self.position.to_json()
        return json.dumps(value, sort_keys=True)

    @classmethod
    def loads(cls, text: str) -> UpstreamState:
        value = json.loads(text)
        position = value.get("position")
        return cls(
            resolution=Resolution(int(value["seqbits"])),
            heartbeat_ms=int(value["heartbeatms"]),
            position=None if position is None else LinkPosition.from_json(position),
        )


@dataclass(slots=True)
class UpstreamLink:
    """One redistributed topic's upstream link on its owner pod."""

    owned: OwnedTopic
    upstream: str
    state: UpstreamState | None = None
    stub: SubscriberStub | None = None
    #: Deliveries taken before the stub could run: (option, payload, content type).
    waiting: list[tuple[Option, bytes, str]] = field(default_factory=list)
    asked_ms: int | None = None
    #: (source, source seq) -> the content type its delivery had (a stub keeps payloads).
    types: dict[tuple[Endpoint, int], str] = field(default_factory=dict)
    #: One delivery at a time into the stub, and its publications committed in order.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class UpstreamLinks:
    """The upstream links of the redistributed robust topics this pod sequences."""

    def __init__(
        self,
        *,
        store: RobustStore,
        submitter: RelaySubmitter,
        sequence: Sequence,
        clock: Callable[[], int],
        wake: asyncio.Event,
    ) -> None:
        self._store = store
        self._submitter = submitter
        self._sequence = sequence
        self._clock = clock
        self._wake = wake
        self._reader = RobustReader()
        #: (domain, topic) -> the domain whose server feeds it.
        self._upstreams: dict[TopicKey, str] = {}
        self._links: dict[TopicKey, UpstreamLink] = {}
        self._trans = UPSTREAM_TRANS

    def configure(self, upstreams: Iterable[tuple[str, str, str]]) -> None:
        """The redistributed topics: (topic, our domain, upstream domain) each."""
        self._upstreams = {(domain, topic): up for topic, domain, up in upstreams}

    def stub(self, domain: str, topic: str) -> SubscriberStub | None:
        link = self._links.get((domain, topic))
        return None if link is None else link.stub

    # ------------------------------------------------------------------ deliveries

    def carried(self, domain: str, topic: str, originator: Endpoint, data: Data) -> Option | None:
        """The ``robust`` option a delivery from the topic's upstream carries for this
        server's subscription (None: not such a delivery)."""
        upstream = self._upstreams.get((domain, topic))
        if upstream is None or originator != topic_endpoint(topic, upstream):
            return None
        ours = topic_endpoint(topic, domain)
        for recipient in data.recipients:
            if recipient.identity == ours:
                for option in recipient.options:
                    if option.internal == OPTION_NAME:
                        return option
        return None

    async def delivery(
        self, owned: OwnedTopic, option: Option, payload: bytes, content_type: str
    ) -> None:
        """One delivery of the upstream link (publication, heartbeat or redelivery)."""
        link = await self._link(owned)
        async with link.lock:
            if link.stub is None:
                if len(link.waiting) < WAITING:
                    link.waiting.append((option, payload, content_type))
                await self._ask_settings(link)
                return
            await self._receive(link, option, payload, content_type)

    async def _receive(
        self, link: UpstreamLink, option: Option, payload: bytes, content_type: str
    ) -> None:
        stub = link.stub
        assert stub is not None  # noqa: S101 - the caller created it
        try:
            info = self._reader.read(option, stub.resolution)
        except ApexError as exc:
            _log.warning("upstream delivery of %s unreadable: %s", link.owned.topic, exc)
            return
        if info.source_seq is not None and not info.heartbeat:
            link.types[(info.source, info.source_seq)] = content_type
        before = self._position(link)
        await self._carry_out(link, stub.receive(info, payload, self._clock()), before)

    def _position(self, link: UpstreamLink) -> LinkPosition:
        """The stub's position now: kept with the publications the next events bring
        (a link position behind the truth only costs redeliveries the marks drop)."""
        stub = link.stub
        position = None if stub is None else stub.position()
        return position or LinkPosition(topic=link.owned.topic, epoch=1, link_seq=0, sources={})

    async def _carry_out(
        self, link: UpstreamLink, events: list[StubEvent], before: LinkPosition
    ) -> None:
        marks = dict(before.sources)
        last = before.last_source
        for event in events:
            if isinstance(event, Deliver):
                publication = event.publication
                marks[publication.source] = publication.source_seq
                last = publication.source
                position = LinkPosition(
                    topic=before.topic,
                    epoch=before.epoch,
                    link_seq=before.link_seq,
                    sources=dict(marks),
                    last_source=last,
                )
                assert link.state is not None  # noqa: S101 - a stub runs with its state
                state = UpstreamState(link.state.resolution, link.state.heartbeat_ms, position)
                ctype = link.types.pop((publication.source, publication.source_seq), "")
                await self._sequence(link.owned, publication, ctype, state.dumps())
            elif isinstance(event, SendGap):
                await self._send(link, event.request.to_xml())
            else:
                _log.info("upstream link of %s: %s", link.owned.topic, event)
        if len(link.types) > WAITING:  # types of deliveries the stub dropped as duplicates
            link.types.clear()

    # ------------------------------------------------------------------ requests, answers

    def _next_trans(self) -> int:
        self._trans = self._trans + 1 if self._trans + 1 < STUB_TRANS else UPSTREAM_TRANS
        return self._trans

    async def _send(self, link: UpstreamLink, content: bytes) -> None:
        """Data from ``apex=pubsub/TOPIC@OURS`` to ``apex=pubsub@UP`` (the link's
        subscriber asks, as any subscriber does)."""
        origin = topic_endpoint(link.owned.topic, link.owned.domain)
        outcome = await self._submitter.submit(
            str(origin),
            element_payload(origin, service_endpoint(link.upstream), content),
            key=str(origin),
            submission_id=f"upstream-{uuid.uuid4().hex}",
        )
        if outcome.code != ApexReplyCode.SUCCESS:  # the stub asks again at its timeout
            _log.info("upstream request of %s: %d %s", origin, outcome.code, outcome.text)

    async def _ask_settings(self, link: UpstreamLink) -> None:
        now = self._clock()
        if link.asked_ms is not None and now - link.asked_ms < QUERY_AGAIN_MS:
            return
        link.asked_ms = now
        query = SourceQuery(topic=link.owned.topic, trans_id=self._next_trans())
        await self._send(link, query.to_xml())

    async def answer(self, domain: str, topic: str, originator: Endpoint, body: bytes) -> bool:
        """An answer of the upstream server to a redistributor's request, on any pod:
        queued for the topic's owner (True), or not one (False)."""
        upstream = self._upstreams.get((domain, topic))
        if upstream is None or originator != service_endpoint(upstream):
            return False
        try:
            root = _dtd.parse_root(body)
            tag = local(root)
            if tag == "reply":
                trans_id = reply_from(root, require_trans_id=False).trans_id
                if trans_id is None or trans_id < UPSTREAM_TRANS:
                    return False  # the answer to the redistribution's own subscribe
            elif tag not in ("gapreply", "sourceinfo"):
                return False
        except ApexError:
            return False
        await self._store.push_upstream_answer(domain, topic, body)
        self._wake.set()
        return True

    # ------------------------------------------------------------------ the owner's round

    async def tick(self, owned: Iterable[OwnedTopic], now: int) -> None:
        """For each redistributed topic this pod owns: its queued answers, then the
        stub's deadlines; links of topics lost go."""
        mine = {(o.domain, o.topic): o for o in owned if (o.domain, o.topic) in self._upstreams}
        for key in list(self._links):
            if key not in mine or self._links[key].owned is not mine[key]:
                del self._links[key]
        for topic in mine.values():
            link = await self._link(topic)
            async with link.lock:
                for body in await self._store.take_upstream_answers(topic.domain, topic.topic):
                    await self._take_answer(link, body)
                if link.stub is None:
                    if link.waiting:
                        await self._ask_settings(link)
                elif link.stub.next_deadline() <= now:
                    await self._carry_out(link, link.stub.tick(now), self._position(link))

    def next_deadline(self) -> int | None:
        deadlines = [link.stub.next_deadline() for link in self._links.values() if link.stub]
        return min(deadlines) if deadlines else None

    async def _take_answer(self, link: UpstreamLink, body: bytes) -> None:
        try:
            answer = parse_answer(body)
        except ApexError:
            answer = None
        now = self._clock()
        if isinstance(answer, SourceInfo):
            if link.stub is None:
                settings = answer.settings
                link.state = UpstreamState(settings.resolution, settings.heartbeat_ms)
                await self._store.set_upstream_state(
                    link.owned.domain, link.owned.topic, link.state.dumps()
                )
                await self._start_stub(link)
            return
        stub = link.stub
        if stub is None:
            return
        before = self._position(link)
        if isinstance(answer, GapReply):
            await self._carry_out(link, stub.gap_answered(answer, now), before)
            return
        try:
            reply = reply_from(_dtd.parse_root(body), require_trans_id=False)
        except ApexError:
            return
        if reply.trans_id is not None and reply.code != ApexReplyCode.SUCCESS:
            await self._carry_out(link, stub.gap_refused(reply.trans_id, reply.code, now), before)

    # ------------------------------------------------------------------ links

    async def _link(self, owned: OwnedTopic) -> UpstreamLink:
        """The topic's upstream link; a pod that just took the topic reads its state
        (settings and marks) and resumes the stub from it."""
        key = (owned.domain, owned.topic)
        link = self._links.get(key)
        if link is not None and link.owned is owned:
            return link
        link = UpstreamLink(owned=owned, upstream=self._upstreams[key])
        self._links[key] = link
        stored = await self._store.upstream_state(owned.domain, owned.topic)
        if stored is not None:
            try:
                link.state = UpstreamState.loads(stored)
            except (KeyError, TypeError, ValueError) as exc:
                _log.warning("upstream state of %s unreadable (%s): asked again", key, exc)
        if link.state is not None:
            await self._start_stub(link)
        return link

    async def _start_stub(self, link: UpstreamLink) -> None:
        """The stub, from the kept marks (or fresh: the subscription's link from its
        start), then the deliveries that waited for it."""
        state = link.state
        assert state is not None  # noqa: S101 - called once the settings are known
        link.stub = SubscriberStub(
            link.owned.topic,
            resolution=state.resolution,
            heartbeat_ms=state.heartbeat_ms,
            now_ms=self._clock(),
            fresh=True,
            resume=state.position,
            first_trans_id=STUB_TRANS,
        )
        waiting, link.waiting = link.waiting, []
        for option, payload, content_type in waiting:
            await self._receive(link, option, payload, content_type)


__all__ = ["UPSTREAM_TRANS", "UpstreamLink", "UpstreamLinks", "UpstreamState"]
