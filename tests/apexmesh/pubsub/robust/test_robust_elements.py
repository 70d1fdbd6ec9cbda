"""The robust elements: round trips, and every kind of bad input answered with its code
(500 not well-formed, 501 syntax, 553 value, 504 unknown publish type), transID kept."""

from __future__ import annotations

import dataclasses
import re

import pytest

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.data import Data, Originator, Recipient, data_from
from apexmesh.apex.elements import parse_apex
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.memo import ParseMemo
from apexmesh.apex.numbered import NUMBERED_ATTRIBUTES
from apexmesh.apex.options import Option
from apexmesh.beep.xml import parse_xml
from apexmesh.pubsub.robust import elements as robust_elements
from apexmesh.pubsub.robust.elements import (
    MAX_GAP,
    LinkOptions,
    PublishHeader,
    RobustInfo,
    RobustReader,
    link_span,
    publish_from_option,
    publish_option,
    robust_from_option,
    robust_option,
)
from apexmesh.pubsub.robust.operations import (
    GapReply,
    GapRequest,
    Permissions,
    Position,
    Published,
    SnapshotRequest,
    SourceInfo,
    SourceQuery,
    parse_answer,
    parse_permissions,
    parse_request,
)
from apexmesh.pubsub.robust.permissions import Actor, ChangeKind, PermissionChange
from apexmesh.pubsub.robust.publish_types import PublishType
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import ContributionRate, RobustSettings

pytestmark = pytest.mark.unit

SRC = Endpoint.parse("publisher@fromaplace.net")
NS = "urn:apexmesh:robust-pubsub:1"


def _code(body: bytes, parse=parse_request) -> tuple[ApexReplyCode, int | None]:  # type: ignore[no-untyped-def]
    with pytest.raises(ApexError) as caught:
        parse(body)
    return caught.value.code, caught.value.trans_id


def test_a_full_robust_option_round_trips() -> None:
    info = RobustInfo(
        link_seq=9,
        link_epoch=3,
        source_seq=77,
        source=SRC,
        type=PublishType.IMAGE,
        item="XMPL",
        permtoken="6747",
        contributor=Endpoint.parse("fred@example.com"),
    )
    assert robust_from_option(robust_option(info, 12)) == info


def test_add_is_read_as_image_and_unknown_types_are_504() -> None:
    text = f"<robust xmlns='{NS}' linkseq='1' sourceseq='1' from='a@b.com' type='add'/>"
    option = Option(internal="robust", trans_id=1, content=text.encode())
    assert robust_from_option(option).type is PublishType.IMAGE
    bad = Option(
        internal="robust",
        trans_id=1,
        content=b"<robust linkseq='1' sourceseq='1' from='a@b.com' type='merge'/>",
    )
    with pytest.raises(ApexError) as caught:
        robust_from_option(bad)
    assert caught.value.code is ApexReplyCode.PARAMETER_NOT_IMPLEMENTED


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"<robust linkseq='1' sourceseq='1' />", ApexReplyCode.PARAMETER_SYNTAX_ERROR),
        (
            b"<robust linkseq='x' sourceseq='1' from='a@b.com' />",
            ApexReplyCode.PARAMETER_SYNTAX_ERROR,
        ),
        (b"<robust linkseq='1' from='a@b.com' />", ApexReplyCode.PARAMETER_SYNTAX_ERROR),
        (b"<robust linkseq='1' sourceseq='0' from='a@b.com' />", ApexReplyCode.PARAMETER_INVALID),
        (b"<robust linkseq='1' sourceseq='1' from='nobody' />", ApexReplyCode.PARAMETER_INVALID),
        (
            b"<robust linkseq='1' sourceseq='1' from='a@b.com' bogus='1' />",
            ApexReplyCode.PARAMETER_SYNTAX_ERROR,
        ),
        (
            b"<robust linkseq='1' sourceseq='1' from='a@b.com'>text</robust>",
            ApexReplyCode.PARAMETER_SYNTAX_ERROR,
        ),
        (b"<robust linkseq='1' from='a@b.com' ns='other' />", ApexReplyCode.PARAMETER_SYNTAX_ERROR),
        (
            b"<robust linkseq='1' sourceseq='2' from='a@b.com' ns='link.heartbeat' />",
            ApexReplyCode.PARAMETER_SYNTAX_ERROR,
        ),
        (b"<robust sourceseq='2' from='a@b.com' />", ApexReplyCode.PARAMETER_SYNTAX_ERROR),
        (b"<robust sourceseq='2' from='a@b.com' gap='3' />", ApexReplyCode.PARAMETER_SYNTAX_ERROR),
        (
            b"<robust linkseq='1' sourceseq='1' from='a@b.com' type='snapshot' />",
            ApexReplyCode.PARAMETER_INVALID,
        ),
        (b"<other />", ApexReplyCode.PARAMETER_SYNTAX_ERROR),
        (
            b"<robust linkseq='1' sourceseq='1' from='a@b.com' /><robust />",
            ApexReplyCode.PARAMETER_SYNTAX_ERROR,
        ),
    ],
)
def test_bad_robust_options(content: bytes, code: ApexReplyCode) -> None:
    option = Option(internal="robust", trans_id=1, content=content)
    with pytest.raises(ApexError) as caught:
        robust_from_option(option)
    assert caught.value.code is code


def test_a_link_seq_beyond_the_topics_resolution_is_553() -> None:
    option = Option(
        internal="robust",
        trans_id=1,
        content=b"<robust linkseq='70000' from='apex=pubsub@b.com' ns='link.heartbeat'/>",
    )
    assert robust_from_option(option).link_seq == 70000
    with pytest.raises(ApexError) as caught:
        robust_from_option(option, Resolution.BITS16)
    assert caught.value.code is ApexReplyCode.PARAMETER_INVALID


def test_publish_option_round_trip_with_the_topics_item_header_and_snapshot_refused() -> None:
    header = PublishHeader(type=PublishType.DROP, item="XMPL", permtoken="t1", source=SRC)
    option = publish_option(header, 5, item_header="symbol")
    assert b"symbol=" in option.content
    assert publish_from_option(option, item_header="symbol") == header
    with pytest.raises(ApexError) as caught:
        publish_from_option(option)  # "symbol" is not this topic's item header
    assert caught.value.code is ApexReplyCode.PARAMETER_SYNTAX_ERROR
    with pytest.raises(ApexError) as caught:
        PublishHeader(type=PublishType.SNAPSHOT)
    assert caught.value.code is ApexReplyCode.PARAMETER_INVALID


@pytest.mark.parametrize(
    "request_",
    [
        GapRequest(topic="t.a", trans_id=1, link_from=65534, link_to=2, link_epoch=4),
        GapRequest(topic="t.a", trans_id=2, link_from=0),
        GapRequest(topic="t.a", trans_id=3, sources=((SRC, 0),)),
        GapRequest(topic="t.a", trans_id=4),
        SourceQuery(topic="t.a", trans_id=5, link_seq=57372),
        SourceQuery(topic="t.a", trans_id=6),
        SnapshotRequest(topic="t.a", trans_id=7, item="XMPL"),
        SnapshotRequest(topic="t.a", trans_id=8),
    ],
)
def test_requests_round_trip(request_: GapRequest | SourceQuery | SnapshotRequest) -> None:
    assert parse_request(request_.to_xml()) == request_


def test_the_single_source_attribute_form_of_example_3() -> None:
    request = parse_request(b"<gap topic='t.a' transID='9' ns='a@b.com' after='5' />")
    assert isinstance(request, GapRequest)
    assert request.sources == ((Endpoint.parse("a@b.com"), 5),)


@pytest.mark.parametrize(
    ("body", "code", "trans_id"),
    [
        (b"<gap topic='t.a' transID='1' linkfrom='1'", ApexReplyCode.GENERAL_SYNTAX_ERROR, None),
        (b"<gap topic='t.a' linkfrom='1' />", ApexReplyCode.PARAMETER_SYNTAX_ERROR, None),
        (b"<gap topic='T!' transID='3' linkfrom='1' />", ApexReplyCode.PARAMETER_INVALID, 3),
        (
            b"<gap topic='t.a' transID='4' linkfrom='1' ns='a@b.com' after='1' />",
            ApexReplyCode.PARAMETER_SYNTAX_ERROR,
            4,
        ),
        (b"<gap topic='t.a' transID='5' linkto='1' />", ApexReplyCode.PARAMETER_SYNTAX_ERROR, 5),
        (b"<gap topic='t.a' transID='6' ns='a@b.com' />", ApexReplyCode.PARAMETER_SYNTAX_ERROR, 6),
        (b"<gap topic='t.a' transID='7' linkfrom='-1' />", ApexReplyCode.PARAMETER_SYNTAX_ERROR, 7),
        (b"<gap topic='t.a' transID='8'><other /></gap>", ApexReplyCode.PARAMETER_SYNTAX_ERROR, 8),
        (
            b"<gap topic='t.a' transID='9'><source ns='bad' after='1' /></gap>",
            ApexReplyCode.PARAMETER_INVALID,
            9,
        ),
        (
            b"<sourcequery topic='t.a' transID='10' linkseq='abc' />",
            ApexReplyCode.PARAMETER_SYNTAX_ERROR,
            10,
        ),
        (b"<snapshot topic='t.a' transID='11' item='' />", ApexReplyCode.PARAMETER_INVALID, 11),
        (b"<unknown transID='12' />", ApexReplyCode.PARAMETER_SYNTAX_ERROR, None),
        (
            b"<!DOCTYPE x [<!ENTITY a 'b'>]><gap topic='t.a' transID='1' linkfrom='1' />",
            ApexReplyCode.PARAMETER_SYNTAX_ERROR,
            None,
        ),
        (
            b"<gap xmlns='urn:other' topic='t.a' transID='1' linkfrom='1' />",
            ApexReplyCode.PARAMETER_SYNTAX_ERROR,
            None,
        ),
    ],
)
def test_bad_requests(body: bytes, code: ApexReplyCode, trans_id: int | None) -> None:
    assert _code(body) == (code, trans_id)


def test_too_many_sources_is_553() -> None:
    sources = b"".join(b"<source ns='a%d@b.com' after='1' />" % n for n in range(1001))
    code, trans_id = _code(b"<gap topic='t.a' transID='2'>" + sources + b"</gap>")
    assert (code, trans_id) == (ApexReplyCode.PARAMETER_INVALID, 2)


def test_gap_span_checks_against_the_resolution() -> None:
    GapRequest(topic="t.a", trans_id=1, link_from=65535, link_to=1).check_span(Resolution.BITS16)
    assert link_span(Resolution.BITS16, 65535, 1) == 2
    assert link_span(Resolution.BITS16, 0, 4) == 5
    with pytest.raises(ApexError) as caught:
        GapRequest(topic="t.a", trans_id=1, link_from=70000, link_to=70001).check_span(
            Resolution.BITS16
        )
    assert caught.value.code is ApexReplyCode.PARAMETER_INVALID
    with pytest.raises(ApexError):
        GapRequest(topic="t.a", trans_id=1, link_from=1, link_to=MAX_GAP + 1).check_span(
            Resolution.BITS32
        )
    with pytest.raises(ApexError):
        GapRequest(topic="t.a", trans_id=1, link_from=5, link_to=0).check_span(Resolution.BITS32)


def test_permissions_round_trip_and_bad_ones() -> None:
    changes = (
        PermissionChange(ChangeKind.GRANT, "6747", Actor("*@customer.example")),
        PermissionChange(ChangeKind.DENY, "6747", Actor("rival@customer.example")),
        PermissionChange(ChangeKind.REVOKE, "6747", Actor("*")),
    )
    element = Permissions(topic="t.a", trans_id=12, changes=changes)
    assert parse_permissions(element.to_xml()) == element
    body = b"<permissions topic='t.a' transID='13'><grant token='a b' actor='*' /></permissions>"
    assert _code(body, parse_permissions) == (ApexReplyCode.PARAMETER_INVALID, 13)
    body = b"<permissions topic='t.a' transID='14'><allow token='a' actor='*' /></permissions>"
    assert _code(body, parse_permissions) == (ApexReplyCode.PARAMETER_SYNTAX_ERROR, 14)
    body = b"<permissions topic='t.a' transID='15' />"
    assert _code(body, parse_permissions) == (ApexReplyCode.PARAMETER_SYNTAX_ERROR, 15)
    body = b"<permissions topic='t.a' transID='16'><grant token='a' actor='*@' /></permissions>"
    assert _code(body, parse_permissions) == (ApexReplyCode.PARAMETER_INVALID, 16)


def test_answers_round_trip() -> None:
    settings = RobustSettings(
        resolution=Resolution.BITS16, contributions=ContributionRate(per_second=5, burst=20)
    )
    answers = [
        GapReply(topic="t.a", trans_id=1, count=3),
        Published(topic="t.a", trans_id=2, source_seq=7547392),
        SourceInfo(topic="t.a", trans_id=3, settings=settings),
        SourceInfo(
            topic="t.a",
            trans_id=4,
            settings=RobustSettings(),
            position=Position(link_seq=57372, source=SRC, source_seq=7547392),
        ),
    ]
    for answer in answers:
        assert parse_answer(answer.to_xml()) == answer
    assert b"types='update correction image drop snapshot'" in answers[2].to_xml()
    assert (
        _code(b"<gapreply topic='t.a' transID='1' />", parse_answer)[0]
        is ApexReplyCode.PARAMETER_SYNTAX_ERROR
    )
    assert _code(b"<reply code='250' />", parse_answer)[0] is ApexReplyCode.PARAMETER_SYNTAX_ERROR


@pytest.mark.parametrize(
    "template",
    [
        RobustInfo(
            link_seq=1,
            link_epoch=1,
            source_seq=9,
            source=Endpoint.parse("fred@example.com"),
            type=PublishType.CORRECTION,
            item="a&b<c'\"",
            permtoken="gold",
            contributor=Endpoint.parse("wilma@example.com"),
        ),
        RobustInfo(
            link_seq=65535, link_epoch=7, source=Endpoint.parse("apex=pubsub@x.org"), heartbeat=True
        ),
    ],
)
def test_link_options_are_the_options_robust_option_builds_for_each_link(
    template: RobustInfo,
) -> None:
    """The fan-out's shortcut (one canonical template, numbers put in) must give exactly
    the option built and parsed the long way, for any numbers."""
    numbered = LinkOptions(template, 42)
    for seq, epoch in [(0, 1), (1, 2), (65_535, 1), (2**32 - 1, 10**6), (5, 3)]:
        built = robust_option(dataclasses.replace(template, link_seq=seq, link_epoch=epoch), 42)
        fast = numbered.for_link(seq, epoch)
        assert fast == built
        assert hash(fast) == hash(built)
        assert robust_from_option(fast) == robust_from_option(built)
        assert fast.to_xml() == built.to_xml()


def test_link_options_need_a_numbered_template() -> None:
    with pytest.raises(ValueError, match="link_seq and link_epoch"):
        LinkOptions(RobustInfo(link_seq=3, source_seq=1, source=Endpoint.parse("a@b.org")), 1)


# --------------------------------------------------------------------------- shapes

DELIVERED = [
    RobustInfo(link_seq=9, link_epoch=3, source_seq=77, source=SRC),
    RobustInfo(
        link_seq=9,
        link_epoch=3,
        source_seq=77,
        source=SRC,
        type=PublishType.CORRECTION,
        item="IBM",
        permtoken="gold",
        contributor=Endpoint.parse("wilma@example.com"),
    ),
    RobustInfo(link_seq=65535, link_epoch=7, source=SRC, heartbeat=True),
    RobustInfo(link_seq=None, source_seq=12, source=SRC, gap=5, gap_seq=2),
]


def test_the_numbers_the_memo_cuts_are_the_numbering_attributes_of_robust() -> None:
    """apexmesh/apex/numbered.py does not import this package: its names must stay
    those of the numbers a robust option carries."""
    full = RobustInfo(link_seq=1, link_epoch=2, source_seq=3, source=SRC, gap=4, gap_seq=5)
    content = robust_option(full, 1).content  # canonical form, as delivered
    written = {name for name, _value in re.findall(rb' ([a-z]+)="([0-9]+)"', content)}
    assert {name.decode() for name in written} == set(NUMBERED_ATTRIBUTES)


@pytest.mark.parametrize("info", DELIVERED)
def test_deliveries_differing_in_their_numbers_are_answered_by_the_parse_memo(
    info: RobustInfo,
) -> None:
    memo = ParseMemo()

    def delivery(seq: int, number: int) -> bytes:
        numbers: dict[str, int | None] = {"source_seq": None if info.heartbeat else number}
        if info.link_seq is not None:
            numbers.update(link_seq=seq, link_epoch=info.link_epoch)
        else:
            numbers.update(gap_seq=number)
        recipients = tuple(
            Recipient(
                identity=Endpoint.parse(f"sub{index}@example.com"),
                options=(robust_option(dataclasses.replace(info, **numbers), 1),),  # type: ignore[arg-type]
            )
            for index in range(3)
        )
        data = Data(
            content=f"cid:{number}@x",
            originator=Originator(identity=Endpoint.parse("apex=pubsub@example.com")),
            recipients=recipients,
        )
        return data.to_xml()

    for _ in range(2):  # a template is made the second time a shape is seen
        parse_apex(delivery(1, 1), memo)
    for seq, number in [(2, 2), (0, 3), (2**32 - 1, 99)]:
        raw = delivery(seq, number)
        known = memo.known_data(raw)
        assert known is not None
        assert known == data_from(parse_xml(raw), raw)
        assert known.to_xml() == raw


@pytest.mark.parametrize("info", DELIVERED)
def test_a_robust_reader_reads_as_the_parser_for_any_numbers(info: RobustInfo) -> None:
    reader = RobustReader()
    option = robust_option(info, 1)
    for _ in range(2):  # the shape is kept the second time it is seen
        assert reader.read(option) == robust_from_option(option)
    assert len(reader._shapes) == 1
    for numbers in [
        {"link_seq": 0, "link_epoch": 9, "source_seq": 1},
        {"link_seq": 2**64 - 1, "link_epoch": 0, "source_seq": 2**63 - 1},
    ]:
        if info.heartbeat:
            numbers.pop("source_seq")
        if info.link_seq is None:
            numbers = {"source_seq": numbers["source_seq"], "gap_seq": 7}
        other = robust_option(dataclasses.replace(info, **numbers), 1)  # type: ignore[arg-type]
        assert reader.read(other) == robust_from_option(other)
        assert reader.read(other, Resolution.BITS64) == robust_from_option(other, Resolution.BITS64)


def test_a_robust_reader_checks_every_number_as_the_parser_does() -> None:
    reader = RobustReader()
    for _ in range(2):
        reader.read(robust_option(DELIVERED[0], 1), Resolution.BITS16)
    assert len(reader._shapes) == 1
    beyond = robust_option(dataclasses.replace(DELIVERED[0], link_seq=65_536), 1)
    for read in (reader.read, robust_from_option):
        with pytest.raises(ApexError) as caught:
            read(beyond, Resolution.BITS16)
        assert caught.value.code == ApexReplyCode.PARAMETER_INVALID
    zero = Option(
        internal="robust",
        trans_id=1,
        content=robust_option(DELIVERED[0], 1).content.replace(b'sourceseq="77"', b'sourceseq="0"'),
    )
    for read in (reader.read, robust_from_option):
        with pytest.raises(ApexError) as caught:
            read(zero)
        assert caught.value.code == ApexReplyCode.PARAMETER_INVALID


def test_a_robust_reader_keeps_no_shape_that_fails_its_self_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Here the parser reads the link epoch otherwise than the shape would: the shape
    # must not be kept, and every read goes through the parser.
    real = robust_elements.robust_from_option

    def disagreeing(option: Option, resolution: Resolution | None = None) -> RobustInfo:
        info = real(option, resolution)
        return dataclasses.replace(info, link_epoch=(info.link_epoch or 0) + 1)

    monkeypatch.setattr(robust_elements, "robust_from_option", disagreeing)
    reader = RobustReader(shapes=4)
    option = robust_option(DELIVERED[0], 1)
    for _ in range(3):  # the shape is checked the second time it is seen
        assert reader.read(option) == disagreeing(option)
    assert len(reader._shapes) == 0
    monkeypatch.undo()
    agreeing = RobustReader(shapes=4)
    for _ in range(3):
        assert agreeing.read(option) == real(option)
    assert len(agreeing._shapes) == 1


def test_a_robust_reader_refuses_what_the_parser_refuses() -> None:
    reader = RobustReader(shapes=4)
    doubled = b'<robust xmlns="urn:apexmesh:robust-pubsub:1" linkseq="1" linkseq="2"/>'
    option = robust_option(DELIVERED[0], 1)
    for content in (doubled, option.content.replace(b"<robust", b"<robot")):
        bad = Option.__new__(Option)
        for field in dataclasses.fields(Option):
            object.__setattr__(bad, field.name, getattr(option, field.name))
        object.__setattr__(bad, "content", content)
        for _ in range(2):
            with pytest.raises(ApexError):
                reader.read(bad)
    assert len(reader._shapes) == 0
    other = Option(internal="other", trans_id=1, content=option.content)
    with pytest.raises(ApexError):
        reader.read(other)
