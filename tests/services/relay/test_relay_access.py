"""The access service's APEX operations end to end over BEEP (RFC 3341 through RFC 3340
section 6): an endpoint sends data with an operation inline (``data-content``) to
``apex=access@DOMAIN`` and receives the reply data from ``apex=access@DOMAIN``; a change
notifies the owner the same way; a change through the relay changes the relay's own
core:data decisions."""

from __future__ import annotations

import asyncio

import pytest

from apexmesh.beep.xml import Element, parse_xml
from apexmesh.client import Attachment, XmlContent
from tests.support.mesh import Mesh, endpoint_client
from tests.support.polling import eventually, scaled, wait_until

pytestmark = pytest.mark.integration

ACCESS = "apex=access@example.com"


async def ask_access(fred: Attachment, operation: str) -> Element:
    """Send ``operation`` inline to apex=access and return the reply's XML content."""
    result = await fred.send(ACCESS, XmlContent(operation.encode()), status_request=True)
    async with asyncio.timeout(scaled(5)):
        got = await fred.receive()
    assert str(got.originator) == ACCESS
    assert [str(r) for r in got.recipients] == [str(fred.endpoint)]
    assert got.is_xml
    [report] = await result.reports(1, timeout=scaled(5))
    assert [(str(d.identity), int(d.reply.code)) for d in report.destinations] == [(ACCESS, 250)]
    return parse_xml(got.content)


async def test_query_and_get_over_beep(mesh: Mesh) -> None:
    async with endpoint_client(mesh.a.edge_port) as client:
        fred = await client.attach("fred@example.com")
        allowed = await ask_access(
            fred,
            "<query owner='fred@example.com' transID='9' actor='barney@example.com'"
            " actions='core:data' />",
        )
        assert (allowed.tag, dict(allowed.attrib)) == ("allow", {"transID": "9"})
        denied = await ask_access(
            fred,
            "<query owner='fred@example.com' transID='10' actor='barney@example.com'"
            " actions='presence:watch' />",
        )
        assert (denied.tag, dict(denied.attrib)) == ("deny", {"transID": "10"})
        got = await ask_access(fred, "<get transID='11' owner='fred@example.com' actor='*@*' />")
        assert got.tag == "set"
        [entry] = got
        assert (entry.get("owner"), entry.get("actor"), entry.get("actions")) == (
            "fred@example.com",
            "*@*",
            "core:data",
        )
        assert entry.get("lastUpdate")


async def test_set_over_beep_changes_delivery(mesh: Mesh) -> None:
    # dino has no entry: fred's data to dino is refused (537). dino grants fred core:data
    # through apex=access over BEEP (on the other pod); the relay's cached decision
    # follows, and the next data is delivered.
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        endpoint_client(mesh.b.edge_port) as two,
    ):
        fred = await one.attach("fred@example.com")
        dino = await two.attach("dino@example.com")
        result = await fred.send("dino@example.com", b"woof?", status_request=True)
        [report] = await result.reports(1, timeout=scaled(5))
        assert int(report.destinations[0].reply.code) == 537

        done = await ask_access(
            dino,
            "<set transID='3'><access owner='dino@example.com' actor='fred@example.com'"
            " actions='core:data' /></set>",
        )
        assert (done.tag, done.get("code"), done.get("transID")) == ("reply", "250", "3")

        async def delivered() -> int:
            sent = await fred.send("dino@example.com", b"woof", status_request=True)
            [answer] = await sent.reports(1, timeout=scaled(5))
            return int(answer.destinations[0].reply.code)

        async def granted() -> bool:
            code = await delivered()
            assert code in (250, 537)
            return code == 250

        await wait_until(granted, 5, every=0.05, what="the decision cache follows the grant")
        async with asyncio.timeout(scaled(5)):
            while (await dino.receive()).content != b"woof":
                pass


async def test_operation_from_another_domain(mesh: Mesh) -> None:
    # betty@rubble.com asks example.com's access service; the reply crosses back over
    # apex-mesh to rubble.com.
    async with endpoint_client(mesh.rubble.edge_port) as client:
        betty = await client.attach("betty@rubble.com")
        await betty.send(
            ACCESS,
            XmlContent(
                b"<query owner='barney@example.com' transID='4' actor='betty@rubble.com'"
                b" actions='core:data' />"
            ),
        )
        async with asyncio.timeout(scaled(5)):
            got = await betty.receive()
        assert str(got.originator) == ACCESS
        root = parse_xml(got.content)
        # betty may not query barney's entries (RFC 3341 access:query): 537, from afar
        assert (root.tag, root.get("code"), root.get("transID")) == ("reply", "537", "4")


async def test_access_service_down_fails_closed_with_421(mesh: Mesh) -> None:
    """An uncached core:data decision while the access service is unreachable: the data
    was accepted (step 1 needs no access service), the recipient's outcome is 421 (never
    delivered, counted in the relay's outcome metric), and the channel goes on serving."""
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        endpoint_client(mesh.b.edge_port) as two,
    ):
        fred = await one.attach("fred@example.com")
        wilma = await two.attach("wilma@example.com")
        barney = await two.attach("barney@example.com")
        await fred.send("wilma@example.com", b"cached")
        assert (await wilma.receive()).content == b"cached"
        await mesh.access.stop()
        await fred.send("barney@example.com", b"not now")
        await eventually(lambda: outcomes(mesh, "421") == 1)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(scaled(0.3)):
                await barney.receive()
        await fred.send("wilma@example.com", b"still served")
        assert (await wilma.receive()).content == b"still served"


def outcomes(mesh: Mesh, result: str) -> float:
    value = mesh.a.registry.get_sample_value(
        "apexmesh_relay_delivery_outcomes_total", {"result": result}
    )
    return value or 0.0
