"""The report service elements (RFC 3340 sections 5.1, 6.2 and 9.2)."""

from __future__ import annotations

import pytest

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Data, Recipient, Reply, parse_apex, parse_data
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import Option
from apexmesh.apex.report import (
    Destination,
    StatusResponse,
    carries_status_response,
    check_report_loop,
    parse_destination,
    parse_status_response,
    report_data,
)

pytestmark = pytest.mark.unit

BARNEY = Endpoint.parse("barney@example.com")
FRED = Endpoint.parse("fred@example.com")

DELIVERED = (
    b"<statusResponse transID='86'>\n"
    b"    <destination identity='barney@example.com'>\n"
    b"        <reply code='250' />\n"
    b"    </destination>\n"
    b"</statusResponse>"
)
UNKNOWN = (
    b"<statusResponse transID='86'>\n"
    b"    <destination identity='barney@example.com'>\n"
    b"        <reply code='550'>unknown endpoint\n"
    b"                          identity</reply>\n"
    b"    </destination>\n"
    b"</statusResponse>"
)
RUBBLE_REPORT = (
    b"<data content='#Content'>\n"
    b"    <originator identity='apex=report@rubble.com' />\n"
    b"     <recipient identity='fred@example.com' />\n"
    b"     <data-content Name='Content'>\n"
    b"         <statusResponse transID='86'>\n"
    b"             <destination identity='barney@rubble.com'>\n"
    b"                 <reply code='250' />\n"
    b"             </destination>\n"
    b"         </statusResponse>\n"
    b"     </data-content>\n"
    b" </data>"
)


def test_rfc_delivered_example() -> None:
    response = parse_status_response(DELIVERED)
    assert response == StatusResponse(
        trans_id=86,
        destinations=(Destination(identity=BARNEY, reply=Reply(code=250, trans_id=None)),),
    )
    assert parse_apex(response.to_xml()) == response


def test_rfc_unknown_endpoint_example() -> None:
    response = parse_status_response(UNKNOWN)
    (destination,) = response.destinations
    assert destination.reply.code == ApexReplyCode.ACTION_NOT_TAKEN
    assert " ".join(destination.reply.text.split()) == "unknown endpoint identity"
    assert parse_status_response(response.to_xml()) == response


def test_rfc_report_data_example_matches_what_a_relay_builds() -> None:
    received = parse_data(RUBBLE_REPORT)
    assert received.data_content is not None
    response = parse_status_response(received.data_content.content)
    built = report_data(relay_domain="rubble.com", originator=FRED, response=response)
    assert built.originator == received.originator
    assert built.recipients == received.recipients
    assert built.content == received.content
    assert built.data_content is not None
    assert parse_status_response(built.data_content.content) == response
    assert carries_status_response(received)
    assert carries_status_response(built)
    assert parse_data(built.to_xml()) == built


def test_destination_reply_may_carry_a_trans_id() -> None:
    text = (
        b"<destination identity='barney@example.com'><reply code='250' transID='4' /></destination>"
    )
    destination = parse_destination(text)
    assert destination.reply == Reply(code=250, trans_id=4)
    assert parse_apex(destination.to_xml()) == destination


def test_report_loop_rule() -> None:
    response = StatusResponse(
        trans_id=1,
        destinations=(Destination(identity=BARNEY, reply=Reply(code=250, trans_id=None)),),
    )
    report = report_data(relay_domain="example.com", originator=FRED, response=response)
    check_report_loop(report)
    looped = Data(
        content=report.content,
        originator=report.originator,
        recipients=(
            Recipient(identity=FRED, options=(Option(internal="statusRequest", trans_id=2),)),
        ),
        data_content=report.data_content,
    )
    assert parse_data(looped.to_xml()) == looped
    with pytest.raises(ApexError) as info:
        check_report_loop(looped)
    assert info.value.code == ApexReplyCode.TRANSACTION_FAILED


def test_not_a_status_response() -> None:
    text = (
        b"<data content='#c'><originator identity='f@example.com' />"
        b"<recipient identity='b@example.com' />"
        b"<data-content Name='c'><other/></data-content></data>"
    )
    data = parse_data(text)
    assert not carries_status_response(data)
    check_report_loop(data)


@pytest.mark.parametrize(
    ("build", "code"),
    [
        (lambda: StatusResponse(trans_id=1, destinations=()), 501),
        (lambda: StatusResponse(trans_id=0, destinations=()), 501),
        (
            lambda: StatusResponse(
                trans_id=1,
                destinations=(Destination(identity=BARNEY, reply=Reply(code=250, trans_id=None)),)
                * 1001,
            ),
            554,
        ),
    ],
)
def test_status_response_constructor_checks(build: object, code: int) -> None:
    assert callable(build)
    with pytest.raises(ApexError) as info:
        build()
    assert info.value.code == code


def test_status_response_errors_name_the_transaction() -> None:
    with pytest.raises(ApexError) as info:
        parse_status_response(
            b"<statusResponse transID='33'><destination identity='x' /></statusResponse>"
        )
    assert info.value.trans_id == 33
    with pytest.raises(ApexError) as info:
        parse_status_response(
            b"<destination identity='b@example.com'><reply code='250'/></destination>"
        )
    assert info.value.code == 501
