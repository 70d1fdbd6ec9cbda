"""Small combinators over the futures of deliveries: callbacks, not tasks.

A delivery's outcome is a future settled by a callback (the endpoint's answer, the other
pod's response); the relay chains, repeats and copies them with callbacks, so that the
common case costs no task per data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from apexmesh.relay.outcomes import DELIVERED, LOCAL_ERROR, Outcome, Reason
from services.relay.jobs import Answer, CustodyOfCopy


def group_ended(copy: CustodyOfCopy, future: asyncio.Future[tuple[Outcome, ...]]) -> None:
    """A group sent to another pod ended: its custody, when not taken before, is that of
    its first outcome when every copy was shed (421 then), else taken."""
    settled: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
    outcomes = () if future.cancelled() or future.exception() else future.result()
    shed = [outcome for outcome in outcomes if outcome.reason is Reason.SHED]
    settled.set_result(shed[0] if outcomes and len(shed) == len(outcomes) else DELIVERED)
    copy.ended(settled)


def done(outcome: Outcome) -> asyncio.Future[Outcome]:
    future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
    future.set_result(outcome)
    return future


def repeat(single: asyncio.Future[Outcome], times: int) -> asyncio.Future[tuple[Outcome, ...]]:
    """A group's outcomes when one data carried them all: the same for each."""
    result: asyncio.Future[tuple[Outcome, ...]] = asyncio.get_running_loop().create_future()

    def settled(future: asyncio.Future[Outcome]) -> None:
        if future.cancelled() or future.exception() is not None:
            copy_future(future, result)
        else:
            result.set_result((future.result(),) * times)

    single.add_done_callback(settled)
    return result


def chain(
    first: asyncio.Future[Outcome],
    needs_more: Callable[[Outcome], bool],
    then: Callable[[Outcome], Any],
) -> asyncio.Future[Outcome]:
    """The outcome of ``first``, or of ``then(it)`` when ``needs_more(it)``: callbacks, so
    that the common case costs no task."""
    result: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()

    def settled(future: asyncio.Future[Outcome]) -> None:
        if future.cancelled() or future.exception() is not None or not needs_more(future.result()):
            copy_future(future, result)
            return
        follow = asyncio.ensure_future(then(future.result()))
        follow.add_done_callback(lambda done: copy_future(done, result))

    first.add_done_callback(settled)
    return result


def copy_future(source: asyncio.Future[Any], target: asyncio.Future[Any]) -> None:
    """Give ``target`` what ``source`` ended with (unless ``target`` is done already)."""
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif (error := source.exception()) is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())


def answer_ok(answer: asyncio.Future[Answer]) -> None:
    """The other pod took the data: ``ok`` (unless the data was answered already)."""
    if not answer.done():
        answer.set_result(None)


__all__ = [
    "answer_ok",
    "chain",
    "copy_future",
    "done",
    "group_ended",
    "repeat",
]


def settled_outcome(future: asyncio.Future[Outcome]) -> Outcome:
    """The outcome of a done delivery future; 451 when it ended without one (cancelled,
    or failed: a bug, logged where it happened)."""
    if future.cancelled() or future.exception() is not None:
        return LOCAL_ERROR
    return future.result()


_T = TypeVar("_T")


def resolver(future: asyncio.Future[_T]) -> Callable[[_T], None]:
    """A callback giving ``future`` its result, unless it is done already (a caller that
    stopped waiting cancelled it): how a callback-settled delivery feeds a future."""

    def resolve(value: _T) -> None:
        if not future.done():
            future.set_result(value)

    return resolve
