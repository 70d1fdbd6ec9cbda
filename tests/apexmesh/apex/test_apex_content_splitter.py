"""The multipart splitter of :func:`apexmesh.apex.content.parse_payload` (RFC 2046
section 5.1.1 delimiters, strict part headers) on its edge cases."""

from __future__ import annotations

import pytest

from apexmesh.apex.content import MAX_MIME_PARTS, Payload, parse_payload
from apexmesh.apex.errors import ApexError

pytestmark = pytest.mark.unit

HEAD = b'Content-Type: multipart/related; boundary="B"; start="<c>"\r\n\r\n'
CONTROL = b"Content-Type: application/beep+xml\r\nContent-ID: <c>\r\n\r\n<ok />"


def code_of(payload: bytes) -> int:
    with pytest.raises(ApexError) as info:
        parse_payload(payload)
    return int(info.value.code)


def related(*parts: bytes, head: bytes = HEAD, close: bytes = b"--B--\r\n") -> bytes:
    return head + b"".join(b"--B\r\n" + part + b"\r\n" for part in parts) + close


def test_crlf_before_the_delimiter_belongs_to_the_delimiter() -> None:
    body = b"line\r\n\r\n"
    payload = parse_payload(related(CONTROL, b"Content-ID: <p>\r\n\r\n" + body))
    assert payload.parts["p"].body == body


def test_bare_cr_and_lf_before_the_boundary_are_body_octets() -> None:
    body = b"a\n--B\nb\r--B\rc\n--B--\n"
    payload = parse_payload(related(CONTROL, b"Content-ID: <p>\r\n\r\n" + body))
    assert payload.parts["p"].body == body


def test_boundary_not_on_its_own_line_is_not_a_delimiter() -> None:
    body = b"x--B\r\n--Bx\r\n--B-x\r\n--B--x\r\n  --B\r\n"
    payload = parse_payload(related(CONTROL, b"Content-ID: <p>\r\n\r\n" + body))
    assert payload.parts["p"].body == body


def test_transport_padding_after_delimiters() -> None:
    raw = (
        HEAD + b"--B \t \r\n" + CONTROL + b"\r\n--B\t\r\nContent-ID: <p>\r\n\r\nbody"
        b"\r\n--B-- \t\r\n"
    )
    payload = parse_payload(raw)
    assert payload.control == b"<ok />"
    assert payload.parts["p"].body == b"body"


def test_preamble_and_epilogue_are_ignored() -> None:
    raw = (
        HEAD
        + b"preamble --B\r\n\r\n--B not yet\r\n--B\r\n"
        + CONTROL
        + b"\r\n--B--\r\nepilogue\r\n--B\r\nContent-ID: <e>\r\n\r\nnot a part\r\n--B--\r\n"
    )
    assert parse_payload(raw) == Payload(control=b"<ok />")


def test_close_delimiter_may_end_the_payload_without_crlf() -> None:
    payload = parse_payload(related(CONTROL, b"Content-ID: <p>\r\n\r\nx", close=b"--B--"))
    assert payload.parts["p"].body == b"x"


@pytest.mark.parametrize(
    "raw",
    [
        related(CONTROL, close=b""),  # no close delimiter
        related(CONTROL, close=b"--B\r\n"),  # a delimiter, then the end
        related(CONTROL, close=b"--B"),
        related(CONTROL, close=b"--B--x"),  # not a close delimiter
        HEAD + b"--B\r\n" + CONTROL,
        HEAD + b"--B\n" + CONTROL + b"\n--B--\n",  # LF-only line ends
        HEAD + b"--B\r\n--B--\r\n",  # no part between the delimiters
        HEAD + b"--B--\r\n",  # close delimiter first
        HEAD,
    ],
)
def test_broken_framing_is_500(raw: bytes) -> None:
    assert code_of(raw) == 500


@pytest.mark.parametrize(
    "part",
    [
        b"no colon here\r\n\r\nbody",
        b" Content-ID: <p>\r\n\r\nbody",  # first line is a continuation
        b"Content-ID <p>\r\n\r\nbody",
        b"Bad Name: x\r\n\r\nbody",
        b": no name\r\n\r\nbody",
        b"Content-ID: <p>\nX-A: 1\r\n\r\nbody",  # bare LF in the header block
    ],
)
def test_malformed_part_headers_are_500(part: bytes) -> None:
    assert code_of(related(CONTROL, part)) == 500


@pytest.mark.parametrize(
    "head",
    [
        b"Content-Type: multipart/related; boundary=B; start=<c>\r\n\r\n",  # <> unquoted
        b'Content-Type: multipart/related; boundary="B"x\r\n\r\n',
        b'Content-Type: multipart/related; boundary=""\r\n\r\n',
        b"Content-Type: multipart/related; boundary=B\r\nContent-Transfer-Encoding: base64\r\n\r\n",
    ],
)
def test_malformed_top_level_headers_are_500(head: bytes) -> None:
    assert code_of(related(CONTROL, head=head)) == 500


def test_header_names_are_case_insensitive_and_folded_lines_unfolded() -> None:
    part = (
        b"content-id:\r\n  <p>\r\nCONTENT-TYPE: Image/GIF;\r\n\tname=x\r\nX-Note: a\r\n b\r\n"
        b"\r\nbody"
    )
    raw = related(b"content-type: application/beep+xml\r\ncontent-id: <c>\r\n\r\n<ok />", part)
    payload = parse_payload(raw)
    mime = payload.parts["p"]
    assert mime.content_id == "p"
    assert mime.content_type == "image/gif"
    assert ("X-Note", "a b") in mime.headers
    assert mime.body == b"body"


def test_header_only_part_has_an_empty_body() -> None:
    payload = parse_payload(related(CONTROL, b"Content-ID: <p>", b"Content-ID: <q>\r\n"))
    assert payload.parts["p"].body == b""
    assert payload.parts["q"].body == b""


def test_parameters_quoted_unquoted_and_rfc2231() -> None:
    for head in (
        (
            b'Content-Type: multipart/related;boundary=B;start="<c>";type="application/beep+xml"'
            b"\r\n\r\n"
        ),
        b'Content-Type: multipart/related; BOUNDARY = B ;\r\n start="<c>";\r\n\r\n',
        b"Content-Type: multipart/related; boundary*=''B; start=\"<c>\"\r\n\r\n",
    ):
        payload = parse_payload(related(b"Content-ID: <x>\r\n\r\nx", CONTROL, head=head))
        assert payload.control == b"<ok />", head
        assert set(payload.parts) == {"x"}


def test_base64_part_is_decoded_and_binary_kept() -> None:
    b64 = b"Content-ID: <p>\r\nContent-Transfer-Encoding: BASE64\r\n\r\naGVs\r\nbG8="
    binary = b"Content-ID: <q>\r\nContent-Transfer-Encoding: binary\r\n\r\naGVs\r\nbG8="
    payload = parse_payload(related(CONTROL, b64, binary))
    assert payload.parts["p"].body == b"hello"
    assert payload.parts["q"].body == b"aGVs\r\nbG8="


def test_encoded_word_header_values_are_decoded() -> None:
    part = b"Content-ID: <p>\r\nX-Title: =?utf-8?q?caf=C3=A9?=\r\n\r\nx"
    assert ("X-Title", "café") in parse_payload(related(CONTROL, part)).parts["p"].headers


def test_message_parts_are_504_like_multiparts() -> None:
    part = b"Content-ID: <m>\r\nContent-Type: message/rfc822\r\n\r\nA: b\r\n\r\nx"
    assert code_of(related(CONTROL, part)) == 504


def test_many_parts_up_to_the_limit() -> None:
    parts = [b"Content-ID: <%d>\r\n\r\nbody %d" % (i, i) for i in range(MAX_MIME_PARTS - 1)]
    payload = parse_payload(related(CONTROL, *parts))
    assert len(payload.parts) == MAX_MIME_PARTS - 1
    assert payload.parts["17"].body == b"body 17"
    assert code_of(related(CONTROL, *parts, b"\r\nx")) == 554


def test_missing_close_beats_the_part_limit() -> None:
    raw = related(CONTROL, *[b"\r\nx"] * MAX_MIME_PARTS, close=b"")
    assert code_of(raw) == 500
