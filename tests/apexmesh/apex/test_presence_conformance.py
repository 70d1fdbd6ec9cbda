"""RFC 3343 clauses the audit found deviating (sections 4.2 step 6.1, 4.4 step 5, 4.5
step 1), the mesh's own tuples without the applications' 256-tuple bound (a pubsub
service with 10,000 topics), and endpoint identities compared after their transmission
encoding is reversed (RFC 3340 section 2.2.1), on the sans-I/O core."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apexmesh.apex.elements import Error
from apexmesh.apex.elements import Terminate as TerminateOp
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.presence import (
    MAX_TUPLES,
    Presence,
    PresenceTuple,
    Publish,
    Subscribe,
    parse_operation,
    parse_publish,
)
from apexmesh.apex.presence_core import (
    FOREVER,
    NEVER,
    PresenceCore,
    attach_destination,
    refusal,
)
from apexmesh.beep.xml import parse_xml

pytestmark = pytest.mark.unit

FRED = Endpoint.parse("fred@example.com")
WILMA = Endpoint.parse("wilma@example.com")
PUBSUB = Endpoint.parse("apex=pubsub@example.com")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def publish(last: str, trans_id: int = 1) -> Publish:
    return Publish(
        publisher=FRED,
        trans_id=trans_id,
        time_stamp="2026-01-01T00:00:00Z",
        presence=Presence(
            publisher=FRED,
            last_update=last,
            tuples=(PresenceTuple(destination="mailto:fred@x.com", available_until=FOREVER),),
        ),
    )


def test_453_unknown_trans_id_is_answered_with_an_error_element() -> None:
    core = PresenceCore(["example.com"])
    with pytest.raises(ApexError) as refused:
        core.terminate(WILMA, TerminateOp(trans_id=42))
    root = parse_xml(refusal(refused.value))
    assert root.tag == "error"
    assert root.get("code") == "550"
    assert Error(code=550, text=root.text or "").code == 550


def test_other_refusals_stay_replies_with_the_trans_id() -> None:
    core = PresenceCore(["example.com"])
    with pytest.raises(ApexError) as refused:
        core.check_subject(Endpoint.parse("apex=bogus@example.com"), 7)
    root = parse_xml(refusal(refused.value))
    assert (root.tag, root.get("code"), root.get("transID")) == ("reply", "550", "7")


def test_4261_subscribe_to_a_subject_without_entry_is_answered_with_publish() -> None:
    core = PresenceCore(["example.com"])
    [answer] = core.subscribe(WILMA, Subscribe(publisher=FRED, trans_id=100, duration=0), T0)
    sent = parse_publish(answer.content)
    assert sent.trans_id == 100
    assert sent.presence.publisher == FRED
    assert sent.presence.last_update == NEVER
    [only] = sent.presence.tuples
    assert only.destination == attach_destination(FRED)
    assert not only.available_at(T0)  # every endpoint has an entry: fred is not there


def test_445_the_first_publish_needs_the_entrys_last_update() -> None:
    core = PresenceCore(["example.com"])
    with pytest.raises(ApexError) as stale:
        core.publish(FRED, publish("2000-05-14T13:02:00-08:00"), T0)
    assert (stale.value.code, stale.value.trans_id) == (555, 1)
    core.publish(FRED, publish(NEVER, 2), T0)  # what a zero-duration subscribe showed
    assert core.entries[FRED].last_update != NEVER


def test_445_last_update_is_the_entrys_even_after_the_mesh_changed_it() -> None:
    core = PresenceCore(["example.com"])
    core.publish(FRED, publish(NEVER), T0)
    mine = core.entries[FRED].last_update
    core.endpoint_attached(FRED, T0 + timedelta(seconds=1))  # the mesh updates the entry
    with pytest.raises(ApexError) as stale:
        core.publish(FRED, publish(mine, 2), T0 + timedelta(seconds=2))
    assert stale.value.code == 555
    core.publish(FRED, publish(core.entries[FRED].last_update, 3), T0 + timedelta(seconds=2))
    assert {t.destination for t in core.entries[FRED].tuples} == {
        "mailto:fred@x.com",
        attach_destination(FRED),
    }


def test_ten_thousand_topic_tuples_are_kept() -> None:
    core = PresenceCore(["example.com"])
    for number in range(10_000):
        topic = PresenceTuple(
            destination=f"apex:apex=pubsub/topic.{number}@example.com", available_until=FOREVER
        )
        assert core.set_tuples(PUBSUB, [topic], T0) == []  # nobody subscribed
    assert len(core.entries[PUBSUB].tuples) == 10_000
    changes = core.take_changes()
    assert len(changes.tuples) == 10_000


def test_an_application_still_publishes_at_most_256_tuples() -> None:
    tuples = "".join(
        f"<tuple destination='mailto:{n}@x.com' availableUntil='{FOREVER}' />"
        for n in range(MAX_TUPLES + 1)
    )
    body = (
        f"<publish publisher='fred@example.com' transID='5' timeStamp='{NEVER}'>"
        f"<presence publisher='fred@example.com' lastUpdate='{NEVER}'>{tuples}</presence>"
        "</publish>"
    )
    with pytest.raises(ApexError) as refused:
        parse_operation(body.encode())
    assert (refused.value.code, refused.value.trans_id) == (554, 5)


def test_221_an_encoded_apex_destination_is_the_same_endpoint() -> None:
    core = PresenceCore(["example.com"])
    core.endpoint_attached(FRED, T0)
    entry = core.entries[FRED]
    encoded = Publish(
        publisher=FRED,
        trans_id=9,
        time_stamp="2026-01-01T00:00:00Z",
        presence=Presence(
            publisher=FRED,
            last_update=entry.last_update,
            tuples=(PresenceTuple(destination="apex:f%72ed@example.com", available_until=NEVER),),
        ),
    )
    core.publish(FRED, encoded, T0 + timedelta(seconds=1))
    # the application's tuple names the mesh's destination: the mesh's tuple stays,
    # and there is one tuple for fred, not two
    assert [(t.destination, t.available_until) for t in core.entries[FRED].tuples] == [
        (attach_destination(FRED), FOREVER)
    ]
