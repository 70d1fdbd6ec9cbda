"""The payload the SDK writes for octet content (apexmesh/client/outgoing.py).

Receivers take shortcuts for exactly this layout: the canonical MIME split
(``content._canonical``) and data recognized from an earlier parse
(``data.known_data``). Each is written by hand on both sides, so these tests tie the
writer to the readers."""

from __future__ import annotations

import pytest

from apexmesh.apex import content
from apexmesh.apex import data as data_module
from apexmesh.apex.elements import parse_apex
from apexmesh.beep.xml import parse_xml
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
    data_module._KNOWN.clear()
    first = content.parse_payload(payload(b"one")).control
    parse_apex(first)
    second = content.parse_payload(payload(b"two")).control
    known = data_module.known_data(second)
    assert known is not None
    assert known.content != parse_apex(first).content  # a fresh Content-ID each data
    assert known == data_module.data_from(parse_xml(second), second)
