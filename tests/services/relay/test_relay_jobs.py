"""Custody (services/relay/jobs.py): when a data may be answered, and with what."""

from __future__ import annotations

import asyncio

import pytest

from apexmesh.apex.errors import ApexError
from apexmesh.relay.outcomes import DELIVERED, SHED, UNKNOWN_ENDPOINT
from services.relay.jobs import Custody

pytestmark = pytest.mark.unit


async def test_answered_once_sealed_and_every_copy_taken() -> None:
    custody = Custody(asyncio.get_running_loop())
    custody.hold()
    custody.known(None)
    custody.seal()
    assert not custody.future.done()  # one copy still on its way
    custody.settle(None)
    assert custody.future.result() is None


async def test_not_answered_before_sealed() -> None:
    custody = Custody(asyncio.get_running_loop())
    custody.known(DELIVERED)
    assert not custody.future.done()
    custody.seal()
    assert custody.future.result() is None


async def test_a_refused_recipient_still_counts_as_taken() -> None:
    """A 550 or 537 is an outcome the relay reports: the data was taken."""
    custody = Custody(asyncio.get_running_loop())
    custody.known(UNKNOWN_ENDPOINT)
    custody.seal()
    assert custody.future.result() is None


async def test_every_copy_shed_refuses_the_data() -> None:
    custody = Custody(asyncio.get_running_loop())
    custody.hold()
    custody.known(SHED)
    custody.seal()
    custody.settle(SHED)
    with pytest.raises(ApexError) as refused:
        custody.future.result()
    assert refused.value.code == 421


async def test_one_copy_taken_among_shed_ones_is_ok() -> None:
    custody = Custody(asyncio.get_running_loop())
    custody.known(SHED)
    custody.known(None)
    custody.seal()
    assert custody.future.result() is None


async def test_a_copy_counts_at_the_first_of_taken_and_ended() -> None:
    loop = asyncio.get_running_loop()
    custody = Custody(loop)
    copy = custody.copy()
    custody.seal()
    copy.taken()
    assert custody.future.result() is None
    ended: asyncio.Future[object] = loop.create_future()
    ended.set_result(SHED)
    copy.ended(ended)  # the later signal changes nothing
    assert custody.future.result() is None


async def test_a_copy_ended_without_being_taken_carries_its_outcome() -> None:
    loop = asyncio.get_running_loop()
    custody = Custody(loop)
    copy = custody.copy()
    custody.seal()
    ended: asyncio.Future[object] = loop.create_future()
    ended.set_result(SHED)
    copy.ended(ended)  # type: ignore[arg-type]
    with pytest.raises(ApexError) as refused:
        custody.future.result()
    assert refused.value.code == 421
