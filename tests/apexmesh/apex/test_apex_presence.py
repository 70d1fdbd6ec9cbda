"""RFC 3343 elements (section 6 DTD) and the sans-I/O presence core (section 4), in memory:
round trips of the examples' elements, every DTD rule as its reply code, and the core's
steps with time passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apexmesh.apex.elements import Reply, Terminate
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.presence import (
    Notify,
    Presence,
    PresenceTuple,
    Publish,
    Subscribe,
    Watch,
    parse_notify,
    parse_operation,
    parse_presence,
    parse_publish,
    parse_service_message,
    same_instant,
)
from apexmesh.apex.presence_core import (
    FOREVER,
    NEVER,
    PUBLISHER_MISMATCH,
    Outbound,
    PresenceCore,
    attach_destination,
    default_entry,
)

pytestmark = pytest.mark.unit

HEAD = b"<publish publisher='fred@example.com' transID='1' timeStamp='2000-05-14T13:30:00Z'>"

FRED = Endpoint.parse("fred@example.com")
WILMA = Endpoint.parse("wilma@example.com")
BARNEY = Endpoint.parse("barney@example.com")
T0 = datetime(2026, 1, 1, tzinfo=UTC)

PUBLISH_EXAMPLE = b"""<publish publisher='fred@example.com' transID='1'
         timeStamp='2000-05-14T13:30:00-08:00'>
    <presence publisher='fred@example.com'
           lastUpdate='2000-05-14T13:02:00-08:00'
           publisherInfo='http://www.example.com/fred/'>
        <tuple destination='apex:fred/appl=im@example.com'
          availableUntil='2000-05-14T14:02:00-08:00' />
        <tuple destination='mailto:fred@flintstone.com'
          availableUntil='2525-12-31T23:59:59-08:00'>
          <capability baseline='urn:ietf:rfc:rfc2533'>(type=text/plain)</capability>
        </tuple>
    </presence>
</publish>"""


# --------------------------------------------------------------------------- elements


def test_publish_example_round_trips() -> None:
    publish = parse_publish(PUBLISH_EXAMPLE)
    assert publish.trans_id == 1
    assert publish.presence.publisher_info == "http://www.example.com/fred/"
    assert publish.presence.tuples[1].capabilities[0].text == "(type=text/plain)"
    assert parse_publish(publish.to_xml()) == publish


@pytest.mark.parametrize(
    ("xml", "element"),
    [
        (
            b"<subscribe publisher='fred@example.com' duration='86400' transID='100' />",
            Subscribe(publisher=FRED, trans_id=100, duration=86400),
        ),
        (
            b"<watch publisher='fred@example.com' duration='86400' transID='2' />",
            Watch(publisher=FRED, trans_id=2, duration=86400),
        ),
        (b"<terminate transID='100' />", Terminate(trans_id=100)),
    ],
)
def test_rfc_operations_parse(xml: bytes, element: object) -> None:
    assert parse_operation(xml) == element
    assert parse_operation(element.to_xml()) == element  # type: ignore[attr-defined]


def test_notify_example_and_defaults() -> None:
    notify = parse_notify(
        b"<notify subscriber='wilma@example.com' transID='2' duration='86000' action='subscribe' />"
    )
    assert notify == Notify(subscriber=WILMA, trans_id=2, duration=86000)
    assert parse_notify(b"<notify subscriber='wilma@example.com' transID='2' />") == Notify(
        subscriber=WILMA, trans_id=2
    )
    assert parse_service_message(notify.to_xml()) == notify


@pytest.mark.parametrize(
    ("xml", "code"),
    [
        (b"<subscribe publisher='fred@example.com' duration='1'", 500),
        (b"<subscribe publisher='fred@example.com' transID='1' />", 501),
        (b"<subscribe publisher='fred@example.com' duration='-1' transID='1' />", 501),
        (b"<subscribe publisher='fred@example.com' duration='1' transID='0' />", 501),
        (b"<subscribe publisher='fred@example.com' duration='1' transID='1' x='y' />", 501),
        (b"<subscribe publisher='fred' duration='1' transID='1' />", 553),
        (b"<subscribe publisher='fred@example.com' duration='1' transID='1'>x</subscribe>", 501),
        (b"<unknown transID='1' />", 501),
        (b"<publish publisher='fred@example.com' transID='1' timeStamp='now' />", 501),
        (
            (
                HEAD
                + b"<presence publisher='fred@example.com' lastUpdate='2000-05-14T13:30:00Z' />"
                b"</publish>"
            ),
            501,
        ),
        (
            (
                HEAD + b"<presence publisher='fred@example.com' lastUpdate='yesterday'>"
                b"<tuple destination='mailto:f@x.com' availableUntil='2525-12-31T23:59:59Z' />"
                b"</presence></publish>"
            ),
            501,
        ),
        (
            (
                HEAD + b"<presence publisher='fred@example.com' lastUpdate='2000-05-14T13:30:00Z'>"
                b"<tuple destination='relative' availableUntil='2525-12-31T23:59:59Z' />"
                b"</presence></publish>"
            ),
            501,
        ),
        (
            (
                HEAD + b"<presence publisher='fred@example.com' lastUpdate='2000-05-14T13:30:00Z'>"
                b"<tuple destination='mailto:f@x.com' availableUntil='2525-12-31T23:59:59Z'>"
                b"<other /></tuple></presence></publish>"
            ),
            501,
        ),
    ],
)
def test_dtd_violations_carry_their_code(xml: bytes, code: int) -> None:
    with pytest.raises(ApexError) as caught:
        parse_operation(xml)
    assert caught.value.code == code


def test_errors_name_the_trans_id_when_read() -> None:
    with pytest.raises(ApexError) as caught:
        parse_operation(b"<watch publisher='fred' duration='1' transID='42' />")
    assert caught.value.trans_id == 42


def test_entity_expansion_is_refused() -> None:
    bomb = (
        b"<!DOCTYPE s [<!ENTITY a 'aaaaaaaa'><!ENTITY b '&a;&a;&a;&a;'>]>"
        b"<subscribe publisher='&b;@example.com' duration='1' transID='1' />"
    )
    with pytest.raises(ApexError):
        parse_operation(bomb)


def test_same_instant_compares_instants() -> None:
    assert same_instant("2000-05-14T13:02:00-08:00", "2000-05-14T21:02:00Z")
    assert not same_instant("2000-05-14T13:02:00-08:00", "2000-05-14T13:02:00Z")
    assert not same_instant("bad", "bad")


# --------------------------------------------------------------------------- core


def entry(last: str = "2000-05-14T13:02:00Z", dest: str = "mailto:fred@x.com") -> Presence:
    return Presence(
        publisher=FRED,
        last_update=last,
        tuples=(PresenceTuple(destination=dest, available_until=FOREVER),),
    )


def contents(out: list[Outbound]) -> list[tuple[Endpoint, object]]:
    return [(item.recipient, parse_service_message(item.content) or item.content) for item in out]


def test_steps_1_and_2() -> None:
    core = PresenceCore(["example.com"])
    core.check_subject(FRED)
    with pytest.raises(ApexError) as outside:
        core.check_subject(Endpoint.parse("fred@rubble.com"), 3)
    assert (outside.value.code, outside.value.trans_id) == (553, 3)
    with pytest.raises(ApexError) as invalid:
        core.check_subject(Endpoint.parse("apex=nothing@example.com"))
    assert invalid.value.code == 550


def test_subscribe_publish_notify_terminate_and_expiry() -> None:
    core = PresenceCore(["example.com"])
    # No entry: the subscribe is answered with a publish of the default entry (RFC 3343
    # section 3: every endpoint has one; section 4.2 step 6.1).
    out = core.subscribe(WILMA, Subscribe(publisher=FRED, trans_id=100, duration=60), T0)
    [first] = out
    assert parse_publish(first.content).presence == default_entry(FRED)
    # A watch reports the current subscriber.
    out = core.watch(FRED, Watch(publisher=FRED, trans_id=2, duration=30), T0)
    assert contents(out)[1] == (FRED, Notify(subscriber=WILMA, trans_id=2, duration=60))
    # A publish: reply to the publisher, publish to the subscriber with its transID.
    # A publish with the entry's lastUpdate (the default entry's NEVER): reply to the
    # publisher, publish to the subscriber with its transID.
    publish = Publish(
        publisher=FRED, trans_id=1, time_stamp="2000-05-14T13:30:00Z", presence=entry(NEVER)
    )
    out = core.publish(FRED, publish, T0)
    assert out[0] == Outbound(FRED, Reply(code=250, trans_id=1).to_xml())
    sent = parse_publish(out[1].content)
    assert (out[1].recipient, sent.trans_id) == (WILMA, 100)
    assert sent.presence.last_update == "2026-01-01T00:00:00.000000Z"
    # Step 5: a stale lastUpdate is 555; the current one is accepted.
    with pytest.raises(ApexError) as stale:
        core.publish(FRED, publish, T0)
    assert stale.value.code == 555
    fresh = Publish(
        publisher=FRED,
        trans_id=4,
        time_stamp="2000-05-14T13:30:00Z",
        presence=entry(last=sent.presence.last_update),
    )
    core.publish(FRED, fresh, T0)  # same instant: lastUpdate still moves forward
    assert core.entries[FRED].last_update == "2026-01-01T00:00:00.000001Z"
    # Step 5 of 4.2/4.3: a transID in progress is 555.
    with pytest.raises(ApexError) as busy:
        core.subscribe(WILMA, Subscribe(publisher=WILMA, trans_id=100, duration=0), T0)
    assert busy.value.code == 555
    # Time: the watch ends at 30 s, the subscription at 60 s (and its watcher... is gone).
    assert core.get_timer() == T0 + timedelta(seconds=30)
    assert core.handle_timer(T0 + timedelta(seconds=29)) == []
    assert contents(core.handle_timer(T0 + timedelta(seconds=30))) == [
        (FRED, Terminate(trans_id=2))
    ]
    assert contents(core.handle_timer(T0 + timedelta(seconds=61))) == [
        (WILMA, Terminate(trans_id=100))
    ]
    assert core.get_timer() is None
    # Terminate of what is over: 550.
    with pytest.raises(ApexError) as gone:
        core.terminate(WILMA, Terminate(trans_id=100))
    assert gone.value.code == 550


def test_resubscribe_silently_replaces_and_terminate_notifies_watchers() -> None:
    core = PresenceCore(["example.com"])
    core.watch(FRED, Watch(publisher=FRED, trans_id=2, duration=60), T0)
    core.subscribe(WILMA, Subscribe(publisher=FRED, trans_id=100, duration=60), T0)
    core.subscribe(WILMA, Subscribe(publisher=FRED, trans_id=101, duration=60), T0)
    assert [op.trans_id for op in core.of_kind("subscribe", FRED)] == [101]
    out = core.terminate(WILMA, Terminate(trans_id=101))
    assert contents(out) == [
        (WILMA, Reply(code=250, trans_id=101).to_xml()),
        (FRED, Notify(subscriber=WILMA, trans_id=2, action="terminate")),
    ]


def test_publisher_mismatch_is_503() -> None:
    core = PresenceCore(["example.com"])
    publish = Publish(
        publisher=WILMA, trans_id=1, time_stamp="2000-05-14T13:30:00Z", presence=entry()
    )
    reply = core.check_publisher(publish)
    assert reply is not None
    assert (reply.code, reply.trans_id) == (PUBLISHER_MISMATCH, 1)


def test_mesh_tuples_survive_publish_and_show_leave() -> None:
    core = PresenceCore(["example.com"])
    core.subscribe(BARNEY, Subscribe(publisher=FRED, trans_id=10, duration=60), T0)
    out = core.endpoint_attached(FRED, T0)
    shown = parse_publish(out[0].content).presence.tuples
    assert [(t.destination, t.available_until) for t in shown] == [
        (attach_destination(FRED), FOREVER)
    ]
    # An application's publish with the entry's lastUpdate keeps the mesh's tuple.
    publish = Publish(
        publisher=FRED,
        trans_id=1,
        time_stamp="2000-05-14T13:30:00Z",
        presence=entry(core.entries[FRED].last_update),
    )
    core.publish(FRED, publish, T0 + timedelta(seconds=1))
    assert {t.destination for t in core.entries[FRED].tuples} == {
        "mailto:fred@x.com",
        attach_destination(FRED),
    }
    later = T0 + timedelta(seconds=2)
    out = core.endpoint_detached(FRED, later)
    tuple_ = next(
        t
        for t in parse_publish(out[0].content).presence.tuples
        if t.destination == attach_destination(FRED)
    )
    assert not tuple_.available_at(later)
    assert core.endpoint_detached(FRED, later) == []  # already detached
    changes = core.take_changes()
    assert FRED in changes.entries
    assert FRED in changes.attached


def test_remove_tuples_removes_the_entry_with_its_last_tuple() -> None:
    core = PresenceCore(["example.com"])
    topic = PresenceTuple(destination="apex:topic=news@example.com", available_until=FOREVER)
    core.set_tuples(FRED, [topic], T0)
    assert core.remove_tuples(FRED, ["apex:other@example.com"], T0) == []
    core.remove_tuples(FRED, [topic.destination], T0)
    assert FRED not in core.entries
    with pytest.raises(ApexError):
        core.set_tuples(Endpoint.parse("fred@rubble.com"), [topic], T0)


def test_presence_parses_back() -> None:
    assert parse_presence(entry().to_xml()) == entry()


def test_a_duration_that_ended_while_down_ends_at_the_first_timer() -> None:
    from apexmesh.apex.presence_core import InProgress

    op = InProgress(
        kind="subscribe",
        originator=WILMA,
        subject=FRED,
        trans_id=5,
        duration=10,
        expires=T0 + timedelta(seconds=10),
    )
    core = PresenceCore(["example.com"], operations=[op])
    assert core.get_timer() == op.expires
    assert contents(core.handle_timer(T0 + timedelta(hours=1))) == [(WILMA, Terminate(trans_id=5))]
