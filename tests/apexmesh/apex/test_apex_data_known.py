"""Data documents parsed once and recognized again (:func:`apexmesh.apex.data.known_data`).

A sender's data differ from one another in the content reference only; a document that
is an earlier one with another ``content`` value is answered from the earlier parse,
and must equal what the full parser makes of it."""

from __future__ import annotations

import pytest

from apexmesh.apex import data as data_module
from apexmesh.apex.data import data_from, known_data
from apexmesh.apex.elements import parse_apex
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import parse_xml

pytestmark = pytest.mark.unit

REST = (
    b"<originator identity='fred@example.com' /><recipient identity='barney@example.com'>"
    b"<option internal='statusRequest' transID='7' /></recipient></data>"
)


def document(content: bytes, rest: bytes = REST) -> bytes:
    return b"<data content='" + content + b"'>" + rest


@pytest.fixture(autouse=True)
def _forget() -> None:
    data_module._KNOWN.clear()


def full_parse(raw: bytes) -> object:
    return data_from(parse_xml(raw), raw)


def test_a_document_differing_in_content_only_is_recognized() -> None:
    first = parse_apex(document(b"cid:1.abc@example.com"))
    raw = document(b"cid:2.abc@example.com")
    known = known_data(raw)
    assert known is not None
    assert known == full_parse(raw)
    assert known.content == "cid:2.abc@example.com"
    assert known.recipients is first.recipients  # type: ignore[union-attr]
    assert parse_apex(raw) == known


def test_inline_content_is_kept_as_the_peer_wrote_it() -> None:
    rest = (
        b"<originator identity='a@x' /><recipient identity='b@x' />"
        b"<data-content Name='Content'><p  a=\"1\">t&amp;u</p></data-content></data>"
    )
    parse_apex(document(b"#Content", rest))
    known = known_data(document(b"#Content", rest))
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
def test_values_xml_would_not_read_as_written_take_the_parser(value: bytes) -> None:
    parse_apex(document(b"cid:1@x"))
    assert known_data(document(value)) is None


def test_the_longest_value_recognized_is_recognized() -> None:
    parse_apex(document(b"cid:1@x"))
    raw = document(b"cid:" + b"x" * 1020)
    known = known_data(raw)
    assert known is not None
    assert known == full_parse(raw)


def test_a_rest_never_parsed_is_never_recognized() -> None:
    parse_apex(document(b"cid:1@x"))
    with_entity = REST.replace(b"fred@example.com", b"fred&ent;@example.com")
    assert known_data(document(b"cid:2@x", with_entity)) is None
    with pytest.raises(ApexError) as info:
        parse_apex(document(b"cid:2@x", with_entity))
    assert info.value.code in (500, 501)


def test_refused_documents_are_not_remembered() -> None:
    bad = REST.replace(b"fred@example.com", b"fred")  # no domain: 553
    for _ in range(2):
        with pytest.raises(ApexError) as info:
            parse_apex(document(b"cid:1@x", bad))
        assert info.value.code == 553
    assert data_module._KNOWN == {}


def test_long_documents_are_not_remembered_and_the_table_is_bounded() -> None:
    many = b"".join(b"<recipient identity='r%d@x' />" % i for i in range(200))
    parse_apex(document(b"cid:1@x", b"<originator identity='a@x' />" + many + b"</data>"))
    assert data_module._KNOWN == {}
    for index in range(data_module._KNOWN_MAX + 5):
        parse_apex(document(b"cid:1@x", REST.replace(b"7", str(index + 1).encode())))
    assert 0 < len(data_module._KNOWN) <= data_module._KNOWN_MAX
