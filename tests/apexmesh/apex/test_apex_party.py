"""RFC 3342 sections 1 and 4 as pure functions: attachOverride and dataHopping."""

from __future__ import annotations

import pytest

from apexmesh.apex.data import Data, Originator, Recipient
from apexmesh.apex.elements import parse_message
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.hops import plan_data
from apexmesh.apex.options import STATUS_REQUEST, Option, OptionRegistry, TargetHop
from apexmesh.apex.party import (
    ATTACH_OVERRIDE,
    DATA_HOPPING,
    PARTY_OPTIONS,
    DataHopping,
    HopStep,
    data_hopping_of,
    data_hopping_option,
    next_relay,
    overrides,
)

pytestmark = pytest.mark.unit

REGISTRY = OptionRegistry(internal=frozenset({STATUS_REQUEST, *PARTY_OPTIONS}))

#: RFC 3342 section 4, the data relay #1 receives.
EXAMPLE = """<data content='cid:1@example.com'>
    <originator identity='appl=pubsub/topic=fred@example.com' />
    <recipient identity='barney@example.com' />
    <option internal='dataHopping' targetHop='all'
            mustUnderstand='true' transID='86'>
        <dataHopping noMoreThan='2' reportErrors='true' />
    </option>
</data>"""


def parse_data_(text: str) -> Data:
    data = parse_message(text)
    assert isinstance(data, Data)
    return data


def not_final(_endpoint: Endpoint) -> bool:
    return False


def hop(data: Data) -> HopStep:
    [plan] = plan_data(data, REGISTRY, is_final=not_final).recipients
    return next_relay(plan)


def test_attach_override_is_recognized() -> None:
    option = Option(internal=ATTACH_OVERRIDE, trans_id=3)
    assert overrides([option])
    assert not overrides([Option(internal=STATUS_REQUEST, trans_id=3)])
    assert not overrides([])


def test_rfc_example_relay_1_sends_one_hop_less() -> None:
    step = hop(parse_data_(EXAMPLE))
    assert step.stopped is None
    assert step.forward is not None
    [option] = step.forward.options
    assert option.trans_id == 86
    assert option.target_hop is TargetHop.ALL
    assert option.must_understand
    assert data_hopping_of(option) == DataHopping(no_more_than=1, report_errors=True)


def test_rfc_example_relay_2_stops_and_reports() -> None:
    first = hop(parse_data_(EXAMPLE))
    assert first.forward is not None
    second = hop(first.forward)
    assert second.forward is None
    assert second.stopped is not None
    assert second.stopped.trans_id == 86
    assert second.report


def test_zero_is_inactive_and_report_errors_defaults_false() -> None:
    data = Data(
        content="cid:1@example.com",
        originator=Originator(identity=Endpoint.parse("fred@example.com")),
        recipients=(Recipient(identity=Endpoint.parse("barney@rubble.com")),),
        options=(data_hopping_option(5, 0),),
    )
    step = hop(data)
    assert step.forward == plan_data(data, REGISTRY, is_final=not_final).recipients[0].forward
    option = Option(
        internal=DATA_HOPPING, trans_id=4, target_hop=TargetHop.ALL, content=b"<dataHopping/>"
    )
    assert data_hopping_of(option) == DataHopping()
    assert data_hopping_of(Option(internal=DATA_HOPPING, trans_id=4)) == DataHopping()


def test_per_recipient_option_without_report() -> None:
    option = data_hopping_option(7, 1, report_errors=False)
    data = Data(
        content="cid:1@example.com",
        originator=Originator(identity=Endpoint.parse("fred@example.com")),
        recipients=(Recipient(identity=Endpoint.parse("barney@rubble.com"), options=(option,)),),
    )
    step = hop(data)
    assert step.forward is None
    assert step.stopped == option
    assert not step.report


def test_round_trip_and_decrement_chain() -> None:
    data = parse_data_(EXAMPLE.replace("noMoreThan='2'", "noMoreThan='255'"))
    hops = 0
    current: Data | None = data
    while current is not None:
        step = hop(current)
        current = step.forward
        hops += 1
    assert hops == 255


@pytest.mark.parametrize(
    "content",
    [
        b"<dataHopping noMoreThan='256' />",
        b"<dataHopping noMoreThan='-1' />",
        b"<dataHopping noMoreThan='two' />",
        b"<dataHopping reportErrors='yes' />",
        b"<dataHopping hops='2' />",
        b"<dataTiming noLaterThan='2' />",
        b"<dataHopping><x/></dataHopping>",
    ],
)
def test_invalid_content_is_501_with_the_option_trans_id(content: bytes) -> None:
    option = Option(internal=DATA_HOPPING, trans_id=9, target_hop=TargetHop.ALL, content=content)
    with pytest.raises(ApexError) as caught:
        data_hopping_of(option)
    assert int(caught.value.code) == 501
    assert caught.value.trans_id == 9


def test_data_hopping_option_is_as_the_rfc_asks() -> None:
    option = data_hopping_option(86, 2)
    assert option.target_hop is TargetHop.ALL
    assert option.must_understand
    assert data_hopping_of(option) == DataHopping(no_more_than=2, report_errors=True)
