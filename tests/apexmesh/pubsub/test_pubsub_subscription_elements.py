"""Bad subscribe, reply and cancel elements get their codes (apexmesh/pubsub/
subscription_elements.py): 500 not well-formed, 501 not what the 8.2 schema or
draft-schwartz's DTD allows, 553 a malformed topic or endpoint; each names the transID
when it could be read."""

from __future__ import annotations

import pytest

from apexmesh.apex import _dtd
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.elements import DeleteTopic, ListTopics
from apexmesh.pubsub.subscription_elements import (
    ContentCancel,
    ContentSubscribe,
    SelectorSpec,
    SubscriptionReply,
    content_cancel_from,
    content_subscribe_from,
    is_content_form,
    parse_content_operation,
    subscription_reply_from,
)

pytestmark = pytest.mark.unit

PS = "xmlns:ps='http://www.firstrain.com/pubsub'"
TOO_BIG = (
    f"<ps:cancel transID='1' {PS}><ps:subscription-id>{2**31}</ps:subscription-id></ps:cancel>"
)


def _subscribe(body: str) -> ContentSubscribe:
    return content_subscribe_from(_dtd.parse_root(body.encode()))


T = "<topic>t</topic>"
S = "<subscriber>a@b.c</subscriber>"
D = "<duration>1</duration>"
TSD = T + S + D


def sub(trans_id: str, children: str, attrs: str = "") -> str:
    head = "" if not trans_id else f" transID='{trans_id}'"
    return f"<subscribe{head}{attrs}>{children}</subscribe>"


@pytest.mark.parametrize(
    ("body", "code", "trans_id"),
    [
        (sub("1", T + S), 501, 1),  # no duration
        (sub("", T), 501, None),  # no transID
        (sub("x", T), 501, None),  # transID not a number
        (sub("2", TSD, " topic='t'"), 501, 2),  # topic twice
        (sub("3", T + "<topic>u</topic>" + S + D), 501, 3),
        (sub("4", T + S + "<duration>soon</duration>"), 501, 4),
        (sub("5", "<topic>T!</topic>" + S + D), 553, 5),
        (sub("6", T + "<subscriber>not an endpoint</subscriber>" + D), 553, 6),
        (sub("7", TSD, " selector='#S'"), 501, 7),  # names no selector
        (sub("8", TSD + "<selector Name='T' class='JMS'>a=1</selector>", " selector='#S'"), 501, 8),
        (sub("9", TSD + "<selector>a=1</selector>"), 501, 9),  # class required
        (sub("10", TSD + "<selector class='JMS'>a<b/></selector>"), 501, 10),
        (
            sub("11", TSD + "<selector class='JMS'>a</selector><select class='JMS'>b</select>"),
            501,
            11,
        ),
        (sub("12", TSD + "<other/>"), 501, 12),
        (sub("13", T + S + "<duration>99999999999</duration>"), 501, 13),
        (sub("14", "<x:topic>t</x:topic>" + S + D, " xmlns:x='urn:x'"), 501, 14),
        (sub("15", TSD + "<selector class=''>a</selector>"), 501, 15),
        (sub("16", "<topic>t<b/></topic>" + S + D), 501, 16),
        ("<subscribe transID='17'><topic>t</topic>", 500, None),
    ],
)
def test_bad_subscribes(body: str, code: int, trans_id: int | None) -> None:
    with pytest.raises(ApexError) as caught:
        _subscribe(body)
    assert (caught.value.code, caught.value.trans_id) == (code, trans_id)


def test_cached_values_and_the_select_spelling() -> None:
    base = sub("1", T + S + "<duration>9</duration>")[: -len("</subscribe>")]
    for value, cached in (
        ("true", True),
        ("yes", True),
        ("1", True),
        ("false", False),
        ("0", False),
        ("", False),
    ):
        assert _subscribe(f"{base}<cached>{value}</cached></subscribe>").cached is cached, value
    assert _subscribe(base + "</subscribe>").cached is False
    op = _subscribe(f"{base}<select class='RFC-2254' dtd='x'>(a=1)</select></subscribe>")
    assert op.selector == SelectorSpec(selector_class="RFC-2254", text="(a=1)")
    negative = _subscribe(base.replace(">9<", ">-5<") + "</subscribe>")
    assert negative.duration == -5  # refused later, with 553 (draft-schwartz 4.5 step 3)


def test_subscribe_written_and_read_back() -> None:
    op = ContentSubscribe(
        topic="music.jazz",
        subscriber=Endpoint.parse("fred@example.com"),
        duration=60,
        trans_id=3,
        cached=True,
        selector=SelectorSpec(selector_class="JMS", text="a < 3 AND b = 'x&y'", name="S"),
    )
    assert content_subscribe_from(_dtd.parse_root(op.to_xml())) == op
    assert is_content_form(_dtd.parse_root(op.to_xml()))
    plain = b"<subscribe subscriber='a@b.c' topic='t' transID='1' duration='5' />"
    assert not is_content_form(_dtd.parse_root(plain))


@pytest.mark.parametrize(
    "op",
    [
        ContentCancel(trans_id=1, topic="t", subscription_id=5),
        ContentCancel(trans_id=2, topic="t"),
        ContentCancel(trans_id=3, subscription_id=0),
        ContentCancel(trans_id=4),
        ContentCancel(trans_id=5, subscriber=Endpoint.parse("a@b.c")),
    ],
)
def test_the_four_cancel_forms_round_trip(op: ContentCancel) -> None:
    assert content_cancel_from(_dtd.parse_root(op.to_xml())) == op


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (f"<ps:cancel {PS}><ps:topic>t</ps:topic></ps:cancel>", 501),
        (
            f"<ps:cancel transID='1' {PS}><ps:subscription-id>x</ps:subscription-id></ps:cancel>",
            501,
        ),
        (
            f"<ps:cancel transID='1' {PS}><ps:subscription-id>-1</ps:subscription-id></ps:cancel>",
            501,
        ),
        (TOO_BIG, 501),
        (f"<ps:cancel transID='1' {PS}><ps:topic>Bad Topic</ps:topic></ps:cancel>", 553),
        (f"<ps:cancel transID='1' subscriber='nope' {PS}/>", 553),
        (f"<ps:cancel transID='1' {PS}><ps:duration>1</ps:duration></ps:cancel>", 501),
    ],
)
def test_bad_cancels(body: str, code: int) -> None:
    with pytest.raises(ApexError) as caught:
        content_cancel_from(_dtd.parse_root(body.encode()))
    assert caught.value.code == code


def test_replies_with_and_without_an_id() -> None:
    plain = SubscriptionReply(code=567, trans_id=4, text="incorrect")
    assert subscription_reply_from(_dtd.parse_root(plain.to_xml())) == plain
    with pytest.raises(ApexError):
        subscription_reply_from(_dtd.parse_root(b"<reply code='250' transID='1'><x/></reply>"))
    with pytest.raises(ApexError):
        SubscriptionReply(code=250, trans_id=1, subscription_id=-1)


def test_operations_of_a_content_based_service() -> None:
    old = b"<subscribe subscriber='a@b.c' topic='t' transID='1' duration='5' />"
    assert isinstance(parse_content_operation(old), ContentSubscribe)
    assert isinstance(
        parse_content_operation(f"<ps:cancel transID='2' {PS}/>".encode()), ContentCancel
    )
    assert isinstance(parse_content_operation(b"<listtopics />"), ListTopics)
    assert isinstance(
        parse_content_operation(b"<deletetopic topic='t' transID='3' />"), DeleteTopic
    )
    with pytest.raises(ApexError) as caught:
        parse_content_operation(b"<publish transID='4' />")
    assert caught.value.code == 501
