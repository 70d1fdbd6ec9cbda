"""RFC 3342 section 2 (dataTiming) as pure functions with a controlled clock (ms)."""

from __future__ import annotations

import re

import pytest

from apexmesh.apex.data import Data, Originator, Recipient
from apexmesh.apex.elements import parse_message
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.hops import RecipientPlan, plan_data
from apexmesh.apex.options import STATUS_REQUEST, Option, OptionRegistry, TargetHop
from apexmesh.apex.party import PARTY_OPTIONS
from apexmesh.apex.report import report_data
from apexmesh.apex.timing import (
    DATA_TIMING,
    MAX_MILLISECS,
    DataTiming,
    RecipientTiming,
    ReportKind,
    TimerKind,
    arrive,
    data_timing_of,
    data_timing_option,
    delivered,
    dropped,
    forward,
    mark_report_after_fired,
    parse_data_timing,
    state_of,
    tick,
    timing_report_data,
)

pytestmark = pytest.mark.unit

REGISTRY = OptionRegistry(
    internal=frozenset({STATUS_REQUEST, DATA_TIMING, "hold4Endpoint", *PARTY_OPTIONS})
)
FRED = Endpoint.parse("fred@example.com")
BARNEY = Endpoint.parse("barney@example.com")
T0 = 1_700_000_000_000  # an arbitrary "now" in ms

#: RFC 3342 section 2.1.1, the data application #1 submits.
FINAL_HOP_SUBMIT = """<data content='cid:1@example.com'>
    <originator identity='fred@example.com' />
    <recipient identity='barney@example.com' />
    <option internal='dataTiming' targetHop='all'
            mustUnderstand='true' transID='86'>
        <dataTiming noLaterThan='10000' returnTrip='20000' />
    </option>
</data>"""

#: RFC 3342 section 2.1.1, the final hop report.
FINAL_HOP_REPORT = """<data content='#Content'>
    <originator identity='apex=report@example.com' />
    <recipient identity='fred@example.com' />
    <option internal='dataTiming' targetHop='all'
            mustUnderstand='true' transID='99'>
        <dataTiming noLaterThan='20000' />
    </option>
    <data-content Name='Content'>
        <statusResponse transID='86'>
            <destination identity='barney@example.com'>
                <reply code='250' />
            </destination>
        </statusResponse>
    </data-content>
</data>"""

#: RFC 3342 section 2.1.2.
ERROR_SUBMIT = """<data content='cid:1@example.com'>
    <originator identity='fred@example.com' />
    <recipient identity='barney@example.com' />
    <option internal='dataTiming' targetHop='all'
            mustUnderstand='true' transID='86'>
        <dataTiming noLaterThan='6000' reportErrors='true' />
    </option>
</data>"""

ERROR_REPORT = """<data content='#Content'>
    <originator identity='apex=report@example.com' />
    <recipient identity='fred@example.com' />
    <data-content Name='Content'>
        <statusResponse transID='86'>
            <destination identity='barney@example.com'>
                <reply code='550' />
            </destination>
        </statusResponse>
    </data-content>
</data>"""

#: RFC 3342 section 2.2.1.
TRANSIENT_SUBMIT = """<data content='cid:1@example.com'>
    <originator identity='fred@example.com' />
    <recipient identity='barney@example.com' />
    <option internal='dataTiming' targetHop='all'
            mustUnderstand='true' transID='86'>
        <dataTiming reportAfter='60000' />
    </option>
</data>"""

TRANSIENT_REPORT = ERROR_REPORT.replace("code='550'", "code='350'")


def compact(text: str) -> str:
    """The RFC's examples without the indentation between elements."""
    return re.sub(r">\s+<", "><", text)


def parse(text: str) -> Data:
    data = parse_message(compact(text))
    assert isinstance(data, Data)
    return data


def plan_of(data: Data, *, final: bool) -> RecipientPlan:
    [plan] = plan_data(data, REGISTRY, is_final=lambda _e: final).recipients
    return plan


def state(data: Data, *, final: bool, received_at: int = T0) -> RecipientTiming:
    return state_of(
        plan_of(data, final=final), originator=data.originator.identity, received_at=received_at
    )


def timing_in(data: Data) -> DataTiming:
    [option] = [o for o in data.options if o.internal == DATA_TIMING]
    return data_timing_of(option)


# --------------------------------------------------------------------------- the model


def test_parse_defaults_and_round_trip() -> None:
    assert parse_data_timing("<dataTiming/>") == DataTiming()
    full = DataTiming(no_later_than=1, return_trip=2, report_after=3, report_errors=True)
    assert parse_data_timing(full.to_xml()) == full
    assert DataTiming().to_xml() == b"<dataTiming />"
    assert data_timing_of(Option(internal=DATA_TIMING, trans_id=1)) == DataTiming()
    option = data_timing_option(7, DataTiming(no_later_than=MAX_MILLISECS))
    assert option.target_hop is TargetHop.ALL
    assert option.must_understand
    assert data_timing_of(option).no_later_than == MAX_MILLISECS


@pytest.mark.parametrize(
    "content",
    [
        "<dataTiming noLaterThan='-1' />",
        "<dataTiming noLaterThan='2147483648' />",
        "<dataTiming noLaterThan='1e3' />",
        "<dataTiming reportAfter='' />",
        "<dataTiming returnTrip='\u0661' />",
        "<dataTiming reportErrors='yes' />",
        "<dataTiming deliverBy='5' />",
        "<dataTiming>5</dataTiming>",
        "<dataHopping />",
    ],
)
def test_invalid_content_is_501_with_the_options_trans_id(content: str) -> None:
    option = Option(internal=DATA_TIMING, trans_id=42, content=content.encode())
    with pytest.raises(ApexError) as caught:
        data_timing_of(option)
    assert caught.value.code == 501
    assert caught.value.trans_id == 42


def test_deadline_is_received_at_plus_no_later_than() -> None:
    timing = state(parse(ERROR_SUBMIT), final=False)
    assert timing.deadline == T0 + 6000
    assert timing.remaining(T0 + 1000) == 5000
    assert timing.timers()[0].kind is TimerKind.DEADLINE
    assert timing.timers()[0].at == T0 + 6000


# --------------------------------------------------------------------------- step 5.2


def test_forward_lowers_no_later_than_by_the_time_spent_here() -> None:
    data = parse(FINAL_HOP_SUBMIT)
    plan = plan_of(data, final=False)
    step = arrive(plan, data, received_at=T0, now=T0 + 100)
    assert not step.expired
    assert [t.at for t in step.timers] == [T0 + 10_000]
    assert plan.forward is not None
    hop = forward(step.state, plan.forward, T0 + 1500)
    assert hop.data is not None
    # noLaterThan adjusted; returnTrip and the option's attributes unchanged.
    assert timing_in(hop.data) == DataTiming(no_later_than=8500, return_trip=20_000)
    [option] = hop.data.options
    assert (option.trans_id, option.target_hop, option.must_understand) == (86, TargetHop.ALL, True)
    assert hop.step.reports == ()


def test_chain_of_relays_each_subtracts_its_own_time() -> None:
    data: Data | None = parse(ERROR_SUBMIT)
    now = T0
    relays = 0
    while data is not None:
        plan = plan_of(data, final=False)
        timing = state(data, final=False, received_at=now)
        assert plan.forward is not None
        now += 2500  # each relay needs 2.5 s to get ready to send
        hop = forward(timing, plan.forward, now)
        data = hop.data
        relays += 1
        if data is None:
            # 6000 - 2500 - 2500 = 1000 left at the third relay, which needs 2500.
            assert relays == 3
            [report] = hop.step.reports
            assert report.kind is ReportKind.TIMING_ERROR
            assert report.code == 550
            assert (report.trans_id, report.originator, report.recipient) == (86, FRED, BARNEY)


def test_deadline_reached_in_transit_reports_550_and_stops() -> None:
    data = parse(ERROR_SUBMIT)
    plan = plan_of(data, final=False)
    step = arrive(plan, data, received_at=T0, now=T0)
    [timer] = step.timers
    assert timer.at == T0 + 6000
    # The timer fires while the next relay is still being connected to.
    fired = tick(step.state, timer.at)
    assert fired.expired
    assert not fired.predicted
    assert fired.timers == ()
    assert [r.code for r in fired.reports] == [550]
    assert plan.forward is not None
    assert forward(step.state, plan.forward, T0 + 6000).data is None
    # One millisecond earlier: still sent, with 1 ms left.
    hop = forward(step.state, plan.forward, T0 + 5999)
    assert hop.data is not None
    assert timing_in(hop.data).no_later_than == 1


def test_deadline_passed_while_queued_before_handling() -> None:
    data = parse(ERROR_SUBMIT)
    step = arrive(plan_of(data, final=False), data, received_at=T0, now=T0 + 7000)
    assert step.expired
    assert [r.code for r in step.reports] == [550]


def test_no_report_without_report_errors() -> None:
    data = parse(FINAL_HOP_SUBMIT)
    step = arrive(plan_of(data, final=False), data, received_at=T0, now=T0 + 10_000)
    assert step.expired
    assert step.reports == ()


def test_predictive_early_error() -> None:
    data = parse(ERROR_SUBMIT)
    plan = plan_of(data, final=False)
    assert plan.forward is not None
    # The relay knows the next hop takes at least 7 s: the 6 s bound cannot be met.
    step = arrive(plan, data, received_at=T0, now=T0, min_transit_ms=7000)
    assert step.expired
    assert step.predicted
    assert [r.code for r in step.reports] == [550]
    hop = forward(state(data, final=False), plan.forward, T0 + 1000, min_transit_ms=5000)
    assert hop.data is None
    assert hop.step.predicted
    # 1 s spent, 5 s left, 4.9 s needed: sent.
    ok = forward(state(data, final=False), plan.forward, T0 + 1000, min_transit_ms=4900)
    assert ok.data is not None
    assert timing_in(ok.data).no_later_than == 5000


# --------------------------------------------------------------------------- reportAfter


def test_report_after_fires_once_and_travels_as_zero() -> None:
    data = parse(TRANSIENT_SUBMIT)
    plan = plan_of(data, final=False)
    assert plan.forward is not None
    step = arrive(plan, data, received_at=T0, now=T0)
    [timer] = step.timers
    assert (timer.kind, timer.at) == (TimerKind.REPORT_AFTER, T0 + 60_000)
    assert tick(step.state, T0 + 59_999).reports == ()
    fired = tick(step.state, T0 + 60_000)
    assert [r.kind for r in fired.reports] == [ReportKind.TRANSIENT]
    assert fired.reports[0].code == 350
    assert not fired.expired
    assert fired.timers == ()
    # Fired once: later ticks and the forward step report nothing more.
    assert tick(fired.state, T0 + 90_000).reports == ()
    hop = forward(fired.state, plan.forward, T0 + 61_000)
    assert hop.data is not None
    assert hop.step.reports == ()
    assert timing_in(hop.data) == DataTiming()  # reportAfter set to zero
    # And the next relay, receiving 0, never reports.
    nxt = arrive(plan_of(hop.data, final=True), hop.data, received_at=T0 + 62_000, now=T0 + 62_000)
    assert nxt.timers == ()
    assert tick(nxt.state, T0 + 10**9).reports == ()


def test_report_after_reached_at_forward_time_reports_and_still_sends() -> None:
    data = parse(TRANSIENT_SUBMIT)
    plan = plan_of(data, final=False)
    assert plan.forward is not None
    hop = forward(state(data, final=False), plan.forward, T0 + 70_000)
    assert hop.data is not None
    assert [r.code for r in hop.step.reports] == [350]
    assert timing_in(hop.data).report_after == 0
    # Not yet reached: adjusted like noLaterThan.
    early = forward(state(data, final=False), plan.forward, T0 + 15_000)
    assert early.data is not None
    assert timing_in(early.data).report_after == 45_000
    assert early.step.reports == ()


def test_report_after_bounded_by_no_later_than() -> None:
    timing = DataTiming(no_later_than=5000, report_after=5000, report_errors=True)
    data = Data(
        content="cid:1@example.com",
        originator=Originator(identity=FRED),
        recipients=(Recipient(identity=BARNEY),),
        options=(data_timing_option(3, timing),),
    )
    step = arrive(plan_of(data, final=True), data, received_at=T0, now=T0)
    assert [t.kind for t in step.timers] == [TimerKind.DEADLINE]
    fired = tick(step.state, T0 + 5000)
    assert fired.expired
    assert [r.code for r in fired.reports] == [550]  # no 350 for data being dropped


# --------------------------------------------------------------------------- step 5.3


def test_final_hop_report_carries_return_trip_as_no_later_than() -> None:
    data = parse(FINAL_HOP_SUBMIT)
    plan = plan_of(data, final=True)
    step = arrive(plan, data, received_at=T0, now=T0)
    assert plan.forward is not None
    hop = forward(step.state, plan.forward, T0 + 200)  # handed to application #2
    assert hop.data is not None
    assert timing_in(hop.data).no_later_than == 9800
    [report] = delivered(hop.step.state, T0 + 900)  # its ok
    assert report.kind is ReportKind.FINAL_HOP
    assert report.timing == DataTiming(no_later_than=20_000)
    built = timing_report_data(report, relay_domain="example.com", trans_id=99)
    assert built == parse(FINAL_HOP_REPORT)
    assert parse_message(built.to_xml()) == built


def test_final_hop_ok_too_late_is_a_timing_error() -> None:
    data = parse(FINAL_HOP_SUBMIT.replace("returnTrip", "reportErrors='true' returnTrip"))
    timing = state(data, final=True)
    # No ok within noLaterThan: the deadline timer decides 550; a late ok changes nothing.
    fired = tick(timing, T0 + 10_000)
    assert fired.expired
    assert [r.code for r in fired.reports] == [550]
    assert delivered(fired.state, T0 + 10_500) == ()


def test_no_final_hop_report_without_return_trip() -> None:
    timing = state(parse(ERROR_SUBMIT), final=True)
    assert delivered(timing, T0 + 10) == ()


def test_report_after_while_waiting_for_the_recipients_ok() -> None:
    data = parse(TRANSIENT_SUBMIT.replace("reportAfter='60000'", "reportAfter='50'"))
    timing = state(data, final=True)
    fired = tick(timing, T0 + 50)
    assert [r.code for r in fired.reports] == [350]
    assert delivered(fired.state, T0 + 80) == ()


def test_rfc_timing_error_report() -> None:
    data = parse(ERROR_SUBMIT)
    fired = tick(state(data, final=True), T0 + 6000)
    [report] = fired.reports
    assert timing_report_data(report, relay_domain="example.com", trans_id=1) == parse(ERROR_REPORT)


def test_rfc_transient_timing_report() -> None:
    data = parse(TRANSIENT_SUBMIT)
    [report] = tick(state(data, final=False), T0 + 60_000).reports
    built = timing_report_data(report, relay_domain="example.com", trans_id=1)
    assert built == parse(TRANSIENT_REPORT)
    # The same as the core report service builds, plus nothing.
    assert built == report_data(
        relay_domain="example.com", originator=FRED, response=report.status_response()
    )


def test_rfc_hold4endpoint_example_adjusts_60000_to_18000() -> None:
    """Section 3: held 42 s, the data reaches application #2 with noLaterThan 18000."""
    submitted = """<data content='cid:1@example.com'>
        <originator identity='fred@example.com' />
        <recipient identity='barney@example.com' />
        <option internal='hold4Endpoint' transID='1' />
        <option internal='dataTiming' targetHop='all'
                mustUnderstand='true' transID='86'>
            <dataTiming noLaterThan='60000' />
        </option>
    </data>"""
    data = parse(submitted)
    plan = plan_of(data, final=True)
    assert plan.forward is not None
    hop = forward(state(data, final=True), plan.forward, T0 + 42_000)
    assert hop.data is not None
    assert hop.data == parse(submitted.replace("60000", "18000"))


def test_return_trip_honoured_by_the_report_itself() -> None:
    """The final hop report's own dataTiming bounds its delivery to the originator."""
    data = parse(FINAL_HOP_SUBMIT)
    [report] = delivered(state(data, final=True), T0 + 1)
    back = timing_report_data(report, relay_domain="example.com", trans_id=99)
    timing = state(back, final=False, received_at=T0 + 2)
    assert timing.deadline == T0 + 2 + 20_000
    assert timing.is_report is False  # state_of is told; arrive() finds out by itself
    plan = plan_of(back, final=False)
    step = arrive(plan, back, received_at=T0 + 2, now=T0 + 2)
    assert step.state.is_report
    expired = tick(step.state, T0 + 20_002)
    assert expired.expired
    assert expired.reports == ()  # no reportErrors, and a report is never reported on
    assert delivered(step.state, T0 + 100) == ()


def test_data_carrying_a_status_response_is_never_reported_on() -> None:
    back = parse(ERROR_REPORT)
    sneaky = Data(
        content=back.content,
        originator=back.originator,
        recipients=back.recipients,
        options=(
            data_timing_option(
                5, DataTiming(no_later_than=10, return_trip=10, report_after=5, report_errors=True)
            ),
        ),
        data_content=back.data_content,
    )
    step = arrive(plan_of(sneaky, final=True), sneaky, received_at=T0, now=T0)
    assert tick(step.state, T0 + 5).reports == ()
    late = tick(step.state, T0 + 10)
    assert late.expired
    assert late.reports == ()
    assert delivered(step.state, T0 + 1) == ()


def test_per_recipient_and_per_data_options_both_count() -> None:
    per_data = data_timing_option(1, DataTiming(no_later_than=9000, report_errors=True))
    per_recipient = data_timing_option(2, DataTiming(no_later_than=4000, report_errors=True))
    data = Data(
        content="cid:1@example.com",
        originator=Originator(identity=FRED),
        recipients=(Recipient(identity=BARNEY, options=(per_recipient,)),),
        options=(per_data,),
    )
    timing = state(data, final=False)
    assert timing.deadline == T0 + 4000
    fired = tick(timing, T0 + 4000)
    assert fired.expired
    assert [r.trans_id for r in fired.reports] == [2]
    plan = plan_of(data, final=False)
    assert plan.forward is not None
    hop = forward(timing, plan.forward, T0 + 1000)
    assert hop.data is not None
    assert data_timing_of(hop.data.options[0]).no_later_than == 8000
    assert data_timing_of(hop.data.recipients[0].options[0]).no_later_than == 3000


def test_zero_option_is_inactive() -> None:
    data = Data(
        content="cid:1@example.com",
        originator=Originator(identity=FRED),
        recipients=(Recipient(identity=BARNEY),),
        options=(data_timing_option(1, DataTiming(report_errors=True)),),
    )
    plan = plan_of(data, final=False)
    step = arrive(plan, data, received_at=T0, now=T0 + 10**9)
    assert not step.expired
    assert step.timers == ()
    assert plan.forward is not None
    assert forward(step.state, plan.forward, T0 + 10**9).data == plan.forward


def test_dropped_by_the_operator_before_the_deadline() -> None:
    timing = state(parse(ERROR_SUBMIT), final=True)
    [report] = dropped(timing)
    assert (report.code, report.trans_id, report.recipient) == (550, 86, BARNEY)
    assert dropped(state(parse(FINAL_HOP_SUBMIT), final=True)) == ()  # no reportErrors


def test_report_after_fired_on_another_pod_travels_as_zero() -> None:
    """Held data whose 350 was taken from the store by any pod: no second 350."""
    data = parse(TRANSIENT_SUBMIT)
    plan = plan_of(data, final=True)
    assert plan.forward is not None
    timing = mark_report_after_fired(state(data, final=True))
    assert timing.timers() == ()
    hop = forward(timing, plan.forward, T0 + 70_000)
    assert hop.step.reports == ()
    assert hop.data is not None
    assert timing_in(hop.data) == DataTiming()
