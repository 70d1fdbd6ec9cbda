"""XEP-0040's examples 1 to 7 in their APEX form (docs/robust.md, "Examples 1 to 7"):
each is built, serialized, read back by the hardened parser (inside a real APEX ``data``
element where the XEP shows a delivery) and compared."""

from __future__ import annotations

import pytest

from apexmesh.apex.data import Data, DataContent, Originator, Recipient
from apexmesh.apex.elements import parse_apex
from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.robust.elements import (
    PublishHeader,
    RobustInfo,
    publish_from_option,
    publish_option,
    robust_from_option,
    robust_option,
)
from apexmesh.pubsub.robust.operations import (
    GapRequest,
    parse_request,
)
from apexmesh.pubsub.robust.publish_types import PublishType

pytestmark = pytest.mark.unit

TOPIC = "data.topics"
SERVICE_TOPIC = Endpoint.parse("apex=pubsub/data.topics@localhost")
SERVICE = Endpoint.parse("apex=pubsub@localhost")
CLIENT = Endpoint.parse("myclient@server.net")
FROMAPLACE = Endpoint.parse("publisher@fromaplace.net")
ELSEWHERE = Endpoint.parse("publisher@elsewhere.net")


def _delivery(info: RobustInfo, trans_id: int, content: bytes = b"<quote>1</quote>") -> RobustInfo:
    """Build the data the service sends, serialize it, parse it as a relay would, and
    read the subscriber's option back."""
    data = Data(
        content="#Content",
        originator=Originator(identity=SERVICE_TOPIC),
        recipients=(Recipient(identity=CLIENT, options=(robust_option(info, trans_id),)),),
        data_content=DataContent(name="Content", content=content),
    )
    parsed = parse_apex(data.to_xml())
    assert isinstance(parsed, Data)
    (recipient,) = parsed.recipients
    assert recipient.identity == CLIENT
    (option,) = recipient.options
    assert option.internal == "robust"
    assert option.target_hop.value == "final"
    assert option.must_understand is False
    return robust_from_option(option)


def test_example_1_sequence_numbers_in_each_publish() -> None:
    first = RobustInfo(link_seq=57372, source_seq=7547392, source=FROMAPLACE)
    second = RobustInfo(link_seq=57373, source_seq=44211, source=ELSEWHERE)
    assert _delivery(first, 1) == first
    assert _delivery(second, 2) == second
    assert b'linkseq="57372"' in robust_option(first, 1).content


def test_example_2_gap_by_link_range() -> None:
    body = (
        b"<gap xmlns='urn:apexmesh:robust-pubsub:1' topic='data.topics' transID='1'"
        b" linkfrom='56737' linkto='56739' />"
    )
    request = parse_request(body)
    assert request == GapRequest(topic=TOPIC, trans_id=1, link_from=56737, link_to=56739)
    assert parse_request(request.to_xml()) == request


def test_example_3_gap_by_source_last_received_per_source() -> None:
    body = (
        b"<gap xmlns='urn:apexmesh:robust-pubsub:1' topic='data.topics' transID='2'>"
        b"<source ns='publisher@fromaplace.net' after='56737' />"
        b"<source ns='publisher@elsewhere.net' after='211234' />"
        b"</gap>"
    )
    request = parse_request(body)
    assert isinstance(request, GapRequest)
    assert request.sources == ((FROMAPLACE, 56737), (ELSEWHERE, 211234))
    assert not request.by_link
    assert parse_request(request.to_xml()) == request


def test_example_4_resynchronisation_restarts_the_link_at_zero() -> None:
    first = RobustInfo(link_seq=0, link_epoch=2, source_seq=7547392, source=FROMAPLACE)
    second = RobustInfo(link_seq=1, link_epoch=2, source_seq=44211, source=ELSEWHERE)
    assert _delivery(first, 3).resync
    assert not _delivery(second, 4).resync


def test_example_5_heartbeat_carries_no_source_sequence() -> None:
    beat = RobustInfo(link_seq=57374, source=SERVICE, heartbeat=True)
    back = _delivery(beat, 5, content=b"")
    assert back.heartbeat
    assert back.source_seq is None
    assert b'ns="link.heartbeat"' in robust_option(beat, 5).content


def test_example_6_publish_types() -> None:
    update = RobustInfo(
        link_seq=57372, source_seq=7547392, source=FROMAPLACE, type=PublishType.UPDATE
    )
    correction = RobustInfo(
        link_seq=57373, source_seq=44211, source=ELSEWHERE, type=PublishType.CORRECTION
    )
    assert _delivery(update, 6).type is PublishType.UPDATE
    assert _delivery(correction, 7).type is PublishType.CORRECTION


def test_example_7_permission_token_in_band() -> None:
    delivered = RobustInfo(
        link_seq=57372,
        source_seq=7547392,
        source=FROMAPLACE,
        type=PublishType.UPDATE,
        permtoken="6747",
    )
    assert _delivery(delivered, 8).permtoken == "6747"
    # What the publisher sent with its data: a per-data option.
    header = PublishHeader(type=PublishType.UPDATE, permtoken="6747")
    sent = Data(
        content="#Content",
        originator=Originator(identity=FROMAPLACE),
        recipients=(Recipient(identity=SERVICE_TOPIC),),
        options=(publish_option(header, 41),),
        data_content=DataContent(name="Content", content=b"<quote>1</quote>"),
    )
    parsed = parse_apex(sent.to_xml())
    assert isinstance(parsed, Data)
    assert publish_from_option(parsed.options[0]) == header
