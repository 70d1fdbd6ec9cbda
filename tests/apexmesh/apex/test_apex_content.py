"""APEX payloads and ``content`` references (RFC 3340 section 4.1): multipart/related
with cid: parts, inline data-content with #fragment references."""

from __future__ import annotations

import pytest

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import (
    MAX_MIME_PARTS,
    MimePart,
    Payload,
    build_payload,
    parse_payload,
    resolve_content,
)
from apexmesh.apex.elements import Data, DataContent, Originator, Recipient, parse_data
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError

pytestmark = pytest.mark.unit

GIF = b"GIF89a\x00\xff\r\n\r\nbinary\xe9\r"

# The example of RFC 3340 section 4.1 with its elided body replaced by binary octets.
RFC_MULTIPART = (
    b'Content-Type: multipart/related; boundary="boundary";\r\n'
    b'              start="<1@example.com>";\r\n'
    b'              type="application/beep+xml"\r\n'
    b"\r\n"
    b"--boundary\r\n"
    b"Content-Type: application/beep+xml\r\n"
    b"Content-ID: <1@example.com>\r\n"
    b"\r\n"
    b"<data content='cid:2@example.com'>\r\n"
    b"    <originator identity='fred@example.com' />\r\n"
    b"    <recipient identity='barney@example.com' />\r\n"
    b"</data>\r\n"
    b"--boundary\r\n"
    b"Content-Type: image/gif\r\n"
    b"Content-Transfer-Encoding: binary\r\n"
    b"Content-ID: <2@example.com>\r\n"
    b"\r\n" + GIF + b"\r\n--boundary--\r\n"
)

RFC_INLINE = (
    b"Content-Type: application/beep+xml\r\n\r\n"
    b"<data content='#Content'>\n"
    b"    <originator identity='fred@example.com' />\n"
    b"    <recipient identity='barney@example.com' />\n"
    b"    <data-content Name='Content'>\n"
    b"        <statusResponse transID='86'>\n"
    b"            <destination identity='barney@example.com'>\n"
    b"                <reply code='250' />\n"
    b"            </destination>\n"
    b"        </statusResponse>\n"
    b"    </data-content>\n"
    b"</data>"
)


def code_of(payload: bytes) -> int:
    with pytest.raises(ApexError) as info:
        parse_payload(payload)
    return int(info.value.code)


def test_rfc_multipart_example_resolves_cid_to_the_exact_octets() -> None:
    payload = parse_payload(RFC_MULTIPART)
    data = parse_data(payload.control)
    assert data.content == "cid:2@example.com"
    part = resolve_content(data, payload.parts)
    assert isinstance(part, MimePart)
    assert part.content_id == "2@example.com"
    assert part.content_type == "image/gif"
    assert part.body == GIF
    assert ("Content-Transfer-Encoding", "binary") in part.headers


def test_rfc_inline_example_resolves_fragment_to_data_content() -> None:
    payload = parse_payload(RFC_INLINE)
    assert payload == Payload(control=RFC_INLINE.split(b"\r\n\r\n", 1)[1])
    data = parse_data(payload.control)
    content = resolve_content(data, payload.parts)
    assert isinstance(content, DataContent)
    assert content.name == "Content"
    assert b"<statusResponse transID='86'>" in content.content


def _data(content: str, data_content: DataContent | None = None) -> Data:
    return Data(
        content=content,
        originator=Originator(identity=Endpoint.parse("fred@example.com")),
        recipients=(Recipient(identity=Endpoint.parse("barney@example.com")),),
        data_content=data_content,
    )


PART = MimePart(content_id="2@example.com", content_type="image/gif", body=GIF)


@pytest.mark.parametrize(
    ("reference", "code"),
    [
        ("cid:3@example.com", ApexReplyCode.ACTION_NOT_TAKEN),
        ("#Other", ApexReplyCode.ACTION_NOT_TAKEN),
        ("#", ApexReplyCode.ACTION_NOT_TAKEN),
        ("http://example.com/content", ApexReplyCode.PARAMETER_NOT_IMPLEMENTED),
        ("relative/path", ApexReplyCode.PARAMETER_SYNTAX_ERROR),
    ],
)
def test_unresolvable_references(reference: str, code: ApexReplyCode) -> None:
    with pytest.raises(ApexError) as info:
        resolve_content(_data(reference, DataContent(name="Content")), {"2@example.com": PART})
    assert info.value.code == code


def test_fragment_without_data_content_is_550() -> None:
    with pytest.raises(ApexError) as info:
        resolve_content(_data("#Content"), {})
    assert info.value.code == ApexReplyCode.ACTION_NOT_TAKEN


@pytest.mark.parametrize(
    "reference",
    ["cid:2@example.com", "CID:2@example.com", "cid:2%40example.com", "cid:2@example.com#f"],
)
def test_cid_forms(reference: str) -> None:
    assert resolve_content(_data(reference), {"2@example.com": PART}) is PART


def test_build_payload_round_trips_binary_parts() -> None:
    other = MimePart(content_id="3@example.com", content_type="text/plain", body=b"")
    data = _data("cid:2@example.com")
    payload = parse_payload(build_payload(data, [PART, other], boundary="b-1"))
    assert parse_data(payload.control) == data
    assert payload.parts["2@example.com"].body == GIF
    assert payload.parts["3@example.com"].body == b""
    assert set(payload.parts) == {"2@example.com", "3@example.com"}


def test_build_payload_refuses_unframeable_parts() -> None:
    with pytest.raises(ApexError):
        build_payload(_data("cid:x"), [MimePart(content_id=None, content_type="a/b")], boundary="b")
    with pytest.raises(ApexError):
        build_payload(
            _data("cid:x"),
            [MimePart(content_id="x", content_type="a/b", body=b"--b")],
            boundary="b",
        )


def _multipart(*parts: bytes, params: str = "") -> bytes:
    head = f'Content-Type: multipart/related; boundary="B"{params}\r\n\r\n'.encode()
    return head + b"".join(b"--B\r\n" + part + b"\r\n" for part in parts) + b"--B--\r\n"


CONTROL = b"Content-Type: application/beep+xml\r\nContent-ID: <c>\r\n\r\n<ok />"


def test_first_part_is_the_start_part_by_default() -> None:
    payload = parse_payload(_multipart(CONTROL, b"Content-ID: <p>\r\n\r\nbody"))
    assert payload.control == b"<ok />"
    assert payload.parts["p"].content_type == "text/plain"  # the MIME default
    assert payload.parts["p"].body == b"body"


def test_quoted_printable_is_decoded() -> None:
    part = b"Content-ID: <p>\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\na=3Db"
    assert parse_payload(_multipart(CONTROL, part)).parts["p"].body == b"a=b"


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"Content-Type: text/plain\r\n\r\nhello", 501),
        (b"\r\n<ok />", 501),  # BEEP default application/octet-stream
        (b"Content-Type: application/beep+xml", 500),  # no empty line
        (_multipart(CONTROL, params='; start="<missing>"'), 501),
        (_multipart(b"Content-Type: text/plain\r\n\r\nx"), 501),
        (_multipart(CONTROL, params='; type="text/plain"'), 501),
        (_multipart(CONTROL, b"Content-ID: <p>\r\n\r\n1", b"Content-ID: <p>\r\n\r\n2"), 501),
        (_multipart(CONTROL, b"Content-ID: <c>\r\n\r\n1"), 501),
        (b'Content-Type: multipart/related; boundary="B"\r\n\r\nno parts at all', 500),
        (b"Content-Type: multipart/related\r\n\r\n--B\r\n\r\nx\r\n--B--\r\n", 500),
        (
            _multipart(
                CONTROL,
                b'Content-ID: <n>\r\nContent-Type: multipart/mixed; boundary="C"\r\n\r\n'
                b"--C\r\n\r\nx\r\n--C--",
            ),
            504,
        ),
        (_multipart(CONTROL, *[b"\r\nx"] * MAX_MIME_PARTS), 554),
    ],
)
def test_invalid_payloads(payload: bytes, code: int) -> None:
    assert code_of(payload) == code


def test_parts_without_content_id_are_not_referenceable() -> None:
    payload = parse_payload(_multipart(CONTROL, b"Content-Type: text/plain\r\n\r\nanonymous"))
    assert payload.parts == {}
