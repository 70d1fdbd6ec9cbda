"""Documents that differ in the numbers of their options (apexmesh/apex/numbered.py).

A robust delivery carries its recipient's link seq and epoch and the publication's source
seq in an option's content; a document differing from a remembered one in those numbers
(and its ``content`` value) is answered from a self-checked template, and must equal what
the full parser makes of it. A document differing in anything else, or whose template
fails the self-check, goes through the full parser."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apexmesh.apex import numbered
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.data import Data, data_from
from apexmesh.apex.elements import parse_apex
from apexmesh.apex.errors import ApexError
from apexmesh.apex.memo import ParseMemo
from apexmesh.apex.numbered import NUMBERED_ATTRIBUTES, NUMBERED_REST_MAX, numbers_of
from apexmesh.beep.xml import parse_xml

pytestmark = pytest.mark.unit

ROBUST = (
    b"<option internal='robust' targetHop='final' mustUnderstand='false' transID='1'>"
    b'<robust xmlns="urn:apexmesh:robust-pubsub:1" linkseq="%s" linkepoch="%s"'
    b' sourceseq="%s" from="pub@example.com"/></option>'
)


def recipient(name: bytes, seq: bytes, epoch: bytes, source: bytes) -> bytes:
    return (
        b"<recipient identity='"
        + name
        + b"@example.com'>"
        + ROBUST % (seq, epoch, source)
        + b"</recipient>"
    )


def delivery(
    numbers: list[bytes], content: bytes = b"cid:1.a@example.com", tail: bytes = b""
) -> bytes:
    """A data to ``len(numbers) // 3`` recipients, as the pubsub service writes one:
    each recipient's option with (link seq, link epoch, source seq) from ``numbers``."""
    recipients = b"".join(
        recipient(b"sub%d" % (index // 3), *numbers[index : index + 3])
        for index in range(0, len(numbers), 3)
    )
    return (
        b"<data content='" + content + b"'><originator identity='apex=pubsub@example.com'>"
        b"<option internal='dataHopping' targetHop='final' mustUnderstand='false'"
        b" transID='3' /></originator>" + recipients + tail + b"</data>"
    )


FIRST = [b"100", b"1", b"7", b"205", b"1", b"7"]
OTHER = [b"101", b"1", b"8", b"206", b"2", b"8"]


def learn(memo: ParseMemo, raw: bytes) -> object:
    """Parse ``raw`` twice with ``memo``: a template is made the second time a shape is
    seen."""
    parse_apex(raw, memo)
    return parse_apex(raw, memo)


def full_parse(raw: bytes) -> Data:
    data = data_from(parse_xml(raw), raw)
    assert isinstance(data, Data)
    return data


@pytest.fixture
def memo() -> ParseMemo:
    memo = ParseMemo(documents=8, numbered=8)
    learn(memo, delivery(FIRST))
    return memo


def test_a_document_differing_in_its_numbers_is_answered_as_the_full_parser_would(
    memo: ParseMemo,
) -> None:
    raw = delivery(OTHER, b"cid:2.a@example.com")
    known = memo.known_data(raw)
    assert known is not None
    assert known == full_parse(raw)
    assert known.to_xml() == full_parse(raw).to_xml() == raw
    assert known.content == "cid:2.a@example.com"
    assert [r.to_xml() for r in known.recipients] == [
        r.to_xml() for r in full_parse(raw).recipients
    ]
    assert known.recipients[1].options[0].content.count(b'linkepoch="2"') == 1
    assert parse_apex(raw, memo) == known


def test_what_the_memo_answers_is_new_where_the_numbers_are_and_shared_elsewhere(
    memo: ParseMemo,
) -> None:
    first = memo.known_data(delivery(FIRST))
    second = memo.known_data(delivery(OTHER))
    assert first is not None
    assert second is not None
    assert first.originator is second.originator
    assert first.recipients[0] is not second.recipients[0]
    assert first.recipients[0].options[0].content != second.recipients[0].options[0].content


@pytest.mark.parametrize(
    "raw",
    [
        # Another recipient, another source, another transID, one recipient fewer.
        delivery(OTHER).replace(b"sub1@", b"sub9@"),
        delivery(OTHER).replace(b'from="pub@', b'from="pab@'),
        delivery(OTHER).replace(b"transID='1'>", b"transID='2'>", 1),
        delivery(OTHER[:3]),
        # The same numbers written otherwise: quoted with ', a reference, 21 digits.
        delivery(OTHER).replace(b'linkseq="101"', b"linkseq='101'"),
        delivery(OTHER).replace(b'linkseq="101"', b'linkseq="&#49;01"'),
        delivery(OTHER).replace(b'linkseq="101"', b'linkseq="' + b"1" * 21 + b'"'),
        # A number where none was, an empty value.
        delivery(OTHER).replace(b'from="pub@example.com"', b'from="pub@example.com" gap="4"', 1),
        delivery(OTHER).replace(b'linkseq="101"', b'linkseq=""'),
    ],
)
def test_a_document_differing_in_anything_else_takes_the_parser(
    raw: bytes, memo: ParseMemo
) -> None:
    assert memo.known_data(raw) is None


def test_a_shape_seen_once_is_not_remembered() -> None:
    memo = ParseMemo(numbered=8)
    parse_apex(delivery(FIRST), memo)
    assert memo.known_data(delivery(OTHER)) is None
    parse_apex(delivery(OTHER), memo)
    assert memo.known_data(delivery(OTHER)) == full_parse(delivery(OTHER))


def test_a_refused_shape_is_not_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    checks: list[int] = []
    real = numbered.NumberedTemplate.checked

    def counted(*args: object) -> None:
        checks.append(1)
        assert real(*args) is not None  # type: ignore[arg-type]

    monkeypatch.setattr(numbered.NumberedTemplate, "checked", counted)
    memo = ParseMemo(numbered=8)
    for _ in range(4):
        assert parse_apex(delivery(FIRST), memo) == full_parse(delivery(FIRST))
    assert checks == [1]
    assert memo.known_data(delivery(OTHER)) is None


def test_a_hole_in_a_document_is_not_a_number(memo: ParseMemo) -> None:
    # NUL stands for the numbers in a shape: a document holding one must not match it
    # (the parser refuses it: 500).
    raw = delivery(OTHER).replace(b'linkseq="101"', b'linkseq="\x00"')
    assert memo.known_data(raw) is None
    with pytest.raises(ApexError) as info:
        parse_apex(raw, memo)
    assert info.value.code == 500


def test_numbers_outside_the_parsed_options_fail_the_self_check() -> None:
    # A comment between elements (the parser drops it) holds a number the data has not.
    memo = ParseMemo(numbered=8)
    comment = b'<!-- linkseq="5" -->'
    raw = delivery(FIRST).replace(b"</originator>", b"</originator>" + comment)
    assert learn(memo, raw) == full_parse(raw)
    assert memo.known_data(raw) is None
    # Numbers written with ' are no numbers of the shape, but canonical form writes "
    # in the option content: the data holds numbers the document has not (here the
    # second recipient's).
    head, _, tail = delivery(FIRST).partition(b"<recipient identity='sub1")
    mixed = head + b"<recipient identity='sub1" + tail.replace(b'"', b"'")
    assert learn(memo, mixed) == full_parse(mixed)
    assert memo.known_data(mixed) is None
    # All of them written with ': no number at all, a plain document, remembered as is.
    single = delivery(FIRST).replace(b'"', b"'")
    assert parse_apex(single, memo) == full_parse(single)
    assert memo.known_data(single) == full_parse(single)
    assert memo.known_data(delivery(OTHER).replace(b'"', b"'")) is None


def test_a_template_that_does_not_rebuild_the_parse_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The second half of the self-check parses the document with other numbers; here
    # that parse disagrees with the template, which must not be kept.
    memo = ParseMemo(numbered=8)
    raw = delivery(FIRST)
    elsewhere = full_parse(delivery(OTHER))
    monkeypatch.setattr(numbered, "data_from", lambda root, raw: elsewhere)
    assert learn(memo, raw) == full_parse(raw)
    assert memo.known_data(delivery(OTHER)) is None

    def refused(root: object, raw: bytes) -> Data:
        raise ApexError(ApexReplyCode.PARAMETER_INVALID, "refused")

    monkeypatch.setattr(numbered, "data_from", refused)
    memo = ParseMemo(numbered=8)
    learn(memo, raw)
    assert memo.known_data(delivery(OTHER)) is None


def test_numbers_in_inline_content_are_numbers_of_the_shape() -> None:
    memo = ParseMemo(numbered=8)
    inline = b"<data-content Name='c'><p sourceseq=\"%s\">t</p></data-content>"
    learn(memo, delivery(FIRST, b"#c", inline % b"9"))
    raw = delivery(OTHER, b"#c", inline % b"10")
    known = memo.known_data(raw)
    assert known is not None
    assert known == full_parse(raw)
    assert known.data_content is not None
    assert known.data_content.content == b'<p sourceseq="10">t</p>'


def test_the_numbered_shapes_are_bounded() -> None:
    memo = ParseMemo(numbered=2)
    for name in (b"a", b"b", b"c"):
        learn(memo, delivery(FIRST).replace(b"sub0@", name + b"@"))
    assert memo.known_data(delivery(OTHER).replace(b"sub0@", b"c@")) is not None
    assert memo.known_data(delivery(OTHER).replace(b"sub0@", b"b@")) is not None
    assert memo.known_data(delivery(OTHER).replace(b"sub0@", b"a@")) is None
    many = [b"%d" % index for index in range(3 * 200)]
    long = delivery(many)
    assert len(long) > NUMBERED_REST_MAX
    learn(memo, long)
    assert memo.known_data(delivery([b"%d" % (index + 1) for index in range(600)])) is None


def test_the_shape_keeps_the_names_of_the_numbers() -> None:
    one = numbers_of(b'<x linkseq="1" sourceseq="2"/>')
    other = numbers_of(b'<x sourceseq="1" linkseq="2"/>')
    assert one is not None
    assert other is not None
    assert one[1] == [b"1", b"2"]
    assert one[0] != other[0]
    assert numbers_of(b"<x linkseq='1'/>") is None
    assert numbers_of(b'<x xlinkseq="1"/>') is None
    assert set(NUMBERED_ATTRIBUTES) == {"linkseq", "linkepoch", "sourceseq", "gapseq", "gap"}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.from_regex(rb"\A[0-9]{1,20}\Z"), min_size=6, max_size=6))
def test_any_numbers_are_answered_as_the_full_parser_would(numbers: list[bytes]) -> None:
    memo = ParseMemo(numbered=8)
    learn(memo, delivery(FIRST))
    raw = delivery(numbers, b"cid:9@x")
    known = memo.known_data(raw)
    assert known is not None
    assert known == full_parse(raw)
    assert known.to_xml() == full_parse(raw).to_xml()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(min_value=0, max_value=len(delivery(FIRST)) - 1),
    st.sampled_from(list(b"0123456789'\"<>/= &;#:ax\x00")),
    st.booleans(),
)
def test_a_changed_octet_is_either_not_recognized_or_read_as_the_parser_reads_it(
    position: int, octet: int, insert: bool
) -> None:
    memo = ParseMemo(numbered=8)
    raw = delivery(FIRST)
    learn(memo, raw)
    changed = raw[:position] + bytes([octet]) + raw[position + (0 if insert else 1) :]
    known = memo.known_data(changed)
    if known is not None:
        assert known == full_parse(changed)
        assert known.to_xml() == full_parse(changed).to_xml()
