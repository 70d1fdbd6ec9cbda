"""Data documents parsed once and recognized again (apexmesh/apex/memo.py ``ParseMemo``).

A sender's data differ from one another in the content reference only; a document that
is an earlier one with another ``content`` value is answered from the earlier parse,
and must equal what the full parser makes of it. The memo belongs to its reader: a
reader without one parses everything, and nothing is remembered at module level."""

from __future__ import annotations

import pytest

from apexmesh.apex.data import data_from
from apexmesh.apex.elements import parse_apex
from apexmesh.apex.errors import ApexError
from apexmesh.apex.memo import ParseMemo
from apexmesh.apex.options import Option
from apexmesh.beep.xml import parse_xml

pytestmark = pytest.mark.unit

REST = (
    b"<originator identity='fred@example.com' /><recipient identity='barney@example.com'>"
    b"<option internal='statusRequest' transID='7' /></recipient></data>"
)


def document(content: bytes, rest: bytes = REST) -> bytes:
    return b"<data content='" + content + b"'>" + rest


@pytest.fixture
def memo() -> ParseMemo:
    return ParseMemo(documents=8)


def full_parse(raw: bytes) -> object:
    return data_from(parse_xml(raw), raw)


def test_a_document_differing_in_content_only_is_recognized(memo: ParseMemo) -> None:
    first = parse_apex(document(b"cid:1.abc@example.com"), memo)
    raw = document(b"cid:2.abc@example.com")
    known = memo.known_data(raw)
    assert known is not None
    assert known == full_parse(raw)
    assert known.content == "cid:2.abc@example.com"
    assert known.recipients is first.recipients  # type: ignore[union-attr]
    assert parse_apex(raw, memo) == known


def test_inline_content_is_kept_as_the_peer_wrote_it(memo: ParseMemo) -> None:
    rest = (
        b"<originator identity='a@x' /><recipient identity='b@x' />"
        b"<data-content Name='Content'><p  a=\"1\">t&amp;u</p></data-content></data>"
    )
    parse_apex(document(b"#Content", rest), memo)
    known = memo.known_data(document(b"#Content", rest))
    assert known is not None
    assert known == full_parse(document(b"#Content", rest))
    assert known.data_content is not None
    assert known.data_content.content == b'<p  a="1">t&amp;u</p>'


@pytest.mark.parametrize(
    "value",
    [
        b"cid:a&amp;b@x",
        b"cid:a b@x",
        b"cid:\ta@x",
        b'cid:a"b@x',
        b"cid:a'b@x",
        b"cid:a'>b@x",
        b"",
        b"cid:" + b"x" * 1021,  # one octet past the longest value recognized
        b"cid:" + b"x" * 2000,
    ],
)
def test_values_xml_would_not_read_as_written_take_the_parser(
    value: bytes, memo: ParseMemo
) -> None:
    parse_apex(document(b"cid:1@x"), memo)
    assert memo.known_data(document(value)) is None


def test_the_longest_value_recognized_is_recognized(memo: ParseMemo) -> None:
    parse_apex(document(b"cid:1@x"), memo)
    raw = document(b"cid:" + b"x" * 1020)
    known = memo.known_data(raw)
    assert known is not None
    assert known == full_parse(raw)


def test_a_rest_never_parsed_is_never_recognized(memo: ParseMemo) -> None:
    parse_apex(document(b"cid:1@x"), memo)
    with_entity = REST.replace(b"fred@example.com", b"fred&ent;@example.com")
    assert memo.known_data(document(b"cid:2@x", with_entity)) is None
    with pytest.raises(ApexError) as info:
        parse_apex(document(b"cid:2@x", with_entity), memo)
    assert info.value.code in (500, 501)


def test_refused_documents_are_not_remembered(memo: ParseMemo) -> None:
    bad = REST.replace(b"fred@example.com", b"fred")  # no domain: 553
    for _ in range(2):
        with pytest.raises(ApexError) as info:
            parse_apex(document(b"cid:1@x", bad), memo)
        assert info.value.code == 553
    assert memo.known_data(document(b"cid:2@x", bad)) is None


def test_long_documents_are_not_remembered_and_the_memo_is_bounded(memo: ParseMemo) -> None:
    many = b"".join(b"<recipient identity='r%d@x' />" % i for i in range(200))
    long_rest = b"<originator identity='a@x' />" + many + b"</data>"
    parse_apex(document(b"cid:1@x", long_rest), memo)
    assert memo.known_data(document(b"cid:2@x", long_rest)) is None
    rests = [REST.replace(b"7", str(index + 1).encode()) for index in range(20)]
    for rest in rests:
        parse_apex(document(b"cid:1@x", rest), memo)
    # The eight most recent are remembered, the older ones were evicted one by one.
    assert memo.known_data(document(b"cid:2@x", rests[-1])) is not None
    assert memo.known_data(document(b"cid:2@x", rests[0])) is None


def test_without_a_memo_nothing_is_remembered() -> None:
    parse_apex(document(b"cid:1@x"))
    assert ParseMemo().known_data(document(b"cid:2@x")) is None


def test_a_memo_shares_recipients_and_options(memo: ParseMemo) -> None:
    first = parse_apex(document(b"cid:1@x"), memo)
    other = REST.replace(b"fred@example.com", b"wilma@example.com")
    second = parse_apex(document(b"cid:1@x", other), memo)
    assert first.recipients[0].options[0] is second.recipients[0].options[0]  # type: ignore[union-attr]
    plain = memo.recipient(first.originator.identity)  # type: ignore[union-attr]
    assert plain is memo.recipient(first.originator.identity)  # type: ignore[union-attr]
    assert plain.to_xml() == b"<recipient identity='fred@example.com' />"
    built: list[int] = []

    def build() -> Option:
        built.append(1)
        return first.recipients[0].options[0]  # type: ignore[union-attr]

    assert memo.option_made(("x", 1), build) is memo.option_made(("x", 1), build)
    assert built == [1]


def test_documents_in_turns_each_get_their_own_data(memo: ParseMemo) -> None:
    """The last document answered is compared first (a subscriber's stream of one topic):
    a document of another rest, in between or after, is never answered with its data."""
    other = REST.replace(b"barney", b"wilma")
    parse_apex(document(b"cid:1@x"), memo)
    parse_apex(document(b"cid:1@x", other), memo)
    for turn in range(3):
        for rest in (REST, REST, other, REST, other, other):
            raw = document(b"cid:%d@x" % turn, rest)
            assert memo.known_data(raw) == full_parse(raw)
    refused = document(b"cid:9@x", REST.replace(b"</data>", b"</dat>"))
    assert memo.known_data(refused) is None
