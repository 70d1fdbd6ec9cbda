"""Repairs in the background (services/pubsub/robust_repairs.py): a window of
redeliveries per repair, a bounded number of repairs per pod, refusals found on the way
replied with the request's transID (issue #29)."""

from __future__ import annotations

import asyncio

import pytest

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.store.robust_reads import LinkGone
from services.pubsub.robust_repairs import Redeliveries, Repairs
from tests.support.held_calls import HeldCalls
from tests.support.polling import eventually

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]

WILMA = Endpoint.parse("wilma@example.com")


async def test_a_window_keeps_at_most_its_size_in_flight_and_waits_for_them_at_the_end() -> None:
    flying = 0
    most = 0
    done: list[int] = []
    gate = asyncio.Event()

    def send(number: int):  # type: ignore[no-untyped-def]
        async def one() -> None:
            nonlocal flying, most
            flying += 1
            most = max(most, flying)
            await gate.wait()
            flying -= 1
            done.append(number)

        return one

    async def feed(window: Redeliveries) -> None:
        for number in range(100):
            await window.put(send(number))

    async with Redeliveries(window=8) as window:
        feeding = asyncio.create_task(feed(window))
        await eventually(lambda: flying == 8)
        assert not feeding.done()  # the ninth waits for room
        gate.set()
        await feeding
    assert most == 8
    assert sorted(done) == list(range(100))
    assert window.sent == 100


async def test_the_first_failure_ends_the_repair_and_stops_the_rest() -> None:
    stopped = asyncio.Event()

    async def fails() -> None:
        raise ApexError(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "shed")

    async def hangs() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    async def repair() -> None:
        async with Redeliveries(window=4) as window:
            await window.put(hangs)
            await window.put(fails)
            await eventually(lambda: window.failed)
            await window.put(hangs)  # not started: the failure is raised

    with pytest.raises(ApexError) as raised:
        await repair()
    assert raised.value.code == ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT
    assert stopped.is_set()


async def test_repairs_run_a_bounded_number_at_once_and_refuse_beyond_their_queue() -> None:
    replies: list[tuple[int, int | None]] = []

    async def reply(_d: str, _to: Endpoint, code: int, trans_id: int | None, _t: str) -> None:
        replies.append((code, trans_id))

    repairs = Repairs(reply, running=2, waiting=1)
    repair = HeldCalls()
    for trans_id in (1, 2, 3):
        repairs.start("example.com", WILMA, trans_id, repair)
    with pytest.raises(ApexError) as refused:
        repairs.start("example.com", WILMA, 4, repair)
    assert (refused.value.code, refused.value.trans_id) == (450, 4)
    await eventually(lambda: repair.inside == 2)
    repair.release()
    await eventually(lambda: not repairs.active)
    assert repair.most == 2
    assert replies == []
    await repairs.aclose()


async def test_a_refusal_found_while_repairing_is_replied_with_the_requests_trans_id() -> None:
    replies: list[tuple[int, int | None, str]] = []

    async def reply(_d: str, to: Endpoint, code: int, trans_id: int | None, text: str) -> None:
        assert to == WILMA
        replies.append((code, trans_id, text))

    repairs = Repairs(reply)

    async def gone() -> None:
        raise LinkGone("wilma@example.com")

    async def shed() -> None:
        raise ApexError(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "redelivery: 421")

    repairs.start("example.com", WILMA, 7, gone)
    repairs.start("example.com", WILMA, 8, shed)
    await eventually(lambda: not repairs.active)
    assert sorted(replies) == [(450, 8, "redelivery: 421"), (550, 7, "link context gone")]
    await repairs.aclose()
