"""The payload the SDK writes for octet content (apexmesh/client/outgoing.py).

Receivers take shortcuts for exactly this layout: the canonical MIME split
(``content._canonical``) and data recognized from an earlier parse
(``ParseMemo.known_data``, apexmesh/apex/memo.py). Each is written by hand on both
sides, so these tests tie the writer to the readers."""

from __future__ import annotations

import pytest

from apexmesh.apex import content
from apexmesh.apex import data as data_module
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import parse_apex
from apexmesh.apex.errors import ApexError
from apexmesh.apex.memo import ParseMemo
from apexmesh.beep.xml import parse_xml
from apexmesh.client import outgoing
from apexmesh.client.outgoing import as_endpoint, as_recipients, encode_data

pytestmark = pytest.mark.unit


def payload(body: bytes) -> bytes:
    return encode_data(
        originator=as_endpoint("fred@example.com"),
        recipients=as_recipients("barney@example.com"),
        content=body,
    )


def test_the_sdks_payload_takes_the_canonical_split() -> None:
    raw = payload(b"x" * 256)
    assert content._canonical(raw) == content._parse_general(raw)


def test_the_sdks_next_data_is_recognized_from_the_first_parse() -> None:
    memo = ParseMemo()
    first = content.parse_payload(payload(b"one")).control
    parse_apex(first, memo)
    second = content.parse_payload(payload(b"two")).control
    known = memo.known_data(second)
    assert known is not None
    assert known.content != parse_apex(first).content  # a fresh Content-ID each data
    assert known == data_module.data_from(parse_xml(second), second)


def test_each_payload_names_what_its_call_names_though_the_last_template_is_kept() -> None:
    fred, wilma = as_endpoint("fred@example.com"), as_endpoint("wilma@rubble.com")
    barney, dino = as_recipients("barney@example.com"), as_recipients("dino@example.com")
    calls = [
        (fred, barney, "application/octet-stream"),
        (fred, barney, "image/gif"),
        (wilma, barney, "image/gif"),
        (wilma, dino, "image/gif"),
        (fred, barney, "application/octet-stream"),
    ]
    for originator, recipients, content_type in calls:
        raw = encode_data(
            originator=originator,
            recipients=recipients,
            content=b"body",
            content_type=content_type,
        )
        split = content.parse_payload(raw)
        data = parse_apex(split.control)
        part = content.resolve_content(data, split.parts)
        assert data.originator.identity == originator
        assert data.recipients == recipients
        assert isinstance(part, content.MimePart)
        assert (part.content_type, part.body) == (content_type, b"body")
        assert part.content_id is not None
        assert part.content_id.endswith("@" + originator.domain)


@pytest.mark.parametrize(
    ("body", "frames"),
    [
        (b"", True),
        (b"no dashes at all", True),
        (b"-- a signature", True),
        (b"--DELI", True),
        (b"x--DELIMx", False),
        (b"--DELIM", False),
        (b"\r\n--DELIM--\r\n", False),
    ],
)
def test_a_body_can_be_framed_unless_it_holds_the_delimiter(body: bytes, frames: bool) -> None:
    assert content.can_frame(b"--DELIM", body) is frames
    if frames:
        content.check_framing(b"--DELIM", body)
    else:
        with pytest.raises(ApexError) as raised:
            content.check_framing(b"--DELIM", body)
        assert raised.value.code == ApexReplyCode.ACTION_ABORTED


def test_a_body_holding_every_boundary_drawn_is_refused_with_451(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Drawing the same boundary every time stands in for a body that contains each of
    # four random ones (which no test could craft).
    monkeypatch.setattr(outgoing, "_fresh_boundary", lambda: "apex-fixed")
    monkeypatch.setattr(outgoing, "_boundary", "apex-fixed")
    with pytest.raises(ApexError) as raised:
        payload(b"a\r\n--apex-fixed--\r\nb")
    assert raised.value.code == ApexReplyCode.ACTION_ABORTED
    monkeypatch.undo()
    assert content.parse_payload(payload(b"fine")).parts
