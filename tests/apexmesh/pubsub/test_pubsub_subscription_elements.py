"""Bad subscribe, reply and cancel elements get their codes (apexmesh/pubsub/
subscription_elements.py): 500 not well-formed, 501 not what the 8.2 schema or
draft-schwartz's DTD allows, 553 a malformed topic or endpoint; each names the transID
when it could be read."""

from __future__ import annotations

import pytest

from apexmesh.apex import _dtd
from apexmesh.apex.errors import ApexError
from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.subscription_elements import (
    ContentCancel,
    ContentSubscribe,
    SelectorSpec,
    SubscriptionReply,
    content_cancel_from,
    content_subscribe_from,
    is_content_form,
    subscription_reply_from,
)

pytestmark = pytest.mark.unit

PS = "xmlns:ps='http://www.firstrain.com/pubsub'"


def _subscribe(body: str) -> ContentSubscribe:
    return content_subscribe_from(_dtd.parse_root(body.encode()))


@pytest.mark.parametrize(
    ("body", "code", "trans_id"),
    [
        ("<subscribe transID='1'><topic>t</topic><subscriber>a@b.c</subscriber></subscribe>", 501, 1),
        ("<subscribe><topic>t</topic></subscribe>", 501, None),
        ("<subscribe transID='x'><topic>t</topic></subscribe>", 501, None),
        ("<subscribe transID='2' topic='t'><topic>t</topic><subscriber>a@b.c</subscriber><duration>1</duration></subscribe>", 501, 2),
        ("<subscribe transID='3'><topic>t</topic><topic>u</topic><subscriber>a@b.c</subscriber><duration>1</duration></subscribe>", 501, 3),
        ("<subscribe transID='4'><topic>t</topic><subscriber>a@b.c</subscriber><duration>soon</duration></subscribe>", 501, 4),
        ("<subscribe transID='5'><topic>T!</topic><subscriber>a@b.c</subscriber><duration>1</duration></subscribe>", 553, 5),
        ("<subscribe transID='6'><topic>t</topic><subscriber>not an endpoint</subscriber><duration>1</duration></subscribe>", 553, 6),
        ("<subscribe transID='7' selector='#S'><topic>t</topic><subscriber>a@b.c</subscriber><duration>1</duration></subscribe>", 501, 7),
        ("<subscribe transID='8' selector='#S'><topic>t</topic><subscriber>a@b.c</subscriber><duration>1</duration><selector Name='T' class='JMS'>a=1</selector></subscribe>", 501, 8),
        ("<subscribe transID='9'><topic>t</topic><subscriber>a@b.c</subscriber><duration>1</duration><selector>a=1</selector></subscribe>", 501, 9),
        ("<subscribe transID='10'><topic>t</topic><subscriber>a@b.c</subscriber><duration>1</duration><selector class='JMS'>a<b/></selector></subscribe>", 501, 10),
        ("<subscribe transID='11'><topic>t</topic><subscriber>a@b.c</subscriber><duration>1</duration><selector class='JMS'>a</selector><select class='JMS'>b</select></subscribe>", 501, 11),
        ("<subscribe transID='12'><topic>t</topic><subscriber>a@b.c</subscriber><duration>1</duration><other/></subscribe>", 501, 12),
        ("<subscribe transID='13'><topic>t</topic><subscriber>a@b.c</subscriber><duration>99999999999</duration></subscribe>", 501, 13),
        ("<subscribe transID='14' xmlns:x='urn:x'><x:topic>t</x:topic><subscriber>a@b.c</subscriber><duration>1</duration></subscribe>", 501, 14),
        ("<subscribe transID='15'><topic>t</topic><subscriber>a@b.c</subscriber><duration>1</duration><selector class=''>a</selector></subscribe>", 501, 15),
        ("<subscribe transID='16'><topic>t<b/></topic><subscriber>a@b.c</subscriber><duration>1</duration></subscribe>", 501, 16),
        ("<subscribe transID='17'><topic>t</topic>", 500, None),
    ],
)
def test_bad_subscribes(body: str, code: int, trans_id: int | None) -> None:
    with pytest.raises(ApexError) as caught:
        _subscribe(body)
    assert (caught.value.code, caught.value.trans_id) == (code, trans_id)


def test_cached_values_and_the_select_spelling() -> None:
    base = "<subscribe transID='1'><topic>t</topic><subscriber>a@b.c</subscriber><duration>9</duration>"
    for value, cached in (("true", True), ("yes", True), ("1", True), ("false", False), ("0", False), ("", False)):
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
        (f"<ps:cancel transID='1' {PS}><ps:subscription-id>x</ps:subscription-id></ps:cancel>", 501),
        (f"<ps:cancel transID='1' {PS}><ps:subscription-id>-1</ps:subscription-id></ps:cancel>", 501),
        (f"<ps:cancel transID='1' {PS}><ps:subscription-id>2147483648</ps:subscription-id></ps:cancel>", 501),
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
