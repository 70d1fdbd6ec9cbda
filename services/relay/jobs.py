"""Accepted data waiting for steps 4 and 5 (RFC 3340 4.4.4.1), in order per origin, and
the moment the relay may answer it.

A :class:`Job` is one data the relay decided to take. Jobs of one origin (an APEX channel,
or the domain's services) are routed in the order they arrived by that origin's
:class:`Dispatcher`, so data from one sender to one recipient keeps its order whatever
waits (a lookup, room at a busy endpoint).

**Custody.** Step 3's ``ok`` tells the sender that the relay took the data. This relay
sends it once every recipient's copy is in custody (:class:`Custody`): queued on the APEX
channel of this pod that delivers it, within that channel's bounds (services/relay/flow.py),
or answered by the next hop (another pod of the domain, a well-known service, another
domain's relay), or failed with an outcome the relay reports. The ``ok`` still promises
no delivery (statusRequest does that); holding it back is how the relay slows a sender
whose data it cannot take yet: unanswered data keep the sender's BEEP window closed (RFC
3081 3.1.3), so nothing queues without bound, and the death of the relay that answered
``ok`` loses nothing another process had not already taken.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeAlias

from apexmesh.apex.codes import ApexReplyCode, for_code
from apexmesh.apex.content import MimePart
from apexmesh.apex.data import Data, DataContent, Originator
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.hops import DataPlan
from apexmesh.apex.options import Option
from apexmesh.ops.logs import correlation_id
from apexmesh.relay.outcomes import Outcome, Reason

_log = logging.getLogger(__name__)

#: What the data of one recipient shares with others' for one payload template.
TemplateKey = tuple[Originator, tuple[Option, ...], DataContent | None]

#: What a data's answer future gives once in custody: None for ``ok``; a refusal is the
#: future's :class:`~apexmesh.apex.errors.ApexError`, turned into the reply by the edge.
Answer: TypeAlias = None


def all_shed() -> ApexError:
    """Every copy of a data was shed (services/relay/flow.py): nothing was taken (421)."""
    return ApexError(
        ApexReplyCode.SERVICE_NOT_AVAILABLE,
        "the recipients' queues are full (slow consumer); data not accepted",
    )


class Custody:
    """Counts the copies of one data not yet in custody; answers once none is left (see
    the module docstring). A data whose every copy was shed is refused (421).

    With ``refuse_transient`` (data a service submits, which owes no report: nobody
    would learn of a failure) a copy that failed for a transient reason (4xx: the
    access service unreachable, the next hop down) is not in custody either: when no
    copy was taken the data is refused with that failure's code, so that the service
    retries it (a status report survives an access-service outage, issue #34)."""

    __slots__ = (
        "_pending",
        "_refuse_transient",
        "_sealed",
        "_shed",
        "_taken",
        "_transient",
        "future",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, *, refuse_transient: bool = False) -> None:
        self.future: asyncio.Future[Answer] = loop.create_future()
        self._pending = 0
        self._taken = False
        self._shed = False
        self._sealed = False
        self._refuse_transient = refuse_transient
        self._transient: Outcome | None = None

    def hold(self) -> None:
        """One more copy on its way to custody."""
        self._pending += 1

    def settle(self, outcome: Outcome | None) -> None:
        """A copy held with :meth:`hold` is in custody (None: queued), or ended with
        ``outcome`` (answered, failed, shed)."""
        self._pending -= 1
        self._record(outcome)
        self._finish()

    def known(self, outcome: Outcome | None) -> None:
        """A copy whose custody was settled without :meth:`hold` (at once)."""
        self._record(outcome)

    def seal(self) -> None:
        """Every copy of the data has been held or settled: the answer may go."""
        self._sealed = True
        self._finish()

    def settle_with(self, future: asyncio.Future[Outcome]) -> None:
        """:meth:`hold` until ``future`` (a delivery's outcome) is done."""
        self.hold()
        future.add_done_callback(self._settled_future)

    def copy(self) -> CustodyOfCopy:
        """:meth:`hold` one copy whose custody comes with the first of two signals: the
        next hop says it took it (:meth:`CustodyOfCopy.taken`), or its outcome is known
        (:meth:`CustodyOfCopy.ended`)."""
        self.hold()
        return CustodyOfCopy(self)

    def _settled_future(self, future: asyncio.Future[Outcome]) -> None:
        if future.cancelled() or future.exception() is not None:
            self.settle(None)  # logged where the outcome is read
        else:
            self.settle(future.result())

    def _record(self, outcome: Outcome | None) -> None:
        if outcome is not None and outcome.reason is Reason.SHED:
            self._shed = True
        elif self._refuse_transient and outcome is not None and _transient(outcome):
            self._transient = self._transient or outcome
        else:
            self._taken = True

    def _finish(self) -> None:
        if self._sealed and self._pending == 0 and not self.future.done():
            code = None if self._transient is None else for_code(self._transient.code)
            if code is not None and self._transient is not None and not self._taken:
                self.future.set_exception(ApexError(code, self._transient.text or "not taken"))
            elif self._shed and not self._taken:
                self.future.set_exception(all_shed())
            else:
                self.future.set_result(None)


def _transient(outcome: Outcome) -> bool:
    code = for_code(outcome.code)
    return code is not None and code.transient


class CustodyOfCopy:
    """One copy held in a :class:`Custody` until taken or ended, whichever comes first."""

    __slots__ = ("_custody",)

    def __init__(self, custody: Custody) -> None:
        self._custody: Custody | None = custody

    def taken(self) -> None:
        """The next hop queued the copy for its endpoint."""
        custody, self._custody = self._custody, None
        if custody is not None:
            custody.settle(None)

    def ended(self, future: asyncio.Future[Outcome]) -> None:
        """The copy's delivery ended (a done-callback)."""
        custody, self._custody = self._custody, None
        if custody is None:
            return
        if future.cancelled() or future.exception() is not None:
            custody.settle(None)
        else:
            custody.settle(future.result())


@dataclass(frozen=True, slots=True)
class Job:
    """Data accepted for steps 4 and 5."""

    data: Data
    plan: DataPlan
    parts: tuple[MimePart, ...]
    raw: bytes
    #: When this relay received it (epoch ms): the origin of its dataTiming clocks.
    received_at: int = 0
    #: Recipients whose data was held before ``ok`` (hold4Endpoint): nothing to deliver.
    held: frozenset[Endpoint] = frozenset()
    #: When the data may be answered; None when it was answered already.
    custody: Custody | None = field(default=None, compare=False)
    #: Payload templates of a fan-out (services/relay/payloads.py), built once per job.
    templates: dict[TemplateKey, tuple[bytes, bytes]] = field(default_factory=dict, compare=False)
    #: The correlation id of the data (apexmesh/ops/logs.py), that of its acceptance.
    cid: str = field(default_factory=correlation_id.get, compare=False)


#: Routes a job now without waiting, when that is possible (True), else does nothing.
RouteNow = Callable[[Job], bool]
#: Routes a job, waiting for what it must (lookups, room at busy endpoints).
RouteLater = Callable[[Job], Awaitable[None]]


@dataclass(eq=False)
class Dispatcher:
    """Runs steps 4-5 for one origin, in the order its data was accepted."""

    route_now: RouteNow
    route_later: RouteLater
    jobs: deque[Job] = field(default_factory=deque)
    #: True while a task works through ``jobs`` (so a job routed now could pass one).
    running: bool = False
    task: asyncio.Task[None] | None = None
    #: Called each time the dispatcher has nothing left (its owner may drop it).
    on_idle: Callable[[], None] | None = None

    def submit(self, job: Job) -> None:
        """Route ``job`` now when nothing of its origin waits and it needs no waiting,
        else queue it."""
        if not self.running:
            try:
                if self.route_now(job):
                    return
            except Exception:  # noqa: BLE001  (as in _run: one job's bug stops no other)
                _log.exception("relaying data from %s failed", job.data.originator.identity)
                _abandon(job)
                return
        self.enqueue(job)

    def enqueue(self, job: Job) -> None:
        """Queue ``job`` behind its origin's earlier data (a task works through them)."""
        self.jobs.append(job)
        if not self.running:
            self.running = True
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            while self.jobs:
                job = self.jobs.popleft()
                correlation_id.set(job.cid)  # this task's context: its log lines and calls
                try:
                    await self.route_later(job)
                except Exception:  # noqa: BLE001  (a bug in one job must not stop the others)
                    _log.exception("relaying data from %s failed", job.data.originator.identity)
                    _abandon(job)
        finally:
            self.running = False
            if self.on_idle is not None and not self.jobs:
                self.on_idle()


def _abandon(job: Job) -> None:
    """A job failed by a bug: its sender still gets an answer (451), never silence."""
    custody = job.custody
    if custody is not None and not custody.future.done():
        custody.future.set_exception(ApexError(ApexReplyCode.ACTION_ABORTED, "local error"))


__all__ = ["Answer", "Custody", "Dispatcher", "Job", "RouteLater", "RouteNow", "all_shed"]
