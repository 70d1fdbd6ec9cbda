"""Every reply code of RFC 3343's operations, reached over real TCP through the mesh:
bad input (malformed tuples, unknown endpoints, expired subscriptions ...) is answered
with its code, and the service keeps serving after each."""

from __future__ import annotations

import pytest

from apexmesh.apex.elements import Error, Reply, Terminate
from apexmesh.apex.presence import MAX_TUPLES, Publish
from apexmesh.apex.presence_core import NEVER
from apexmesh.client import XmlContent
from tests.services.presence.conftest import Attach, Party

pytestmark = pytest.mark.integration

PRESENCE = "apex=presence@example.com"


def publish(publisher: str = "fred@example.com", *, inner: str | None = None, **kw: str) -> bytes:
    entry_publisher = kw.get("entry_publisher", publisher)
    # the default entry's lastUpdate: nobody has published for the subject yet
    last = kw.get("last", NEVER)
    tid = kw.get("tid", "1")
    tuples = (
        inner
        if inner is not None
        else (
            "<tuple destination='mailto:fred@flintstone.com' "
            "availableUntil='2525-12-31T23:59:59-08:00' />"
        )
    )
    return (
        f"<publish publisher='{publisher}' transID='{tid}' timeStamp='2000-05-14T13:30:00Z'>"
        f"<presence publisher='{entry_publisher}' lastUpdate='{last}'>{tuples}</presence>"
        "</publish>"
    ).encode()


async def ask(party: Party, xml: bytes, *, as_part: bool = False) -> Reply:
    """Send one operation (inline, or as a MIME part: the relay checks inline XML is
    well-formed, a part reaches the service as it is) and return the service's answer
    as a reply: a ``publish`` (how a subscribe succeeds, section 4.2 step 6.1) reads as
    250 with its transID, the ``error`` for an unknown transID (section 4.5 step 1) as
    its code with the transID it named."""
    if as_part:
        await party.attachment.send(PRESENCE, xml, content_type="application/beep+xml")
    else:
        await party.attachment.send(PRESENCE, XmlContent(xml))
    while True:
        answer = await party.next()
        if isinstance(answer, Reply):
            return answer
        if isinstance(answer, Publish) and b"<subscribe" in xml:
            return Reply(code=250, trans_id=answer.trans_id)
        if isinstance(answer, Error):
            named = int(xml.split(b"transID='")[1].split(b"'")[0])
            return Reply(code=answer.code, trans_id=named, text=answer.text)


CASES = [
    # (who, operation, code, transID in the reply)
    ("pebbles@example.com", publish(), 250, 1),  # presence:publish granted for fred
    (
        "fred@example.com",
        publish(entry_publisher="wilma@example.com"),
        503,
        1,
    ),  # 4.4 step 1
    ("fred@example.com", publish("fred@rubble.com"), 553, 1),  # 4.4 step 2
    ("fred@example.com", publish("apex=bogus@example.com"), 550, 1),  # 4.4 step 3
    ("wilma@example.com", publish(), 537, 1),  # 4.4 step 4
    (
        "wilma@example.com",
        b"<subscribe publisher='fred@rubble.com' duration='0' transID='5' />",
        553,
        5,
    ),  # 4.2 step 1
    (
        "wilma@example.com",
        b"<subscribe publisher='apex=bogus@example.com' duration='0' transID='5' />",
        550,
        5,
    ),  # 4.2 step 2
    (
        "dino@example.com",
        b"<subscribe publisher='fred@example.com' duration='0' transID='5' />",
        537,
        5,
    ),  # 4.2 step 3
    (
        "wilma@example.com",
        b"<watch publisher='fred@rubble.com' duration='0' transID='6' />",
        553,
        6,
    ),  # 4.3 step 1
    (
        "wilma@example.com",
        b"<watch publisher='apex=bogus@example.com' duration='0' transID='6' />",
        550,
        6,
    ),  # 4.3 step 2
    (
        "wilma@example.com",
        b"<watch publisher='fred@example.com' duration='0' transID='6' />",
        537,
        6,
    ),  # 4.3 step 3
    ("wilma@example.com", b"<terminate transID='77' />", 550, 77),  # 4.5 step 1
    ("wilma@example.com", b"<subscribe publisher='fred@example.com'", 500, None),
    (
        "wilma@example.com",
        b"<subscribe publisher='fred@example.com' duration='soon' transID='5' />",
        501,
        5,
    ),
    (
        "wilma@example.com",
        b"<subscribe publisher='fred' duration='0' transID='5' />",
        553,
        5,
    ),  # a malformed endpoint
    ("wilma@example.com", b"<unsubscribe transID='5' />", 501, None),
    (
        "fred@example.com",
        publish(inner="<tuple destination='mailto:fred@flintstone.com' />"),
        501,
        1,
    ),  # a tuple without availableUntil
    (
        "fred@example.com",
        publish(inner="<tuple destination='not a uri' availableUntil='2525-12-31T23:59:59Z' />"),
        501,
        1,
    ),
    ("fred@example.com", publish(inner=""), 501, 1),  # presence needs tuple+
    (
        "fred@example.com",
        publish(
            inner="".join(
                f"<tuple destination='mailto:f{i}@x.com' availableUntil='2525-12-31T23:59:59Z' />"
                for i in range(MAX_TUPLES + 1)
            )
        ),
        554,
        1,
    ),
]


@pytest.mark.parametrize(("who", "operation", "code", "trans_id"), CASES)
async def test_reply_code(
    attach: Attach, who: str, operation: bytes, code: int, trans_id: int | None
) -> None:
    party = await attach(who)
    reply = await ask(party, operation, as_part=code == 500)
    assert (reply.code, reply.trans_id) == (code, trans_id), reply.text
    # The service keeps serving the same endpoint.
    poll = b"<subscribe publisher='fred@example.com' duration='0' transID='999' />"
    again = await ask(party, poll) if who == "wilma@example.com" else None
    if again is not None:
        assert again.code == 250


async def test_555_for_a_trans_id_in_progress(attach: Attach) -> None:
    wilma = await attach("wilma@example.com")
    first = await ask(
        wilma, b"<subscribe publisher='fred@example.com' duration='60' transID='9' />"
    )
    assert (first.code, first.trans_id) == (250, 9)
    reply = await ask(
        wilma, b"<subscribe publisher='wilma@example.com' duration='60' transID='9' />"
    )
    assert (reply.code, reply.trans_id) == (555, 9)
    reply = await ask(wilma, b"<watch publisher='wilma@example.com' duration='60' transID='9' />")
    assert (reply.code, reply.trans_id) == (555, 9)


async def test_555_for_a_stale_last_update_then_250_after_retrieving(attach: Attach) -> None:
    fred = await attach("fred@example.com")
    # fred is attached, so the mesh keeps his entry: the default entry's lastUpdate, or
    # the RFC example's, is not the entry's (4.4 step 5).
    for tid, last in (("1", NEVER), ("2", "2000-05-14T13:02:00-08:00")):
        stale = await ask(fred, publish(tid=tid, last=last))
        assert (stale.code, stale.trans_id) == (555, int(tid))
    # Retrieve (a zero-duration subscribe), then update with the entry's lastUpdate.
    await fred.attachment.send(
        PRESENCE,
        XmlContent(b"<subscribe publisher='fred@example.com' duration='0' transID='3' />"),
    )
    entry = await fred.next()
    assert isinstance(entry, Publish)
    fresh = await ask(fred, publish(tid="4", last=entry.presence.last_update))
    assert (fresh.code, fresh.trans_id) == (250, 4)
    # and that lastUpdate is now stale in turn
    again = await ask(fred, publish(tid="5", last=entry.presence.last_update))
    assert (again.code, again.trans_id) == (555, 5)


async def test_a_terminate_of_an_unknown_trans_id_is_answered_with_an_error_element(
    attach: Attach,
) -> None:
    wilma = await attach("wilma@example.com")
    await wilma.attachment.send(PRESENCE, XmlContent(b"<terminate transID='77' />"))
    answer = await wilma.next()
    assert isinstance(answer, Error)  # RFC 3343 section 4.5 step 1, not a reply
    assert answer.code == 550


async def test_expired_subscription_cannot_be_terminated(attach: Attach) -> None:
    wilma = await attach("wilma@example.com")
    assert (
        await ask(wilma, b"<subscribe publisher='fred@example.com' duration='1' transID='8' />")
    ).code == 250
    assert await wilma.next(within=3.0) == Terminate(trans_id=8)
    reply = await ask(wilma, b"<terminate transID='8' />")
    assert (reply.code, reply.trans_id) == (550, 8)
