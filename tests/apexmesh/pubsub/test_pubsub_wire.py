"""What the pubsub service sends and reads: payloads keep content untouched, the RFC 3341
elements of the section 7 grant, the access service's answers."""

from __future__ import annotations

import pytest

from apexmesh.apex.access import TokenRegistry
from apexmesh.apex.access import parse_operation as parse_access_operation
from apexmesh.apex.content import MimePart, parse_payload
from apexmesh.apex.data import Data, Originator, Recipient
from apexmesh.apex.elements import parse_message
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.wire import (
    access_get,
    access_set,
    delivered_content,
    element_payload,
    forward_payload,
    last_update,
    reply_code,
)

pytestmark = pytest.mark.unit

MIKE = Endpoint.parse("mike@example.com")
TOPIC = Endpoint.parse("apex=pubsub/news@example.com")


def test_an_element_travels_inline() -> None:
    payload = element_payload(Endpoint.parse("apex=pubsub@example.com"), MIKE, b"<x />")
    data, body, parts = delivered_content(payload)
    assert body == b"<x />"
    assert parts == ()
    assert data.recipients[0].identity == MIKE


def test_mime_parts_are_copied_untouched() -> None:
    body = b"\x00\xffbinary\r\n--not-a-boundary\r\n"
    part = MimePart(content_id="1@example.com", content_type="image/gif", body=body)
    data = Data(
        content="cid:1@example.com",
        originator=Originator(identity=TOPIC),
        recipients=(Recipient(identity=MIKE),),
    )
    payload = forward_payload(data, [part])
    parsed = parse_payload(payload)
    assert parsed.parts["1@example.com"].body == body
    assert isinstance(parse_message(parsed.control), Data)
    assert delivered_content(payload)[1] == body


def test_a_payload_that_is_no_data_is_501() -> None:
    payload = element_payload(TOPIC, MIKE, b"<x />").replace(b"<data ", b"<datum ", 1)
    with pytest.raises(ApexError):
        delivered_content(payload)


def test_access_elements_parse_as_rfc_3341_operations() -> None:
    registry = TokenRegistry()
    granted = parse_access_operation(
        access_set(TOPIC, MIKE, ["pubsub:subscribe", "core:data"], "", 7), registry
    )
    assert granted.trans_id == 7
    removed = parse_access_operation(
        access_set(TOPIC, MIKE, [], "2026-01-01T00:00:00.000000Z", 8), registry
    )
    assert removed.trans_id == 8
    got = parse_access_operation(access_get(TOPIC, MIKE, 9), registry)
    assert got.trans_id == 9


def test_reading_the_access_answers() -> None:
    assert reply_code(b"<reply code='555' transID='3'>entry exists</reply>") == 555
    assert reply_code(b"<set transID='3' />") == 0
    assert reply_code(b"not xml") == 0
    answer = (
        b"<set transID='1'><access owner='apex=pubsub/news@example.com' "
        b"actor='mike@example.com' actions='core:data' lastUpdate='2026-01-01T00:00:00Z' />"
        b"</set>"
    )
    assert last_update(answer) == "2026-01-01T00:00:00Z"
    assert last_update(b"<reply code='551' transID='1' />") == ""
