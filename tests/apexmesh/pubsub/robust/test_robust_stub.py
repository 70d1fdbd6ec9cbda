"""The subscriber stub, step by step (docs/robust.md "The subscriber stub")."""

from __future__ import annotations

import pytest

from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.robust.elements import (
    RobustInfo,
)
from apexmesh.pubsub.robust.operations import (
    GapReply,
    GapRequest,
)
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.stub import (
    Delayed,
    Deliver,
    RepairRefused,
    Resynchronised,
    SendGap,
    StubEvent,
    SubscriberStub,
)

pytestmark = pytest.mark.unit

A = Endpoint.parse("publisher@fromaplace.net")
B = Endpoint.parse("publisher@elsewhere.net")
SERVICE = Endpoint.parse("apex=pubsub@localhost")
HB = 1_000


def _stub(**kwargs: object) -> SubscriberStub:
    return SubscriberStub(
        "data.topics", resolution=Resolution.BITS16, heartbeat_ms=HB, now_ms=0, **kwargs
    )  # type: ignore[arg-type]


def pub(
    link: int | None,
    seq: int,
    source: Endpoint = A,
    epoch: int = 1,
    gap: tuple[int, int] | None = None,
) -> RobustInfo:
    return RobustInfo(
        link_seq=link,
        link_epoch=None if link is None else epoch,
        source_seq=seq,
        source=source,
        gap=None if gap is None else gap[0],
        gap_seq=None if gap is None else gap[1],
    )


def beat(link: int, epoch: int = 1) -> RobustInfo:
    return RobustInfo(link_seq=link, link_epoch=epoch, source=SERVICE, heartbeat=True)


def delivered(events: list[StubEvent]) -> list[tuple[str, int]]:
    return [
        (str(e.publication.source), e.publication.source_seq)
        for e in events
        if isinstance(e, Deliver)
    ]


def gaps(events: list[StubEvent]) -> list[GapRequest]:
    return [e.request for e in events if isinstance(e, SendGap)]


def test_in_order_deliveries_pass_straight_through_heartbeats_deliver_nothing() -> None:
    stub = _stub()
    events = (
        stub.receive(pub(0, 1), b"a", 1)
        + stub.receive(beat(1), b"", 2)
        + stub.receive(pub(2, 2), b"b", 3)
    )
    assert delivered(events) == [(str(A), 1), (str(A), 2)]
    assert gaps(events) == []
    payloads = [e.publication.payload for e in events if isinstance(e, Deliver)]
    assert payloads == [b"a", b"b"]


def test_a_gap_is_asked_by_link_range_at_once_and_filled_in_order() -> None:
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    events = stub.receive(pub(4, 5), b"", 1)
    (request,) = gaps(events)
    assert (request.link_from, request.link_to, request.link_epoch) == (1, 3, 1)
    assert delivered(events) == []
    # The repair arrives interleaved with the live flow, out of order.
    out = (
        stub.receive(pub(5, 6), b"", 2)
        + stub.receive(pub(2, 3), b"", 3)
        + stub.receive(pub(1, 2), b"", 4)
    )
    assert delivered(out) == [(str(A), 2), (str(A), 3)]
    out = stub.receive(beat(3), b"", 5)
    assert delivered(out) == [(str(A), 5), (str(A), 6)]
    assert stub.stats.gaps_detected == 1
    assert stub.settled  # the filled request is done with


def test_with_a_reorder_tolerance_an_overtaken_delivery_is_not_asked_for() -> None:
    stub = _stub(reorder_ms=200)
    stub.receive(pub(0, 1), b"", 0)
    events = stub.receive(pub(2, 3), b"", 10)
    assert gaps(events) == []
    assert delivered(events) == []
    assert stub.next_deadline() == 210
    out = stub.receive(pub(1, 2), b"", 50)  # the overtaken one comes within the tolerance
    assert delivered(out) == [(str(A), 2), (str(A), 3)]
    assert gaps(stub.tick(210)) == []
    assert stub.stats.gaps_detected == 0
    assert stub.settled


def test_with_a_reorder_tolerance_holes_still_missing_are_asked_run_by_run() -> None:
    stub = _stub(reorder_ms=200)
    stub.receive(pub(0, 1), b"", 0)
    stub.receive(pub(3, 4), b"", 10)  # 1 and 2 missing
    stub.receive(pub(5, 6), b"", 20)  # 4 missing
    stub.receive(pub(2, 3), b"", 30)  # 2 came late: 1 and 4 remain
    assert gaps(stub.tick(209)) == []  # the tolerance runs from the first hole seen (10)
    requests = gaps(stub.tick(210))
    assert [(r.link_from, r.link_to) for r in requests] == [(1, 1), (4, 4)]
    assert stub.stats.gaps_detected == 2
    # Asked once: a later delivery beyond asks only for what is new.
    stub.receive(pub(8, 9), b"", 250)
    assert [(r.link_from, r.link_to) for r in gaps(stub.tick(450))] == [(6, 7)]
    out = stub.receive(pub(1, 2), b"", 460) + stub.receive(pub(4, 5), b"", 461)
    assert delivered(out) == [(str(A), s) for s in (2, 3, 4, 5, 6)]


def test_with_a_reorder_tolerance_many_holes_are_asked_in_a_bounded_number_of_ranges() -> None:
    stub = _stub(reorder_ms=100)
    stub.receive(pub(0, 1), b"", 0)
    for link in range(2, 40, 2):  # every odd position missing: 19 holes
        stub.receive(pub(link, link + 1), b"", 1)
    requests = gaps(stub.tick(101))
    assert len(requests) == 8
    assert (requests[-1].link_from, requests[-1].link_to) == (15, 37)
    assert [(r.link_from, r.link_to) for r in requests[:7]] == [(n, n) for n in range(1, 15, 2)]


def test_duplicates_are_dropped_by_position_and_by_source_seq() -> None:
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    assert delivered(stub.receive(pub(0, 1), b"", 1)) == []
    assert stub.stats.duplicates == 1


def test_a_refused_link_repair_is_asked_by_source_then_the_buffer_follows() -> None:
    stub = _stub()
    stub.receive(pub(0, 10, A), b"", 0)
    stub.receive(pub(1, 20, B), b"", 0)
    (link_request,) = gaps(stub.receive(pub(4, 13, A), b"", 1))
    events = stub.gap_refused(link_request.trans_id, 550, 2)
    (source_request,) = gaps(events)
    assert source_request.sources == ((B, 20), (A, 10))
    # Redeliveries by source (numbered 1..count), out of order, then the count.
    trans = source_request.trans_id
    out = stub.receive(pub(None, 12, A, gap=(trans, 2)), b"", 3)
    out += stub.receive(pub(None, 11, A, gap=(trans, 1)), b"", 3)
    out += stub.receive(pub(None, 13, A, gap=(trans, 3)), b"", 3)
    assert delivered(out) == [(str(A), 11), (str(A), 12), (str(A), 13)]
    out = stub.gap_answered(GapReply(topic="data.topics", trans_id=trans, count=3), 4)
    assert delivered(out) == []  # A:13 at link 4 was a duplicate
    out = stub.receive(pub(5, 14, A), b"", 5)
    assert delivered(out) == [(str(A), 14)]
    assert stub.settled


def test_a_refused_source_repair_is_reported_and_delivery_goes_on() -> None:
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    (link_request,) = gaps(stub.receive(pub(3, 4), b"", 1))
    (source_request,) = gaps(stub.gap_refused(link_request.trans_id, 550, 2))
    events = stub.gap_refused(source_request.trans_id, 550, 3)
    refused = [e for e in events if isinstance(e, RepairRefused)]
    assert refused == [RepairRefused(550, source_request)]
    assert delivered(events) == [(str(A), 4)]
    assert delivered(stub.receive(pub(4, 5), b"", 4)) == [(str(A), 5)]


def test_heartbeats_reveal_a_lost_delivery_on_a_silent_topic_within_two_intervals() -> None:
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    # link 1 (a publication) is lost; the topic is silent; the next heartbeat is link 2.
    events = stub.receive(beat(2), b"", HB)
    (request,) = gaps(events)
    assert (request.link_from, request.link_to) == (1, 1)


def test_overdue_heartbeats_report_delayed_once_and_ask_for_everything_after() -> None:
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    assert stub.next_deadline() == 2 * HB
    assert stub.tick(2 * HB - 1) == []
    events = stub.tick(2 * HB)
    assert [e for e in events if isinstance(e, Delayed)] == [Delayed(2 * HB, 1)]
    (request,) = gaps(events)
    assert (request.link_from, request.link_to) == (1, None)
    assert not [e for e in stub.tick(2 * HB + 1) if isinstance(e, Delayed)]
    stub.receive(beat(1), b"", 2 * HB + 5)
    later = stub.tick(4 * HB + 5)
    assert [e for e in later if isinstance(e, Delayed)] == [Delayed(2 * HB, 2)]


def test_holes_above_an_open_repairs_answered_extent_are_asked_and_counted() -> None:
    """An open repair (``linkfrom`` 1, no ``linkto``) stands for every hole above it
    while it has no extent. Holes seen meanwhile (2 and 3, below link 4) are asked for
    once its ``gapreply`` says it covers only link 1, and count as a detected gap."""
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    (open_request,) = gaps(stub.tick(2 * HB))
    assert (open_request.link_from, open_request.link_to) == (1, None)
    assert gaps(stub.receive(pub(4, 5), b"", 2 * HB + 1)) == []  # the open one covers 1-3
    assert stub.stats.gaps_detected == 0
    reply = GapReply(topic="data.topics", trans_id=open_request.trans_id, count=1)
    (beyond,) = gaps(stub.gap_answered(reply, 2 * HB + 2))
    assert (beyond.link_from, beyond.link_to) == (2, 3)
    assert stub.stats.gaps_detected == 1


def test_a_new_epoch_resynchronises_and_repairs_the_old_one_by_source_first() -> None:
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    events = stub.receive(pub(0, 5, epoch=2), b"", 1)
    assert [e for e in events if isinstance(e, Resynchronised)] == [Resynchronised(2)]
    (request,) = gaps(events)
    assert request.sources == ((A, 1),)
    assert delivered(events) == []  # the new epoch waits for the repair
    trans = request.trans_id
    out = stub.receive(pub(None, 2, gap=(trans, 1)), b"", 2)
    out += stub.gap_answered(GapReply(topic="data.topics", trans_id=trans, count=1), 2)
    assert delivered(out) == [(str(A), 2), (str(A), 5)]


def test_the_resync_is_seen_even_when_link_seq_0_is_lost() -> None:
    stub = _stub()
    stub.receive(pub(0, 1), b"", 0)
    stub.receive(pub(1, 2), b"", 0)
    events = stub.receive(pub(2, 9, epoch=2), b"", 1)  # epoch 2's 0 and 1 were lost
    assert any(isinstance(e, Resynchronised) for e in events)


def test_a_timed_out_repair_is_asked_again() -> None:
    stub = _stub(repair_timeout_ms=500)
    stub.receive(pub(0, 1), b"", 0)
    (first,) = gaps(stub.receive(pub(3, 4), b"", 10))
    again = gaps(stub.tick(510))
    assert [(r.link_from, r.link_to) for r in again] == [(1, 2)]
    assert again[0].trans_id != first.trans_id


def test_wrap_is_transparent() -> None:
    stub = _stub(expect=(1, 65534))
    events = stub.receive(pub(65534, 1), b"", 0) + stub.receive(pub(1, 3), b"", 0)
    (request,) = gaps(events)
    assert (request.link_from, request.link_to) == (65535, 65535)
    events = stub.receive(pub(65535, 2), b"", 1)
    assert delivered(events) == [(str(A), 2), (str(A), 3)]


def test_a_stub_that_is_not_fresh_starts_at_the_first_delivery() -> None:
    stub = _stub(fresh=False)
    events = stub.receive(pub(40000, 7), b"", 0)
    assert delivered(events) == [(str(A), 7)]
    assert gaps(events) == []
