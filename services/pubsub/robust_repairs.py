"""Gap repairs and snapshots run beside the operation that asked for them (docs/robust.md
"Gap fill"): the pod answers the relay's ``Deliver`` of a ``gap`` or ``snapshot`` once
the request is checked, and redelivers in the background.

Why not inside the ``Deliver``: a repair after a long absence is thousands of
redeliveries to the very endpoint whose request the relay is still waiting to answer.
Held inside the call, the relay's ``ok`` to the subscriber's ``gap`` data waited for
the whole repair (beyond the relay's 30 s call timeout for a large one, and its retry
would have started the repair again), and a subscriber SDK that waited for that ``ok``
before reading on could never receive what the repair sent.

- **One repair, a window of redeliveries** (:class:`Redeliveries`): up to
  :data:`WINDOW` redeliveries of a repair in flight at once (one relay round trip each
  would make a repair of 20,000 take minutes); the stub orders them (by link seq, or by
  ``gapseq``). The first that fails ends the repair with 450: the stub asks again from
  where it got to (a transient code is not a loss for it).
- **A bounded number at once** (:class:`Repairs`): :data:`RUNNING` repairs redeliver at
  a time per pod, :data:`WAITING` more may wait for their turn; beyond that a request is
  refused with 450 at once (the stub asks again after its repair timeout).
- **Refusals found while repairing** (the link context gone, the position trimmed)
  are replied from the task, with the request's transID, as the operation's own
  refusals are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final

from redis.exceptions import RedisError

from apexmesh.aio.tasks import stop_tasks
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.store.robust_reads import BeyondRetention, LinkGone
from services.pubsub.robust_serving import ReplySender

_log = logging.getLogger(__name__)

#: Redeliveries of one repair in flight at once.
WINDOW: Final = 32
#: Repairs redelivering at once on one pod.
RUNNING: Final = 16
#: Repairs waiting for their turn on one pod before new ones are refused (450).
WAITING: Final = 1_000

#: ``send()``: one redelivery; raises ApexError when the relays did not take it.
Send = Callable[[], Awaitable[None]]


class Redeliveries:
    """The redeliveries of one repair, at most ``window`` in flight; use as ``async
    with``: leaving it waits for those in flight (or cancels them on an error)."""

    def __init__(self, window: int = WINDOW) -> None:
        self._room = asyncio.Semaphore(window)
        self._flying: set[asyncio.Task[None]] = set()
        self._failed: BaseException | None = None
        #: Redeliveries sent so far.
        self.sent = 0

    async def __aenter__(self) -> Redeliveries:
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            while self._flying and self._failed is None:
                await asyncio.wait(set(self._flying), return_when=asyncio.FIRST_COMPLETED)
        await stop_tasks(tuple(self._flying))
        if exc is None and self._failed is not None:
            raise self._failed

    @property
    def failed(self) -> bool:
        """Whether a redelivery failed (the repair ends with its error)."""
        return self._failed is not None

    async def put(self, send: Send) -> None:
        """Start ``send`` once one of the window is free; raises the first failure."""
        if self._failed is not None:
            raise self._failed
        await self._room.acquire()
        if self._failed is not None:
            self._room.release()
            raise self._failed
        task = asyncio.create_task(self._one(send), name="robust-redelivery")
        self._flying.add(task)
        self.sent += 1

    async def _one(self, send: Send) -> None:
        try:
            await send()
        except Exception as exc:  # noqa: BLE001 - kept, raised by put or the exit
            if self._failed is None:
                self._failed = exc
        finally:
            self._room.release()
            self._flying.discard(asyncio.current_task())


class Repairs:
    """The repairs running on one pod."""

    def __init__(
        self, reply: ReplySender, *, running: int = RUNNING, waiting: int = WAITING
    ) -> None:
        self._reply = reply
        self._turns = asyncio.Semaphore(running)
        self._limit = running + waiting
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def active(self) -> int:
        """Repairs running or waiting for their turn."""
        return len(self._tasks)

    def start(
        self,
        domain: str,
        requester: Endpoint,
        trans_id: int,
        repair: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        """Run ``repair()`` in its turn; its refusal (ApexError, a link context gone, a
        range beyond retention, the store unreachable) is replied to ``requester``.
        Raises ApexError (450) when too many wait already."""
        if len(self._tasks) >= self._limit:
            raise ApexError(
                ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "too many repairs", trans_id=trans_id
            )
        task = asyncio.create_task(
            self._run(domain, requester, trans_id, repair), name="robust-repair"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(
        self,
        domain: str,
        requester: Endpoint,
        trans_id: int,
        repair: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        code, text = ApexReplyCode.SUCCESS, ""
        try:
            async with self._turns:
                await repair()
        except LinkGone:
            code, text = ApexReplyCode.ACTION_NOT_TAKEN, "link context gone"
        except BeyondRetention:
            code, text = ApexReplyCode.ACTION_NOT_TAKEN, "range beyond retention"
        except ApexError as exc:
            code, text = exc.code, str(exc)[:200]
        except (RedisError, OSError) as exc:
            _log.warning("robust repair %d for %s: %s", trans_id, requester, exc)
            code, text = ApexReplyCode.ACTION_ABORTED, "pubsub store unavailable"
        if code != ApexReplyCode.SUCCESS:
            await self._refuse(domain, requester, trans_id, code, text)

    async def _refuse(
        self, domain: str, requester: Endpoint, trans_id: int, code: int, text: str
    ) -> None:
        try:
            await self._reply(domain, requester, int(code), trans_id, text)
        except (ApexError, RedisError, OSError) as exc:  # the stub asks again anyway
            _log.warning("robust repair %d: refusal to %s not sent: %s", trans_id, requester, exc)

    async def aclose(self) -> None:
        await stop_tasks(tuple(self._tasks))


__all__ = ["RUNNING", "WAITING", "WINDOW", "Redeliveries", "Repairs", "Send"]
