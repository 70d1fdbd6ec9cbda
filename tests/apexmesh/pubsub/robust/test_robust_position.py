"""A stub's position and ``resume`` (issue #29; XEP-0040 2.4 "send the link and source
sequence numbers in the initial request"): saved, given back, continued from."""

from __future__ import annotations

import pytest

from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.robust.elements import RobustInfo
from apexmesh.pubsub.robust.operations import GapReply, parse_request
from apexmesh.pubsub.robust.position import LinkPosition, Resume
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.stub import Deliver, SendGap, StubEvent, SubscriberStub

pytestmark = pytest.mark.unit

A = Endpoint.parse("publisher@fromaplace.net")
B = Endpoint.parse("publisher@elsewhere.net")
TOPIC = "data.topics"


def _stub(**kwargs: object) -> SubscriberStub:
    return SubscriberStub(
        TOPIC, resolution=Resolution.BITS16, heartbeat_ms=1_000, now_ms=0, **kwargs
    )  # type: ignore[arg-type]


def pub(link: int | None, seq: int, source: Endpoint = A, epoch: int = 1) -> RobustInfo:
    return RobustInfo(
        link_seq=link, link_epoch=None if link is None else epoch, source_seq=seq, source=source
    )


def seqs(events: list[StubEvent]) -> list[tuple[str, int]]:
    return [
        (str(e.publication.source), e.publication.source_seq)
        for e in events
        if isinstance(e, Deliver)
    ]


def test_a_position_survives_json_and_a_resumed_stub_goes_on_from_it() -> None:
    stub = _stub()
    for link, (source, seq) in enumerate([(A, 1), (B, 1), (A, 2)]):
        stub.receive(pub(link, seq, source), b"", 1)
    position = stub.position()
    assert position == LinkPosition(
        topic=TOPIC, epoch=1, link_seq=3, sources={A: 2, B: 1}, last_source=A
    )
    again = LinkPosition.loads(position.dumps())
    assert again == position
    resumed = _stub(resume=again)
    # What the old process delivered is not delivered again; what follows is.
    assert seqs(resumed.receive(pub(2, 2), b"", 2)) == []
    assert seqs(resumed.receive(pub(3, 3), b"", 2)) == [(str(A), 3)]
    # A gap after the position is asked from it.
    events = _stub(resume=again).receive(pub(5, 5), b"", 2)
    (request,) = [e.request for e in events if isinstance(e, SendGap)]
    assert (request.link_from, request.link_to, request.link_epoch) == (3, 4, 1)


def test_a_resumed_stub_whose_link_restarted_repairs_by_source_from_its_marks() -> None:
    position = LinkPosition(topic=TOPIC, epoch=1, link_seq=3, sources={A: 2, B: 1}, last_source=A)
    stub = _stub(resume=position)
    events = stub.receive(pub(0, 9, A, epoch=3), b"", 1)  # the service restarted the link
    (request,) = [e.request for e in events if isinstance(e, SendGap)]
    assert dict(request.sources) == {A: 2, B: 1}
    # Until that repair ends, the position is the old epoch's: resumed from it, a stub
    # must repair by source again (the new epoch's start does not cover the old end).
    assert stub.position() == LinkPosition(
        topic=TOPIC, epoch=1, link_seq=0, sources={A: 2, B: 1}, last_source=A
    )
    done = stub.gap_answered(GapReply(topic=TOPIC, trans_id=request.trans_id, count=0), 2)
    assert seqs(done) == [(str(A), 9)]
    position_after = stub.position()
    assert position_after is not None
    assert (position_after.epoch, position_after.link_seq) == (3, 1)


def test_resume_elements_and_bad_ones() -> None:
    position = LinkPosition(
        topic=TOPIC, epoch=2, link_seq=57373, sources={B: 4, A: 9}, last_source=A
    )
    resume = Resume.of(position, 5)
    assert resume.sources == ((A, 9), (B, 4))  # the latest delivered source first
    assert parse_request(resume.to_xml()) == resume
    for bad, code in (
        (b"<resume topic='t' transID='1' linkepoch='0' linkseq='1' />", 553),
        (b"<resume topic='t' transID='1' linkepoch='x' linkseq='1' />", 501),
        (b"<resume topic='t' transID='1' linkepoch='1' />", 501),
        (b"<resume topic='t' transID='1' linkepoch='1' linkseq='1'><x /></resume>", 501),
    ):
        with pytest.raises(ApexError) as refused:
            parse_request(bad)
        assert refused.value.code == code
    with pytest.raises(ValueError, match="not a link position"):
        LinkPosition.loads('{"topic": "t", "epoch": 0, "linkseq": 1, "sources": {}}')
    with pytest.raises(ValueError, match="not a link position"):
        LinkPosition.loads('{"topic": "t"}')
