"""The canonical-layout fast path of :func:`apexmesh.apex.content.parse_payload`.

Payloads in exactly the layout :func:`~apexmesh.apex.content.build_payload` writes are
split without the general machinery; every result must be the general splitter's, and
anything that would make the general splitter look further must take it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apexmesh.apex import content
from apexmesh.apex.content import CONTROL_ID, MimePart, Payload, build_payload, parse_payload
from apexmesh.apex.errors import ApexError

pytestmark = pytest.mark.unit

CONTROL = (
    b"<data content='cid:1@x'><originator identity='a@x' /><recipient identity='b@x' /></data>"
)


def outcome(parse: Callable[[bytes], Payload], payload: bytes) -> Payload | int:
    """What ``parse(payload)`` gives: the payload, or the error code it raises."""
    try:
        return parse(payload)
    except ApexError as exc:
        return int(exc.code)


def canonical(
    body: bytes, *, boundary: str = "apex-b1", cid: str = "1@x", media: str = "a/b"
) -> bytes:
    part = MimePart(content_id=cid, content_type=media, body=body)
    return build_payload(CONTROL, (part,), boundary=boundary)


def test_the_fast_path_takes_what_build_payload_writes() -> None:
    payload = canonical(b"x" * 256)
    assert content._canonical(payload) is not None
    parsed = parse_payload(payload)
    assert parsed == content._parse_general(payload)
    assert parsed.control == CONTROL
    assert parsed.parts["1@x"].body == b"x" * 256
    assert parsed.parts["1@x"].headers == (
        ("Content-Type", "a/b"),
        ("Content-Transfer-Encoding", "binary"),
        ("Content-ID", "<1@x>"),
    )


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\r\n",
        b"a\r\n--apex-b1x",  # a delimiter-like line that is none: the general path decides
        b"a\r\n--apex-b1 \r\nb",  # a delimiter with padding inside the body
        b"a\r\n--apex-b1--\r\n",  # the close delimiter inside the body
        b"--apex-b1\r\n",  # with the blank line's CRLF, a delimiter
        b"--apex-b1--\r\n",
    ],
)
def test_bodies_near_the_boundary_parse_as_the_general_splitter_says(body: bytes) -> None:
    raw = canonical(b"placeholder").replace(b"placeholder", body)
    assert outcome(parse_payload, raw) == outcome(content._parse_general, raw)


@pytest.mark.parametrize(
    ("cid", "media"),
    [(CONTROL_ID, "a/b"), ("1@x", "multipart/mixed"), ("1@x", "message/rfc822")],
)
def test_what_the_general_path_refuses_is_left_to_it(cid: str, media: str) -> None:
    raw = (
        canonical(b"x", cid=cid, media=media)
        if cid != CONTROL_ID
        else (canonical(b"x").replace(b"<1@x>", b"<" + CONTROL_ID.encode() + b">"))
    )
    assert content._canonical(raw) is None
    assert outcome(parse_payload, raw) == outcome(content._parse_general, raw)
    assert isinstance(outcome(parse_payload, raw), int)


@pytest.mark.parametrize(
    "edit",
    [
        lambda raw: raw + b"epilogue",
        lambda raw: raw[:-2],
        lambda raw: raw.replace(b"binary", b"base64"),
        lambda raw: raw.replace(b"Content-ID: <1@x>", b"Content-ID:  <1@x>"),
        lambda raw: raw.replace(b'type="application/beep+xml"', b'type="text/plain"'),
        lambda raw: raw.replace(
            b"\r\n--apex-b1\r\nContent-Type: a/b", b"\r\n--apex-b1 \r\nContent-Type: a/b"
        ),
        lambda raw: raw.replace(b"Content-Type: a/b", b"Content-Type: A/B"),
        lambda raw: raw.replace(CONTROL, CONTROL + b"\r\n--apex-b1x"),
        lambda raw: raw.replace(CONTROL, b"--apex-b1\r\n" + CONTROL),
    ],
)
def test_every_other_layout_takes_the_general_path(edit: Callable[[bytes], bytes]) -> None:
    raw = edit(canonical(b"x" * 10))
    assert content._canonical(raw) is None
    assert outcome(parse_payload, raw) == outcome(content._parse_general, raw)


_BODY_ALPHABET = st.sampled_from(
    [b"x", b"\r", b"\n", b"-", b"--", b"apex-b1", b" ", b"\r\n--apex-b1", b"--apex-b1"]
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_BODY_ALPHABET, max_size=12).map(b"".join),
    st.lists(_BODY_ALPHABET, max_size=6).map(b"".join),
    st.sampled_from(["apex-b1", "a", "x" * 70]),
)
def test_fast_and_general_paths_agree(body: bytes, around: bytes, boundary: str) -> None:
    try:
        raw = canonical(body, boundary=boundary)
    except ApexError:
        return  # build_payload refuses a body holding its boundary
    raw = raw.replace(CONTROL, around + CONTROL + around, 1)
    assert outcome(parse_payload, raw) == outcome(content._parse_general, raw)


_FIELD_ALPHABET = st.sampled_from(
    [b"a", b"Z", b"0", b"@", b".", b"-", b"_", b"/", b" ", b"<", b">", b'"', b";", b"=", b"\r\n"]
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_FIELD_ALPHABET, max_size=10).map(b"".join),
    st.lists(_FIELD_ALPHABET, max_size=10).map(b"".join),
    st.sampled_from([1, 250, 260]),
)
def test_odd_media_types_and_content_ids_parse_as_the_general_splitter_says(
    media: bytes, cid: bytes, repeat: int
) -> None:
    raw = (
        canonical(b"x" * 10)
        .replace(b"Content-Type: a/b", b"Content-Type: " + media * repeat)
        .replace(b"<1@x>", b"<" + cid * repeat + b">")
    )
    assert outcome(parse_payload, raw) == outcome(content._parse_general, raw)


@pytest.mark.parametrize(("cid", "media"), [("1@x", "a/" + "b" * 300), ("1" * 300 + "@x", "a/b")])
def test_fields_past_the_fast_paths_bound_take_the_general_path(cid: str, media: str) -> None:
    raw = canonical(b"x", cid=cid, media=media)
    assert content._canonical(raw) is None
    assert parse_payload(raw).parts[cid].content_type == media
