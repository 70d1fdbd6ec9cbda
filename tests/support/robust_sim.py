"""A simulated robust pubsub service and lossy network for the subscriber stub's tests.

The service side follows docs/robust.md exactly as phase 2 will: one link (one
subscriber, one topic) numbered by :class:`LinkSender`, a topic stream in publication
order, a link record (epoch, link seq -> stream index or heartbeat), gap answers by link
range from the record (refused 550 once the link context is gone or for another epoch)
and by source from the stream (resuming after the latest named position, every source,
only what the subscriber may see), heartbeats on an idle link. The network between the
service and the stub loses, reorders and duplicates what it carries, all driven by one
seeded ``random.Random`` so that Hypothesis can shrink a failing run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.robust.elements import (
    RobustInfo,
)
from apexmesh.pubsub.robust.link import LinkSender
from apexmesh.pubsub.robust.operations import (
    GapReply,
    GapRequest,
)
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.stub import (
    Deliver,
    RepairRefused,
    SendGap,
    StubEvent,
    SubscriberStub,
)

TOPIC = "data.topics"
SERVICE = Endpoint.parse("apex=pubsub@localhost")
SOURCES = (
    Endpoint.parse("publisher@fromaplace.net"),
    Endpoint.parse("publisher@elsewhere.net"),
    Endpoint.parse("third@example.com"),
)


@dataclass
class Entry:
    source: Endpoint
    source_seq: int
    permitted: bool

    @property
    def key(self) -> tuple[str, int]:
        return (str(self.source), self.source_seq)


@dataclass
class Refusal:
    trans_id: int
    code: int


Message = tuple[RobustInfo, bytes] | GapReply | Refusal


@dataclass
class Service:
    resolution: Resolution
    heartbeat_ms: int
    sender: LinkSender = field(init=False)
    stream: list[Entry] = field(default_factory=list)
    counters: dict[Endpoint, int] = field(default_factory=dict)
    #: epoch -> link seq -> stream index (None: heartbeat)
    record: dict[int, dict[int, int | None]] = field(default_factory=dict)
    #: Link seqs the record keeps (older ones: 550, "beyond retention"); None: all.
    record_retention: int | None = None
    #: Stream entries kept (older ones cannot be found or resent); None: all.
    stream_retention: int | None = None

    def _remember(self, link: int, index: int | None) -> None:
        record = self.record.setdefault(self.sender.epoch, {})
        record[link] = index
        if self.record_retention is not None and len(record) > self.record_retention:
            del record[next(iter(record))]

    def _first_kept(self) -> int:
        if self.stream_retention is None:
            return 0
        return max(0, len(self.stream) - self.stream_retention)

    def __post_init__(self) -> None:
        self.sender = LinkSender(self.resolution)

    def start_at(self, seq: int) -> None:
        """Put the link at ``seq`` of epoch 1 (to exercise the wrap)."""
        self.sender = LinkSender(self.resolution, seq=seq, epoch=1, resync_pending=False)

    def publish(
        self, source: Endpoint, permitted: bool, now: int
    ) -> tuple[RobustInfo, bytes] | None:
        seq = self.counters.get(source, 0) + 1
        self.counters[source] = seq
        self.stream.append(Entry(source, seq, permitted))
        link = self.sender.deliver(permitted=permitted, now_ms=now)
        if link is None:
            return None
        self._remember(link, len(self.stream) - 1)
        return self._info(len(self.stream) - 1, link, self.sender.epoch), self._payload(
            len(self.stream) - 1
        )

    def heartbeat(self, now: int) -> tuple[RobustInfo, bytes] | None:
        last = self.sender.last_sent_ms
        if last is not None and now - last < self.heartbeat_ms:
            return None
        link = self.sender.heartbeat(now)
        self._remember(link, None)
        info = RobustInfo(
            link_seq=link, link_epoch=self.sender.epoch, source=SERVICE, heartbeat=True
        )
        return info, b""

    def lose_context(self) -> None:
        self.record.clear()
        self.sender.lose_context()

    def _payload(self, index: int) -> bytes:
        entry = self.stream[index]
        return f"{entry.source} {entry.source_seq}".encode()

    def _info(
        self, index: int, link: int | None, epoch: int | None, gap: tuple[int, int] | None = None
    ) -> RobustInfo:
        entry = self.stream[index]
        return RobustInfo(
            link_seq=link,
            link_epoch=epoch,
            source_seq=entry.source_seq,
            source=entry.source,
            gap=None if gap is None else gap[0],
            gap_seq=None if gap is None else gap[1],
        )

    def answer(self, request: GapRequest) -> list[Message]:
        if request.by_link:
            return self._by_link(request)
        return self._by_source(request)

    def _by_link(self, request: GapRequest) -> list[Message]:
        epoch = self.sender.epoch
        record = self.record.get(epoch)
        if record is None or (request.link_epoch is not None and request.link_epoch != epoch):
            return [Refusal(request.trans_id, 550)]
        seq = request.link_from
        assert seq is not None
        last = request.link_to if request.link_to is not None else self.sender.seq
        out: list[Message] = []
        while True:
            if seq not in record:
                return [Refusal(request.trans_id, 550)]
            index = record[seq]
            if index is not None and index < self._first_kept():
                return [Refusal(request.trans_id, 550)]
            if index is None:
                info = RobustInfo(link_seq=seq, link_epoch=epoch, source=SERVICE, heartbeat=True)
                out.append((info, b""))
            else:
                out.append((self._info(index, seq, epoch), self._payload(index)))
            if seq == last:
                break
            seq = self.resolution.next(seq)
        out.append(GapReply(topic=TOPIC, trans_id=request.trans_id, count=len(out)))
        return out

    def _by_source(self, request: GapRequest) -> list[Message]:
        # Naming nothing asks for everything since the link began (index 0 here).
        if not request.sources and self._first_kept() > 0:
            return [Refusal(request.trans_id, 550)]
        start = 0
        named = {(str(src), after) for src, after in request.sources}
        kept = self._first_kept()
        found = [i for i, entry in enumerate(self.stream) if entry.key in named and i >= kept]
        if request.sources:
            if not found:
                return [Refusal(request.trans_id, 550)]
            start = max(found) + 1
        after = {str(src): seq for src, seq in request.sources}
        chosen = [
            i
            for i in range(start, len(self.stream))
            if self.stream[i].permitted
            and self.stream[i].source_seq > after.get(str(self.stream[i].source), 0)
        ]
        out: list[Message] = [
            (self._info(i, None, None, (request.trans_id, n)), self._payload(i))
            for n, i in enumerate(chosen, start=1)
        ]
        out.append(GapReply(topic=TOPIC, trans_id=request.trans_id, count=len(chosen)))
        return out


@dataclass
class Network:
    rng: random.Random
    loss: float
    duplication: float
    in_flight: list[Message] = field(default_factory=list)

    def send(self, message: Message) -> None:
        if self.rng.random() < self.loss:
            return
        self.in_flight.append(message)
        if self.rng.random() < self.duplication:
            self.in_flight.append(message)

    def take(self) -> Message | None:
        if not self.in_flight:
            return None
        # Mostly in order, sometimes any message in flight (reordering).
        index = 0 if self.rng.random() < 0.6 else self.rng.randrange(len(self.in_flight))
        return self.in_flight.pop(index)


@dataclass
class Outcome:
    delivered: list[tuple[str, int]]
    expected: list[tuple[str, int]]
    refused: list[RepairRefused]
    stub: SubscriberStub


def run(
    rng: random.Random,
    *,
    publications: int,
    loss: float,
    duplication: float,
    deny: float = 0.0,
    context_losses: int = 0,
    resolution: Resolution = Resolution.BITS16,
    start_at: int | None = None,
    heartbeat_ms: int = 100,
    record_retention: int | None = None,
    stream_retention: int | None = None,
    reorder_ms: int = 0,
) -> Outcome:
    """Publish, deliver through the lossy network, repair; then let the network settle
    (lossless) until the stub has everything or the step limit says it never will."""
    service = Service(resolution, heartbeat_ms)
    service.record_retention = record_retention
    service.stream_retention = stream_retention
    now = 0
    expect = None
    if start_at is not None:
        service.start_at(start_at)
        expect = (1, resolution.next(start_at))
    stub = SubscriberStub(
        TOPIC,
        resolution=resolution,
        heartbeat_ms=heartbeat_ms,
        now_ms=now,
        expect=expect,
        reorder_ms=reorder_ms,
    )
    network = Network(rng, loss, duplication)
    delivered: list[tuple[str, int]] = []
    refused: list[RepairRefused] = []
    loss_points = (
        set(rng.sample(range(1, publications), context_losses)) if context_losses else set()
    )

    def handle(events: list[StubEvent]) -> None:
        for event in events:
            if isinstance(event, Deliver):
                delivered.append((str(event.publication.source), event.publication.source_seq))
            elif isinstance(event, SendGap):
                # The request itself may be lost on the way (the stub's timeout repeats it).
                if rng.random() >= network.loss:
                    for message in service.answer(event.request):
                        network.send(message)
            elif isinstance(event, RepairRefused):
                refused.append(event)

    def step() -> None:
        message = network.take()
        if message is None:
            return
        if isinstance(message, GapReply):
            handle(stub.gap_answered(message, now))
        elif isinstance(message, Refusal):
            handle(stub.gap_refused(message.trans_id, message.code, now))
        else:
            handle(stub.receive(message[0], message[1], now))

    def advance(ms: int) -> None:
        nonlocal now
        now += ms
        beat = service.heartbeat(now)
        if beat is not None:
            network.send(beat)
        if now >= stub.next_deadline():
            handle(stub.tick(now))

    for number in range(publications):
        if number in loss_points:
            service.lose_context()
        sent = service.publish(rng.choice(SOURCES), rng.random() >= deny, now)
        if sent is not None:
            network.send(sent)
        for _ in range(rng.randrange(3)):
            step()
        advance(rng.randrange(0, 30))
    network.loss = 0.0
    network.duplication = 0.0
    expected = [e.key for e in service.stream if e.permitted]
    # Settled = nothing in flight, nothing waited for, and heartbeats had time to show a
    # lost tail (several intervals after the last publication).
    quiet_after = now + 5 * heartbeat_ms
    for _ in range(20_000):
        if not network.in_flight and (
            delivered == expected or (stub.settled and now >= quiet_after)
        ):
            break
        if network.in_flight:
            step()
        else:
            advance(10)
    return Outcome(delivered, expected, refused, stub)
