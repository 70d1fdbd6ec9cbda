"""The report service elements (RFC 3340 sections 5.1, 6.2 and 9.2)."""

from __future__ import annotations

import pytest

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Data, Originator, Recipient, Reply, parse_apex, parse_data
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.hops import plan_data
from apexmesh.apex.options import Option, OptionRegistry, TargetHop
from apexmesh.apex.report import (
    Destination,
    PendingReport,
    StatusResponse,
    carries_status_response,
    check_report_loop,
    parse_destination,
    parse_status_response,
    pending_reports,
    report_data,
    status_response,
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


# --------------------------------------------------------------------------- bookkeeping

STATUS_REQUEST_DATA = (
    b"<data content='cid:1@example.com'>\n"
    b"    <originator identity='fred@example.com' />\n"
    b"    <recipient identity='barney@rubble.com' />\n"
    b"    <option internal='statusRequest' targetHop='final'\n"
    b"            mustUnderstand='true' transID='86' />\n"
    b"</data>"
)
RUBBLE = Endpoint.parse("barney@rubble.com")


def test_rfc_flow_relay_2_owes_the_report_relay_1_does_not() -> None:
    data = parse_data(STATUS_REQUEST_DATA)
    at_relay_1 = plan_data(data, OptionRegistry(), is_final=lambda endpoint: False)
    assert pending_reports(data, at_relay_1) == ()
    at_relay_2 = plan_data(data, OptionRegistry(), is_final=lambda endpoint: True)
    (pending,) = pending_reports(data, at_relay_2)
    assert pending == PendingReport(trans_id=86, originator=FRED, recipients=(RUBBLE,))
    response = status_response(pending, [(RUBBLE, Reply(code=250, trans_id=None))])
    report = report_data(
        relay_domain="rubble.com", originator=pending.originator, response=response
    )
    expected = parse_data(RUBBLE_REPORT)
    assert report.originator == expected.originator
    assert report.recipients == expected.recipients
    assert report.data_content is not None
    assert expected.data_content is not None
    assert parse_status_response(report.data_content.content) == parse_status_response(
        expected.data_content.content
    )


def test_pending_reports_group_by_trans_id_and_deduplicate() -> None:
    per_data = Option(internal="statusRequest", trans_id=5, target_hop=TargetHop.ALL)
    per_recipient = Option(internal="statusRequest", trans_id=6, target_hop=TargetHop.THIS)
    data = Data(
        content="cid:x",
        originator=Originator(identity=FRED),
        recipients=(
            Recipient(identity=BARNEY, options=(per_recipient,)),
            Recipient(identity=RUBBLE, options=(per_data,)),
        ),
        options=(per_data,),
    )
    plan = plan_data(data, OptionRegistry(), is_final=lambda endpoint: False)
    assert pending_reports(data, plan) == (
        PendingReport(trans_id=5, originator=FRED, recipients=(BARNEY, RUBBLE)),
        PendingReport(trans_id=6, originator=FRED, recipients=(BARNEY,)),
    )


def test_no_report_is_owed_for_a_report() -> None:
    response = StatusResponse(
        trans_id=1,
        destinations=(Destination(identity=BARNEY, reply=Reply(code=250, trans_id=None)),),
    )
    report = report_data(relay_domain="example.com", originator=FRED, response=response)
    looped = Data(
        content=report.content,
        originator=report.originator,
        recipients=report.recipients,
        options=(Option(internal="statusRequest", trans_id=2, target_hop=TargetHop.ALL),),
        data_content=report.data_content,
    )
    plan = plan_data(looped, OptionRegistry(), is_final=lambda endpoint: True)
    assert pending_reports(looped, plan) == ()


def test_status_response_needs_every_outcome() -> None:
    pending = PendingReport(trans_id=3, originator=FRED, recipients=(BARNEY, RUBBLE))
    with pytest.raises(ApexError) as info:
        status_response(pending, [(BARNEY, Reply(code=250, trans_id=None))])
    assert info.value.code == ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT
    unknown = Reply(code=550, trans_id=None, text="unknown endpoint identity")
    response = status_response(
        pending,
        [
            (RUBBLE, unknown),
            (BARNEY, Reply(code=250, trans_id=None)),
            (FRED, Reply(code=250, trans_id=None)),
        ],
    )
    assert [d.identity for d in response.destinations] == [BARNEY, RUBBLE]
    assert response.destinations[1].reply == unknown
