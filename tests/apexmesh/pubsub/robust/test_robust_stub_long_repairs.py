"""The subscriber stub after a long absence (issue #29): repairs of any length, asked
once, never given up for a transient refusal (docs/robust.md "The subscriber stub")."""

from __future__ import annotations

import pytest

from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.robust.elements import RobustInfo
from apexmesh.pubsub.robust.operations import GapReply, GapRequest
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.stub import (
    Delayed,
    Deliver,
    RepairRefused,
    SendGap,
    StubEvent,
    SubscriberStub,
)

pytestmark = pytest.mark.unit

A = Endpoint.parse("publisher@fromaplace.net")
SERVICE = Endpoint.parse("apex=pubsub@localhost")
TOPIC = "data.topics"
HB = 1_000
TIMEOUT = 500


def _stub(**kwargs: object) -> SubscriberStub:
    return SubscriberStub(
        TOPIC,
        resolution=Resolution.BITS32,
        heartbeat_ms=HB,
        now_ms=0,
        repair_timeout_ms=TIMEOUT,
        **kwargs,  # type: ignore[arg-type]
    )


def pub(
    link: int | None, seq: int, epoch: int = 1, gap: tuple[int, int] | None = None
) -> RobustInfo:
    return RobustInfo(
        link_seq=link,
        link_epoch=None if link is None else epoch,
        source_seq=seq,
        source=A,
        gap=None if gap is None else gap[0],
        gap_seq=None if gap is None else gap[1],
    )


def beat(link: int, epoch: int = 1) -> RobustInfo:
    return RobustInfo(link_seq=link, link_epoch=epoch, source=SERVICE, heartbeat=True)


def seqs(events: list[StubEvent]) -> list[int]:
    return [e.publication.source_seq for e in events if isinstance(e, Deliver)]


def gaps(events: list[StubEvent]) -> list[GapRequest]:
    return [e.request for e in events if isinstance(e, SendGap)]


def test_a_link_repair_still_arriving_is_not_asked_again_however_long_it_takes() -> None:
    """3,000 redeliveries, one every 100 ms (five minutes, 600 repair timeouts): asked
    once. Before, the stub asked again every timeout, and each new request started
    another repair of the rest beside the running ones at the service."""
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    (request,) = gaps(stub.receive(pub(3001, 3002), b"", 1))
    assert (request.link_from, request.link_to) == (1, 3000)
    got: list[int] = []
    now = 1
    for link in range(1, 3001):
        now += 100
        events = stub.tick(now) + stub.receive(pub(link, link + 1), b"", now)
        assert gaps(events) == [], f"asked again at link {link}"
        got += seqs(events)
    assert got == list(range(2, 3003))
    assert stub.settled


def test_a_source_repair_still_arriving_is_not_asked_again() -> None:
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    events = stub.receive(pub(0, 2001, epoch=2), b"", 1)
    (request,) = gaps(events)
    assert request.sources == ((A, 1),)
    got: list[int] = []
    now = 1
    for number in range(1, 2001):
        now += 100
        events = stub.tick(now) + stub.receive(
            pub(None, number + 1, gap=(request.trans_id, number)), b"", now
        )
        assert gaps(events) == [], f"asked again at redelivery {number}"
        got += seqs(events)
    got += seqs(
        stub.gap_answered(GapReply(topic=TOPIC, trans_id=request.trans_id, count=2000), now)
    )
    assert got == list(range(2, 2002))  # the epoch-2 delivery that revealed it: a duplicate
    assert stub.stats.source_repairs == 1


def test_a_transient_refusal_is_asked_again_and_not_reported_as_a_loss() -> None:
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    (link,) = gaps(stub.receive(pub(5, 6), b"", 1))
    # 450: a redelivery was shed (the subscriber was slow): by link range again, later.
    assert stub.gap_refused(link.trans_id, 450, 2) == []
    assert stub.waiting_for(link.trans_id)
    (again,) = gaps(stub.tick(2 + TIMEOUT))
    assert (again.link_from, again.link_to, again.sources) == (1, 4, ())
    # A source repair refused with 450 is asked again from the marks, not RepairRefused.
    (source,) = gaps(stub.gap_refused(again.trans_id, 550, 3))
    events = stub.gap_refused(source.trans_id, 450, 4)
    assert not [e for e in events if isinstance(e, RepairRefused)]
    (retried,) = gaps(stub.tick(4 + TIMEOUT))
    assert retried.sources == ((A, 1),)
    assert stub.stats.refused == 0


def test_a_hole_longer_than_the_request_bound_is_asked_in_pieces_while_the_flow_goes_on() -> None:
    """A link range asks for ``max_gap`` link seqs at most (MAX_GAP: the service's 553
    bound); the rest of a longer hole is asked once the first piece is filled. Before,
    it was never asked while live deliveries kept the link from looking delayed."""
    stub = _stub(max_gap=100)
    stub.receive(pub(0, 1), b"", 0)
    (first,) = gaps(stub.receive(pub(351, 352), b"", 1))
    assert (first.link_from, first.link_to) == (1, 100)
    got: list[int] = []
    asked = [(first.link_from, first.link_to)]
    now, live = 1, 352
    pending = list(range(1, 101))
    while pending:
        now += 10
        link = pending.pop(0)
        live += 1  # the live flow goes on meanwhile, one beside each redelivery
        events = stub.receive(pub(link, link + 1), b"", now)
        events += stub.receive(pub(live - 1, live), b"", now)
        for request in gaps(events):
            assert request.link_to is not None
            assert request.link_from is not None
            asked.append((request.link_from, request.link_to))
            pending += list(range(request.link_from, request.link_to + 1))
        got += seqs(events)
    assert asked == [(1, 100), (101, 200), (201, 300), (301, 350)]
    assert got == list(range(2, live + 1))


def test_an_open_repair_learns_its_extent_from_the_gapreply_and_is_not_asked_twice() -> None:
    """Back from an absence: the overdue heartbeats asked everything from the next
    position (open); the first live delivery then reveals the hole, which the open
    repair covers. Before, the stub asked the whole hole again by range."""
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    events = stub.tick(2 * HB)
    assert [e for e in events if isinstance(e, Delayed)]
    (opened,) = gaps(events)
    assert (opened.link_from, opened.link_to) == (1, None)
    reply = GapReply(topic=TOPIC, trans_id=opened.trans_id, count=5000)
    assert gaps(stub.gap_answered(reply, 2 * HB + 1)) == []
    assert gaps(stub.receive(beat(5001), b"", 2 * HB + 2)) == []
    got: list[int] = []
    for link in range(1, 5001):
        got += seqs(stub.receive(pub(link, link + 1), b"", 2 * HB + 3))
    assert got == list(range(2, 5002))
    assert stub.settled
    assert stub.stats.link_repairs == 1


def test_the_live_flow_does_not_keep_an_open_repair_alive() -> None:
    """An open repair whose answer never comes (its pod died) ends at the repair
    timeout although live deliveries arrive; a hole among them is then asked for."""
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    (opened,) = gaps(stub.tick(2 * HB))
    now = 2 * HB
    asked: list[GapRequest] = []
    for link in (1, 2, 4, 5, 6, 7, 8):  # 3 lost
        now += 100
        asked += gaps(stub.tick(now) + stub.receive(pub(link, link + 1), b"", now))
    assert [(r.link_from, r.link_to) for r in asked] == [(3, 3)]
    assert not stub.waiting_for(opened.trans_id)


def test_after_a_resync_the_source_repair_covers_the_new_epoch_up_to_its_first_delivery() -> None:
    """The source repair reads the stream to its end, so epoch 2's link seqs 0..49
    (lost while she was away) are in it: not asked again by link range."""
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    (request,) = gaps(stub.receive(pub(50, 51, epoch=2), b"", 1))
    assert request.sources == ((A, 1),)
    out: list[StubEvent] = []
    for number in range(1, 51):
        out += stub.receive(pub(None, number + 1, gap=(request.trans_id, number)), b"", 2)
    out += stub.gap_answered(GapReply(topic=TOPIC, trans_id=request.trans_id, count=50), 3)
    out += stub.receive(pub(51, 52, epoch=2), b"", 4)
    assert seqs(out) == list(range(2, 53))
    assert gaps(out) == []
    assert stub.settled
