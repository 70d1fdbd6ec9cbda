"""APEX options (RFC 3340 section 5): the targetHop / mustUnderstand table, attach
options, and the per-recipient plan of a relay (section 4.4.4.1)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Data, Originator, Recipient, parse_data
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.hops import PlacedOption, Placement, combine, plan_data
from apexmesh.apex.options import (
    STATUS_REQUEST,
    Option,
    OptionRegistry,
    TargetHop,
    applies,
    parse_option,
    retained,
    select_local_options,
    select_options,
)

pytestmark = pytest.mark.unit

REGISTRY = OptionRegistry()
FRED = Endpoint.parse("fred@example.com")
BARNEY = Endpoint.parse("barney@example.com")
BARNEY_RUBBLE = Endpoint.parse("barney@rubble.com")


def option(hop: TargetHop, *, known: bool = True, must: bool = False, trans_id: int = 1) -> Option:
    name = STATUS_REQUEST if known else "x-unknown"
    return Option(internal=name, target_hop=hop, must_understand=must, trans_id=trans_id)


# (targetHop, final hop?) -> (applies here, retained when transmitting)
HOP_TABLE = [
    (TargetHop.THIS, False, True, False),
    (TargetHop.THIS, True, True, True),
    (TargetHop.FINAL, False, False, True),
    (TargetHop.FINAL, True, True, True),
    (TargetHop.ALL, False, True, True),
    (TargetHop.ALL, True, True, True),
]


@pytest.mark.parametrize(("hop", "final", "applies_here", "kept"), HOP_TABLE)
def test_target_hop_table(hop: TargetHop, final: bool, applies_here: bool, kept: bool) -> None:
    opt = option(hop)
    assert applies(opt, final=final) is applies_here
    assert retained(opt, final=final) is kept


# (targetHop, final, understood, mustUnderstand) -> "process" | "ignore" | "skip" | 504
SELECT_TABLE = [
    (hop, final, known, must, outcome)
    for hop, final, applies_here, _ in HOP_TABLE
    for known in (True, False)
    for must in (True, False)
    for outcome in [
        ("skip" if not applies_here else "process" if known else 504 if must else "ignore")
    ]
]


@pytest.mark.parametrize(("hop", "final", "known", "must", "outcome"), SELECT_TABLE)
def test_must_understand_table(
    hop: TargetHop, final: bool, known: bool, must: bool, outcome: str | int
) -> None:
    opt = option(hop, known=known, must=must, trans_id=77)
    if outcome == 504:
        with pytest.raises(ApexError) as info:
            select_options([opt], REGISTRY, final=final)
        assert info.value.code == ApexReplyCode.PARAMETER_NOT_IMPLEMENTED
        assert info.value.trans_id == 77
        return
    selection = select_options([opt], REGISTRY, final=final)
    assert selection.process == ((opt,) if outcome == "process" else ())
    assert selection.ignored == ((opt,) if outcome == "ignore" else ())
    assert selection.forward == ((opt,) if retained(opt, final=final) else ())


def test_selection_keeps_document_order() -> None:
    options = [option(TargetHop.ALL, trans_id=1), option(TargetHop.THIS, trans_id=2)]
    options.append(option(TargetHop.FINAL, trans_id=3))
    selection = select_options(options, REGISTRY, final=False)
    assert [o.trans_id for o in selection.process] == [1, 2]
    assert [o.trans_id for o in selection.forward] == [1, 3]


@pytest.mark.parametrize("hop", list(TargetHop))
def test_attach_options_ignore_target_hop(hop: TargetHop) -> None:
    known = option(hop)
    unknown = option(hop, known=False)
    selection = select_local_options([known, unknown], REGISTRY)
    assert selection.process == (known,)
    assert selection.ignored == (unknown,)
    assert selection.forward == ()
    with pytest.raises(ApexError) as info:
        select_local_options([option(hop, known=False, must=True)], REGISTRY)
    assert info.value.code == 504


def test_registry_external_names() -> None:
    registry = OptionRegistry(internal=frozenset(), external=frozenset({"http://example.com/o"}))
    assert registry.understands(Option(external="http://example.com/o", trans_id=1))
    assert not registry.understands(Option(external="http://example.com/p", trans_id=1))
    assert not registry.understands(Option(internal=STATUS_REQUEST, trans_id=1))


def test_parse_option_defaults_follow_the_dtd() -> None:
    assert parse_option(b"<option internal='statusRequest' transID='5' />") == Option(
        internal=STATUS_REQUEST,
        trans_id=5,
        target_hop=TargetHop.FINAL,
        must_understand=False,
        localize=("i-default",),
    )
    # The DTD defaults both names to "": an empty one counts as absent.
    assert parse_option(b"<option internal='' external='urn:x:y' transID='5' />").name == "urn:x:y"


def test_option_content_is_canonical() -> None:
    built = Option(internal="x", trans_id=1, content=b"<a b='1'></a> t")
    assert built.content == b'<a b="1"/> t'
    assert parse_option(built.to_xml()) == built
    with pytest.raises(ApexError) as info:
        Option(internal="x", trans_id=1, content=b"<unclosed>")
    assert info.value.code == 500


# --------------------------------------------------------------------------- data plans

RFC_5_1 = (
    b"<data content='cid:1@example.com'>\n"
    b"    <originator identity='fred@example.com' />\n"
    b"    <recipient identity='barney@rubble.com' />\n"
    b"    <option internal='statusRequest' targetHop='final'\n"
    b"            mustUnderstand='true' transID='86' />\n"
    b"</data>"
)


def test_rfc_example_relay_1_forwards_the_final_option_untouched() -> None:
    data = parse_data(RFC_5_1)
    plan = plan_data(data, REGISTRY, is_final=lambda endpoint: endpoint.domain == "example.com")
    assert plan.data_options == ()
    (only,) = plan.recipients
    assert not only.final
    assert only.process == ()
    assert only.failure is None
    assert only.forward == data


def test_rfc_example_relay_2_processes_the_status_request() -> None:
    data = parse_data(RFC_5_1)
    plan = plan_data(data, REGISTRY, is_final=lambda endpoint: endpoint.domain == "rubble.com")
    assert plan.data_options == data.options
    (only,) = plan.recipients
    assert only.final
    assert only.process == (PlacedOption(placement=Placement.DATA, option=data.options[0]),)
    assert only.forward == data  # a final relay removes nothing


def _data(
    *,
    per_data: tuple[Option, ...] = (),
    per_originator: tuple[Option, ...] = (),
    recipients: tuple[Recipient, ...] = (Recipient(identity=BARNEY),),
) -> Data:
    return Data(
        content="cid:1@example.com",
        originator=Originator(identity=FRED, options=per_originator),
        recipients=recipients,
        options=per_data,
    )


def test_a_recipient_whose_options_all_go_on_is_forwarded_as_received() -> None:
    """A robust delivery's per-recipient option (targetHop final) passes the relays
    before the last one: the recipient element goes on as the same object, whose
    serialization the relay has (a copy would be serialized again per recipient)."""
    final = option(TargetHop.FINAL, trans_id=1)
    this = option(TargetHop.THIS, trans_id=2)
    kept = Recipient(identity=BARNEY_RUBBLE, options=(final,))
    trimmed = Recipient(identity=BARNEY, options=(final, this))
    data = _data(per_data=(option(TargetHop.ALL, trans_id=3),), recipients=(kept, trimmed))
    plan = plan_data(data, REGISTRY, is_final=lambda endpoint: False)
    first, second = plan.recipients
    assert first.forward is not None
    assert second.forward is not None
    assert first.forward.recipients[0] is kept
    assert second.forward.recipients == (Recipient(identity=BARNEY, options=(final,)),)


def test_this_options_are_removed_at_each_placement() -> None:
    this = option(TargetHop.THIS, trans_id=1)
    keep = option(TargetHop.ALL, trans_id=2)
    data = _data(
        per_data=(this, keep),
        per_originator=(this,),
        recipients=(Recipient(identity=BARNEY_RUBBLE, options=(keep, this)),),
    )
    plan = plan_data(data, REGISTRY, is_final=lambda endpoint: False)
    (only,) = plan.recipients
    assert only.forward == _data(
        per_data=(keep,),
        recipients=(Recipient(identity=BARNEY_RUBBLE, options=(keep,)),),
    )
    assert [(p.placement, p.option.trans_id) for p in only.process] == [
        (Placement.DATA, 1),
        (Placement.DATA, 2),
        (Placement.ORIGINATOR, 1),
        (Placement.RECIPIENT, 2),
        (Placement.RECIPIENT, 1),
    ]


def test_unknown_must_understand_per_data_fails_the_whole_data() -> None:
    data = _data(per_data=(option(TargetHop.THIS, known=False, must=True, trans_id=9),))
    with pytest.raises(ApexError) as info:
        plan_data(data, REGISTRY, is_final=lambda endpoint: False)
    assert info.value.code == ApexReplyCode.PARAMETER_NOT_IMPLEMENTED
    assert info.value.trans_id == 9


def test_unknown_final_option_matters_only_when_some_recipient_is_final() -> None:
    data = _data(per_data=(option(TargetHop.FINAL, known=False, must=True),))
    plan = plan_data(data, REGISTRY, is_final=lambda endpoint: False)
    assert plan.recipients[0].forward == data
    with pytest.raises(ApexError):
        plan_data(data, REGISTRY, is_final=lambda endpoint: True)


def test_unknown_must_understand_per_recipient_fails_that_recipient_only() -> None:
    bad = Recipient(identity=BARNEY, options=(option(TargetHop.ALL, known=False, must=True),))
    good = Recipient(identity=BARNEY_RUBBLE)
    plan = plan_data(_data(recipients=(bad, good)), REGISTRY, is_final=lambda endpoint: False)
    failed, fine = plan.recipients
    assert failed.failure is not None
    assert failed.failure.code == 504
    assert failed.forward is None
    assert fine.failure is None
    assert fine.forward == _data(recipients=(good,))


def test_unknown_optional_options_are_ignored_but_forwarded() -> None:
    unknown = option(TargetHop.ALL, known=False)
    plan = plan_data(_data(per_originator=(unknown,)), REGISTRY, is_final=lambda endpoint: False)
    (only,) = plan.recipients
    assert only.ignored == (PlacedOption(placement=Placement.ORIGINATOR, option=unknown),)
    assert only.forward == _data(per_originator=(unknown,))


def test_combine_groups_recipients_with_the_same_options() -> None:
    final = option(TargetHop.FINAL)
    recipients = (Recipient(identity=BARNEY), Recipient(identity=BARNEY_RUBBLE))
    data = _data(per_data=(final,), recipients=recipients)
    plan = plan_data(data, REGISTRY, is_final=lambda endpoint: False)
    assert combine(plan.recipients) == data
    mixed = plan_data(data, REGISTRY, is_final=lambda endpoint: endpoint == BARNEY)
    assert combine(mixed.recipients) == data  # final removes nothing, non-final keeps final
    this = _data(per_data=(option(TargetHop.THIS),), recipients=recipients)
    split = plan_data(this, REGISTRY, is_final=lambda endpoint: endpoint == BARNEY)
    with pytest.raises(ApexError):
        combine(split.recipients)
    with pytest.raises(ApexError):
        combine(())


# --------------------------------------------------------------------------- properties

_options = st.lists(
    st.builds(
        Option,
        internal=st.sampled_from([STATUS_REQUEST, "x-unknown"]),
        trans_id=st.integers(min_value=1, max_value=50),
        target_hop=st.sampled_from(list(TargetHop)),
        must_understand=st.booleans(),
    ),
    max_size=4,
).map(tuple)


@settings(max_examples=300, deadline=None)
@given(
    per_data=_options,
    per_originator=_options,
    per_recipient=st.lists(_options, min_size=1, max_size=3),
    finals=st.lists(st.booleans(), min_size=3, max_size=3),
)
def test_plan_invariants(
    per_data: tuple[Option, ...],
    per_originator: tuple[Option, ...],
    per_recipient: list[tuple[Option, ...]],
    finals: list[bool],
) -> None:
    endpoints = [Endpoint.parse(f"r{index}@example.com") for index in range(len(per_recipient))]
    final_of = dict(zip(endpoints, finals, strict=False))
    data = _data(
        per_data=per_data,
        per_originator=per_originator,
        recipients=tuple(
            Recipient(identity=endpoint, options=options)
            for endpoint, options in zip(endpoints, per_recipient, strict=True)
        ),
    )
    any_final = any(final_of.values())
    if any(
        o.must_understand and not REGISTRY.understands(o) and applies(o, final=any_final)
        for o in per_data
    ):
        with pytest.raises(ApexError) as info:
            plan_data(data, REGISTRY, is_final=final_of.__getitem__)
        assert info.value.code == ApexReplyCode.PARAMETER_NOT_IMPLEMENTED
        return
    plan = plan_data(data, REGISTRY, is_final=final_of.__getitem__)
    for recipient_plan in plan.recipients:
        final = recipient_plan.final
        options = {
            Placement.DATA: per_data,
            Placement.ORIGINATOR: per_originator,
            Placement.RECIPIENT: recipient_plan.recipient.options,
        }
        expected_failure = any(
            o.must_understand and not REGISTRY.understands(o) and applies(o, final=final)
            for o in (*per_originator, *recipient_plan.recipient.options)
        )
        assert (recipient_plan.failure is not None) is expected_failure
        if recipient_plan.failure is not None:
            assert recipient_plan.forward is None
            assert recipient_plan.failure.code == ApexReplyCode.PARAMETER_NOT_IMPLEMENTED
            continue
        forward = recipient_plan.forward
        assert forward is not None
        assert forward.recipients[0].identity == recipient_plan.recipient.identity
        forwarded = {
            Placement.DATA: forward.options,
            Placement.ORIGINATOR: forward.originator.options,
            Placement.RECIPIENT: forward.recipients[0].options,
        }
        for placement, original in options.items():
            if final:
                assert forwarded[placement] == original  # a final relay removes nothing
            else:
                assert forwarded[placement] == tuple(
                    o for o in original if o.target_hop is not TargetHop.THIS
                )
        for placed in recipient_plan.process:
            assert REGISTRY.understands(placed.option)
            assert applies(placed.option, final=final)
        for placed in recipient_plan.ignored:
            assert not placed.option.must_understand
            assert not REGISTRY.understands(placed.option)


@pytest.mark.parametrize(
    "raw",
    [
        b"<option internal='x' transID='1'><dataHopping noMoreThan='3' /></option>",
        (
            b"<option internal='x' transID='1'> t &amp; <a b='1'  c=\"2\">t<![CDATA[<x>]]></a>"
            b"<!-- c --> tail </option>"
        ),
        b"<option internal='x' transID='1'><a xmlns='urn:x'><b/></a>\n</option>",
        b"<option internal='x' transID='1'>&#233;&lt;</option>",
    ],
)
def test_parsed_content_is_already_canonical(raw: bytes) -> None:
    """option_from keeps the parser's serialization without canonicalizing it again: it
    must be what canonicalization would give, so parsed and built options compare equal."""
    parsed = parse_option(raw)
    assert _dtd.canonical_content(parsed.content, "option") == parsed.content
    assert Option(internal="x", trans_id=1, content=parsed.content) == parsed
