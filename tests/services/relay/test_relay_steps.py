"""Every step and reply code of RFC 3340 sections 4.4.1 (attach), 4.4.2 (bind), 4.4.3
(terminate) and 4.4.4.1 (relay processing of data), and the targetHop rules of section
5, against the running mesh of tests/support/mesh.py (two example.com pods ``a`` and
``b``, one rubble.com relay)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from apexmesh.apex.options import STATUS_REQUEST, Option, TargetHop
from apexmesh.client import ApexClient, ApexRequestError, Attachment
from tests.support.mesh import (
    Mesh,
    apex_channel,
    ask,
    ask_payload,
    beep_session,
    cid_payload,
    endpoint_client,
    receive,
    start_answer,
)
from tests.support.polling import scaled

pytestmark = pytest.mark.integration

OK = ("RPY", "ok", "")


def err(code: int) -> tuple[str, str, str]:
    return ("ERR", "error", str(code))


def attach(endpoint: str, trans_id: int, options: str = "") -> str:
    return f"<attach endpoint='{endpoint}' transID='{trans_id}'>{options}</attach>"


UNKNOWN_MUST = (
    "<option external='http://example.org/apex/unknown' targetHop='{hop}'"
    " mustUnderstand='true' transID='7' />"
)
UNKNOWN_MAY = (
    "<option external='http://example.org/apex/unknown' targetHop='this'"
    " mustUnderstand='false' transID='7' />"
)


# ---------------------------------------------------------------------------- 4.4.1

MUST_THIS = UNKNOWN_MUST.format(hop="this")
MUST_FINAL = UNKNOWN_MUST.format(hop="final")
FRED = "fred@example.com"

ATTACH_STEPS = [
    # (case, elements sent first on the channel, the probe, the expected answer)
    ("1: transID in use -> 555", [attach(FRED, 1)], attach("wilma@example.com", 1), err(555)),
    ("2: other domain -> 553", [], attach("fred@rubble.com", 1), err(553)),
    ("3: well-known endpoint -> 537", [], attach("apex=report@example.com", 1), err(537)),
    ("4: unknown mustUnderstand option -> 504", [], attach(FRED, 1, MUST_THIS), err(504)),
    ("4: unknown optional option is ignored", [], attach(FRED, 1, UNKNOWN_MAY), OK),
    ("4: targetHop is ignored in attach", [], attach(FRED, 1, MUST_FINAL), err(504)),
    ("5: attached on this channel -> 554", [attach(FRED, 1)], attach(FRED, 2), err(554)),
    ("6: ok", [], attach(FRED, 1), OK),
    ("6: a refused attach frees its transID", [attach("fred@rubble.com", 1)], attach(FRED, 1), OK),
]


@pytest.mark.parametrize(
    ("setup", "probe", "expected"),
    [case[1:] for case in ATTACH_STEPS],
    ids=[case[0] for case in ATTACH_STEPS],
)
async def test_441_attach_steps(
    mesh: Mesh, setup: list[str], probe: str, expected: tuple[str, str, str]
) -> None:
    async with beep_session(mesh.a.edge_port) as conn:
        channel = await apex_channel(conn)
        for element in setup:
            await ask(channel, element)
        assert await ask(channel, probe) == expected


async def test_441_step3_before_step5_and_options_before_step5(mesh: Mesh) -> None:
    async with beep_session(mesh.a.edge_port) as conn:
        channel = await apex_channel(conn, attach("fred@example.com", 1))
        assert start_answer(channel) == ("ok", "")
        # fred is taken, but the option is processed first (step 4 before step 5)
        probe = attach("fred@example.com", 2, UNKNOWN_MUST.format(hop="all"))
        assert await ask(channel, probe) == err(504)


@pytest.mark.parametrize("other_pod", [False, True], ids=["same pod", "other pod"])
async def test_441_step5_554_across_sessions_and_pods(mesh: Mesh, other_pod: bool) -> None:
    second = mesh.b if other_pod else mesh.a
    async with (
        endpoint_client(mesh.a.edge_port) as first,
        beep_session(second.edge_port) as conn,
    ):
        await first.attach("fred@example.com")
        channel = await apex_channel(conn, attach("fred@example.com", 1))
        assert start_answer(channel) == ("error", "554")
        assert await ask(channel, attach("fred@example.com", 2)) == err(554)
        assert await ask(channel, attach("wilma@example.com", 3)) == OK


async def test_441_piggybacked_attach_is_checked_too(mesh: Mesh) -> None:
    async with beep_session(mesh.a.edge_port) as conn:
        channel = await apex_channel(conn, attach("fred@rubble.com", 1))
        assert start_answer(channel) == ("error", "553")
        assert await ask(channel, attach("fred@example.com", 1)) == OK


# ---------------------------------------------------------------------------- 4.4.2


def bind(relay: str, trans_id: int, options: str = "") -> str:
    return f"<bind relay='{relay}' transID='{trans_id}'>{options}</bind>"


BIND_STEPS = [
    ("1: transID in use -> 555", [bind("rubble.com", 1)], bind("example.com", 1), err(555)),
    ("3: unknown mustUnderstand option -> 504", [], bind("rubble.com", 1, MUST_THIS), err(504)),
    ("4: ok", [], bind("rubble.com", 1), OK),
    ("bind is not for apex-edge", [], bind("rubble.com", 1), err(550)),
    ("attach is not for apex-mesh", [], attach(FRED, 1), err(550)),
]


@pytest.mark.parametrize(
    ("setup", "probe", "expected"),
    [case[1:] for case in BIND_STEPS],
    ids=[case[0] for case in BIND_STEPS],
)
async def test_442_bind_steps(
    mesh: Mesh,
    request: pytest.FixtureRequest,
    setup: list[str],
    probe: str,
    expected: tuple[str, str, str],
) -> None:
    edge = "apex-edge" in request.node.callspec.id
    async with beep_session(mesh.a.edge_port if edge else mesh.a.mesh_port) as conn:
        channel = await apex_channel(conn)
        for element in setup:
            await ask(channel, element)
        assert await ask(channel, probe) == expected
    # step 2 (537 outside development) is test_relay_rfc3340.test_442_bind_error_537...


# ---------------------------------------------------------------------------- 4.4.3


async def test_443_terminate_steps(mesh: Mesh) -> None:
    async with beep_session(mesh.a.edge_port) as conn, endpoint_client(mesh.b.edge_port) as other:
        channel = await apex_channel(conn, attach("fred@example.com", 1))
        assert await ask(channel, attach("wilma@example.com", 2)) == OK
        assert await ask(channel, attach("pebbles@example.com", 3)) == OK
        # 2: unknown transID -> 550 (and a refused attach leaves no transaction behind)
        assert await ask(channel, "<terminate transID='13' />") == err(550)
        assert await ask(channel, attach("fred@rubble.com", 4)) == err(553)
        assert await ask(channel, "<terminate transID='4' />") == err(550)
        # 3: terminate one: pebbles is released in the whole domain, the others stay
        assert await ask(channel, "<terminate transID='3' />") == OK
        assert await ask(channel, "<terminate transID='3' />") == err(550)
        assert (await other.attach("pebbles@example.com")).attached
        with pytest.raises(ApexRequestError) as taken:
            await other.attach("wilma@example.com")
        assert taken.value.code == 554
        # 1: transID 0 ends every association of this session
        assert await ask(channel, "<terminate transID='0' />") == OK
        assert (await other.attach("wilma@example.com")).attached
        assert (await other.attach("fred@example.com")).attached
        # the transIDs are free again on this channel
        assert await ask(channel, attach("barney@example.com", 1)) == OK


async def test_443_transid_zero_releases_bindings(mesh: Mesh) -> None:
    async with beep_session(mesh.a.mesh_port) as conn:
        channel = await apex_channel(conn, "<bind relay='rubble.com' transID='1' />")
        assert start_answer(channel) == ("ok", "")
        relayed = cid_payload(data(originator="betty@rubble.com"))
        assert await ask_payload(channel, relayed) == OK
        assert await ask(channel, "<terminate transID='0' />") == OK
        assert await ask_payload(channel, relayed) == err(537)
        assert await ask(channel, "<bind relay='rubble.com' transID='1' />") == OK


# ---------------------------------------------------------------------------- 4.4.4.1


class Clients:
    """Endpoint SDK clients on the mesh's relays, closed together."""

    def __init__(self, mesh: Mesh, stack: AsyncExitStack) -> None:
        self.mesh = mesh
        self.stack = stack

    async def on(self, port: int) -> ApexClient:
        return await self.stack.enter_async_context(endpoint_client(port))


@pytest.fixture
async def clients(mesh: Mesh) -> AsyncIterator[Clients]:
    async with AsyncExitStack() as stack:
        yield Clients(mesh, stack)


def data(originator: str = FRED, recipient: str = "barney@example.com", options: str = "") -> str:
    return (
        f"<data content='cid:1@example.com'><originator identity='{originator}' />"
        f"<recipient identity='{recipient}' />{options}</data>"
    )


DATA_REFUSALS = [
    ("1: originator not attached -> 537", data(originator="wilma@example.com"), err(537)),
    ("2: unknown mustUnderstand per-data option -> 504", data(options=MUST_THIS), err(504)),
    ("2: applicable at a final relay -> 504", data(options=MUST_FINAL), err(504)),
    ("2: unknown optional option -> ok", data(options=UNKNOWN_MAY), OK),
    ("2: final, not final here -> ok", data(recipient="barney@rubble.com", options=MUST_FINAL), OK),
    ("3: ok", data(), OK),
]


@pytest.mark.parametrize(
    ("control", "expected"),
    [case[1:] for case in DATA_REFUSALS],
    ids=[case[0] for case in DATA_REFUSALS],
)
async def test_4441_steps_1_to_3(mesh: Mesh, control: str, expected: tuple[str, str, str]) -> None:
    async with beep_session(mesh.a.edge_port) as conn:
        channel = await apex_channel(conn, attach("fred@example.com", 1))
        assert await ask_payload(channel, cid_payload(control)) == expected


async def test_4441_originator_attached_on_another_channel_is_537(mesh: Mesh) -> None:
    async with beep_session(mesh.a.edge_port) as one, beep_session(mesh.a.edge_port) as two:
        await apex_channel(one, attach("fred@example.com", 1))
        channel = await apex_channel(two, attach("wilma@example.com", 1))
        assert await ask_payload(channel, cid_payload(data())) == err(537)


async def test_4441_step5_deliveries_and_reports(clients: Clients) -> None:
    mesh = clients.mesh
    fred = await (await clients.on(mesh.a.edge_port)).attach("fred@example.com")
    wilma = await (await clients.on(mesh.a.edge_port)).attach("wilma@example.com")  # same pod
    barney = await (await clients.on(mesh.b.edge_port)).attach("barney@example.com")  # other pod
    betty = await (await clients.on(mesh.rubble.edge_port)).attach(
        "betty@rubble.com"
    )  # other domain
    recipients = [
        "wilma@example.com",
        "barney@example.com",
        "betty@rubble.com",
        "pebbles@example.com",  # allowed but not attached: 550
        "dino@example.com",  # no access entry grants fred core:data: 537
        "barney@rubble.com",  # allowed, not attached over there: 550, reported by rubble
    ]
    result = await fred.send(
        recipients, b"yabba dabba doo", content_type="text/plain", status_request=True
    )
    for attachment in (wilma, barney, betty):
        got = await receive(attachment)
        assert (str(got.originator), got.content, got.content_type) == (
            "fred@example.com",
            b"yabba dabba doo",
            "text/plain",
        )
        # step 5.3: a new data containing only that recipient
        assert [str(r) for r in got.recipients] == [str(attachment.endpoint)]
    reports = await result.reports(2, timeout=scaled(5))
    assert {report.trans_id for report in reports} == {result.status_trans_id}
    codes = {
        str(destination.identity): int(destination.reply.code)
        for report in reports
        for destination in report.destinations
    }
    assert codes == {
        "wilma@example.com": 250,
        "barney@example.com": 250,
        "pebbles@example.com": 550,
        "dino@example.com": 537,
        "betty@rubble.com": 250,
        "barney@rubble.com": 550,
    }


async def test_4441_ok_comes_before_delivery_is_known(clients: Clients) -> None:
    # Step 3 before step 5: the data is answered ok even when no recipient exists.
    mesh = clients.mesh
    fred = await (await clients.on(mesh.b.edge_port)).attach("fred@example.com")
    result = await fred.send("pebbles@example.com", b"x", status_request=True)
    [report] = await result.reports(1, timeout=scaled(5))
    assert [(str(d.identity), int(d.reply.code)) for d in report.destinations] == [
        ("pebbles@example.com", 550)
    ]


# ---------------------------------------------------------------------------- 5


def status_request(hop: TargetHop, trans_id: int = 86) -> Option:
    return Option(internal=STATUS_REQUEST, trans_id=trans_id, target_hop=hop, must_understand=True)


async def reports_for(fred: Attachment, count: int) -> dict[str, list[tuple[str, int]]]:
    """``count`` statusResponse data queued on ``fred``: reporter -> (recipient, code)."""
    found: dict[str, list[tuple[str, int]]] = {}
    for _ in range(count):
        got = await receive(fred)
        assert got.status_response is not None, got
        found.setdefault(str(got.originator), []).extend(
            (str(d.identity), int(d.reply.code)) for d in got.status_response.destinations
        )
    return found


def submitted(mesh: Mesh, domain: str) -> float:
    report = mesh.report_example if domain == "example.com" else mesh.report_rubble
    value = report.registry.get_sample_value(
        "apexmesh_report_responses_total", {"result": "submitted"}
    )
    return value or 0.0


@pytest.mark.parametrize(
    ("hop", "reporters", "kept"),
    [
        (TargetHop.THIS, ["apex=report@example.com"], False),
        (TargetHop.FINAL, ["apex=report@rubble.com"], True),
        (TargetHop.ALL, ["apex=report@example.com", "apex=report@rubble.com"], True),
    ],
    ids=["this", "final", "all"],
)
async def test_5_target_hop_across_two_relays(
    clients: Clients, hop: TargetHop, reporters: list[str], kept: bool
) -> None:
    mesh = clients.mesh
    fred = await (await clients.on(mesh.a.edge_port)).attach("fred@example.com")
    betty = await (await clients.on(mesh.rubble.edge_port)).attach("betty@rubble.com")
    await fred.send("betty@rubble.com", b"hi", options=[status_request(hop)])
    got = await receive(betty)
    # "this" is removed before transmitting; "final" and "all" reach the final relay,
    # which removes nothing (section 5).
    assert [o.internal for o in got.options] == (["statusRequest"] if kept else [])
    found = await reports_for(fred, len(reporters))
    assert sorted(found) == reporters
    for destinations in found.values():
        assert destinations == [("betty@rubble.com", 250)]
    if hop is TargetHop.FINAL:
        assert submitted(mesh, "example.com") == 0  # relay #1 did not report


@pytest.mark.parametrize("hop", [TargetHop.THIS, TargetHop.FINAL, TargetHop.ALL])
async def test_5_target_hop_at_the_final_relay(clients: Clients, hop: TargetHop) -> None:
    mesh = clients.mesh
    fred = await (await clients.on(mesh.a.edge_port)).attach("fred@example.com")
    barney = await (await clients.on(mesh.b.edge_port)).attach("barney@example.com")
    await fred.send("barney@example.com", b"hi", options=[status_request(hop)])
    got = await receive(barney)
    assert [o.internal for o in got.options] == ["statusRequest"]  # final removes nothing
    assert await reports_for(fred, 1) == {"apex=report@example.com": [("barney@example.com", 250)]}


async def test_5_unknown_must_understand_at_the_next_relay(clients: Clients) -> None:
    # An unknown mustUnderstand option for the final relay passes relay #1 (it does not
    # apply there) and fails at relay #2 with 504: reported to fred by relay #1 ("all").
    mesh = clients.mesh
    fred = await (await clients.on(mesh.a.edge_port)).attach("fred@example.com")
    await (await clients.on(mesh.rubble.edge_port)).attach("betty@rubble.com")
    unknown = Option(
        external="http://example.org/apex/unknown",
        trans_id=7,
        target_hop=TargetHop.FINAL,
        must_understand=True,
    )
    await fred.send("betty@rubble.com", b"hi", options=[unknown, status_request(TargetHop.ALL)])
    assert await reports_for(fred, 1) == {"apex=report@example.com": [("betty@rubble.com", 504)]}
