"""RFC 3342 section 1, the attachOverride option, against running relays over real TCP
(tests/support/mesh.py): the endpoint's current attachment, on the same pod or on the
other example.com pod, gets a relay-initiated terminate with code 556, the overriding
attach gets ok, and data then goes to the new attachment. Without the option the old
first-come-first-served 554 stays."""

from __future__ import annotations

import pytest

from apexmesh.apex.options import Option
from apexmesh.apex.party import ATTACH_OVERRIDE
from apexmesh.client import ApexRequestError, Attachment, AttachmentTerminatedError
from tests.support.mesh import Mesh, endpoint_client, receive

pytestmark = pytest.mark.integration

#: The option of the RFC's example: <option internal='attachOverride' transID='3' />.
OVERRIDE = Option(internal=ATTACH_OVERRIDE, trans_id=3)


async def terminated_code(attachment: Attachment) -> int:
    with pytest.raises(AttachmentTerminatedError) as ended:
        await receive(attachment)
    return ended.value.code


@pytest.mark.parametrize("pods", ["same pod", "other pod"])
async def test_attach_override_terminates_the_old_attachment_with_556(
    mesh: Mesh, pods: str
) -> None:
    second = mesh.a if pods == "same pod" else mesh.b
    async with (
        endpoint_client(mesh.a.edge_port) as appl1,
        endpoint_client(second.edge_port) as appl2,
        endpoint_client(mesh.rubble.edge_port) as sender,
    ):
        old = await appl1.attach("fred@example.com")
        new = await appl2.attach("fred@example.com", options=[OVERRIDE])
        assert new.attached
        assert await terminated_code(old) == 556
        assert not old.attached
        betty = await sender.attach("betty@rubble.com")
        await betty.send("fred@example.com", b"for the new one")
        got = await receive(new)
        assert got.content == b"for the new one"
        assert str(got.originator) == "betty@rubble.com"


async def test_attach_override_when_nobody_is_attached_is_a_plain_attach(mesh: Mesh) -> None:
    async with (
        endpoint_client(mesh.a.edge_port) as appl,
        endpoint_client(mesh.b.edge_port) as other,
    ):
        fred = await appl.attach("fred@example.com", options=[OVERRIDE])
        barney = await other.attach("barney@example.com")
        await barney.send("fred@example.com", b"hi")
        assert (await receive(fred)).content == b"hi"


@pytest.mark.parametrize("pods", ["same pod", "other pod"])
async def test_without_the_option_the_second_attach_still_gets_554(mesh: Mesh, pods: str) -> None:
    second = mesh.a if pods == "same pod" else mesh.b
    async with (
        endpoint_client(mesh.a.edge_port) as appl1,
        endpoint_client(second.edge_port) as appl2,
    ):
        old = await appl1.attach("fred@example.com")
        with pytest.raises(ApexRequestError) as refused:
            await appl2.attach("fred@example.com")
        assert refused.value.code == 554
        assert old.attached


async def test_override_twice_in_a_row(mesh: Mesh) -> None:
    async with (
        endpoint_client(mesh.a.edge_port) as one,
        endpoint_client(mesh.b.edge_port) as two,
        endpoint_client(mesh.a.edge_port) as three,
    ):
        first = await one.attach("fred@example.com")
        second = await two.attach("fred@example.com", options=[OVERRIDE])
        assert await terminated_code(first) == 556
        third = await three.attach("fred@example.com", options=[OVERRIDE])
        assert await terminated_code(second) == 556
        assert third.attached
