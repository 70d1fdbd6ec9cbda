"""Every example exchange of RFC 3343 (sections 2.1-2.3 and 4.1) against the running mesh
over real TCP: endpoints attach to real relays with the SDK, send the examples' exact
operations to apex=presence@example.com and receive the service's data."""

from __future__ import annotations

import pytest

from apexmesh.apex.elements import Reply, Terminate
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.presence import Notify, Publish
from apexmesh.apex.presence_core import NEVER
from apexmesh.client import XmlContent
from tests.services.presence.conftest import Attach, Party

pytestmark = pytest.mark.integration

PRESENCE = "apex=presence@example.com"

#: Section 2.1, the publish example, verbatim.
PUBLISH_1 = b"""<publish publisher='fred@example.com' transID='1'
                         timeStamp='2000-05-14T13:30:00-08:00'>
                    <presence publisher='fred@example.com'
                           lastUpdate='2000-05-14T13:02:00-08:00'
                           publisherInfo='http://www.example.com/fred/'>
                        <tuple
                          destination='apex:fred/appl=im@example.com'
                          availableUntil='2000-05-14T14:02:00-08:00' />
                        <tuple destination='mailto:fred@flintstone.com'
                          availableUntil='2525-12-31T23:59:59-08:00' />
                    </presence>
                </publish>"""


async def send(party: Party, xml: bytes) -> None:
    await party.attachment.send(PRESENCE, XmlContent(xml))


async def retrieve(party: Party, publisher: str = "fred@example.com") -> str:
    """Section 2.2's note: "applications must successfully retrieve a presence entry
    prior to trying to update that entry" (a zero-duration subscribe); its lastUpdate."""
    await send(party, f"<subscribe publisher='{publisher}' duration='0' transID='99' />".encode())
    entry = await party.next()
    assert isinstance(entry, Publish)
    assert entry.trans_id == 99
    return entry.presence.last_update


def as_of(last_update: str) -> bytes:
    """Section 2.1's example, made against the entry as it is now (its lastUpdate)."""
    return PUBLISH_1.replace(b"2000-05-14T13:02:00-08:00", last_update.encode())


async def fred_publishes(fred: Party) -> None:
    """Section 2.1: publish (after retrieving the entry), then the reply with the same
    transID."""
    await send(fred, as_of(await retrieve(fred)))
    assert await fred.next() == Reply(code=250, trans_id=1)


async def test_publish_example_section_2_1(attach: Attach) -> None:
    fred = await attach("fred@example.com")
    await fred_publishes(fred)


async def test_subscribe_example_section_2_2(attach: Attach) -> None:
    fred = await attach("fred@example.com")
    await fred_publishes(fred)
    wilma = await attach("wilma@example.com", pod="b")
    await send(
        wilma,
        b"<subscribe publisher='fred@example.com' duration='86400' transID='100' />",
    )
    publish = await wilma.next()
    assert isinstance(publish, Publish)
    assert publish.trans_id == 100
    assert publish.publisher == Endpoint.parse("fred@example.com")
    entry = publish.presence
    assert entry.publisher_info == "http://www.example.com/fred/"
    # The example's tuples, and the one the mesh keeps for fred's attachment.
    assert [t.destination for t in entry.tuples] == [
        "apex:fred/appl=im@example.com",
        "mailto:fred@flintstone.com",
        "apex:fred@example.com",
    ]
    # The service set lastUpdate to its own time (section 4.4 step 6.2).
    assert entry.last_update != "2000-05-14T13:02:00-08:00"
    # A change is published to the subscriber with the subscription's transID.
    changed = PUBLISH_1.replace(b"2000-05-14T13:02:00-08:00", entry.last_update.encode()).replace(
        b"transID='1'", b"transID='3'"
    )
    await send(fred, changed)
    assert await fred.next() == Reply(code=250, trans_id=3)
    update = await wilma.next()
    assert isinstance(update, Publish)
    assert update.trans_id == 100
    # Section 2.2: the subscriber cancels; the service replies 250.
    await send(wilma, b"<terminate transID='100' />")
    assert await wilma.next() == Reply(code=250, trans_id=100)


async def test_service_terminates_subscription_at_end_of_duration(attach: Attach) -> None:
    """Section 2.2, "or": the service sends terminate when the duration is over."""
    wilma = await attach("wilma@example.com")
    await send(wilma, b"<subscribe publisher='fred@example.com' duration='1' transID='100' />")
    first = await wilma.next()  # fred's default entry (RFC 3343 section 3)
    assert isinstance(first, Publish)
    assert first.trans_id == 100
    assert await wilma.next(within=3.0) == Terminate(trans_id=100)


async def test_watch_example_section_2_3(attach: Attach) -> None:
    wilma = await attach("wilma@example.com")
    await send(wilma, b"<subscribe publisher='fred@example.com' duration='86400' transID='100' />")
    first = await wilma.next()  # fred's default entry: he has never been attached
    assert isinstance(first, Publish)
    assert first.presence.last_update == NEVER
    fred = await attach("fred@example.com", pod="b")
    attached = await wilma.next()  # the mesh publishes fred's attachment to wilma
    assert isinstance(attached, Publish)
    assert attached.trans_id == 100
    await send(fred, b"<watch publisher='fred@example.com' duration='86400' transID='2' />")
    assert await fred.next() == Reply(code=250, trans_id=2)
    assert await fred.next() == Notify(
        subscriber=Endpoint.parse("wilma@example.com"),
        trans_id=2,
        duration=86400,
        action="subscribe",
    )
    # Later subscriptions and terminations are notified (section 4.3 step 6.3).
    await send(wilma, b"<terminate transID='100' />")
    assert await wilma.next() == Reply(code=250, trans_id=100)
    assert await fred.next() == Notify(
        subscriber=Endpoint.parse("wilma@example.com"), trans_id=2, action="terminate"
    )
    # Section 2.3: the watcher cancels; the service replies 250.
    await send(fred, b"<terminate transID='2' />")
    assert await fred.next() == Reply(code=250, trans_id=2)


async def test_service_terminates_watch_at_end_of_duration(attach: Attach) -> None:
    fred = await attach("fred@example.com")
    await send(fred, b"<watch publisher='fred@example.com' duration='1' transID='2' />")
    assert await fred.next() == Reply(code=250, trans_id=2)
    assert await fred.next(within=3.0) == Terminate(trans_id=2)


async def test_multipart_form_section_4_1(attach: Attach) -> None:
    """Section 4.1: the operation as a MIME part referenced by cid: works the same."""
    fred = await attach("fred@example.com")
    last_update = await retrieve(fred)
    await fred.attachment.send(PRESENCE, as_of(last_update), content_type="application/beep+xml")
    assert await fred.next() == Reply(code=250, trans_id=1)
    await fred.attachment.send(
        PRESENCE,
        b"<subscribe publisher='fred@example.com' duration='0' transID='7' />",
        content_type="application/beep+xml",
    )
    publish = await fred.next()
    assert isinstance(publish, Publish)
    assert publish.trans_id == 7
