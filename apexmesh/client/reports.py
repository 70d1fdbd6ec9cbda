"""The outcome of a data operation and its statusResponse collector (RFC 3340 sections
5.1 and 6.2).

A data operation sent with the statusRequest option asks "each applicable relay" to send
the originator a ``data`` from ``apex=report@<relay's domain>`` whose content is a
``statusResponse`` echoing the option's transID. :class:`SendResult` registers that
transID before the data leaves, so a report that overtakes the ``ok`` is not lost, and
collects every statusResponse carrying it until :meth:`SendResult.reports` has what the
caller asked for (or :meth:`SendResult.close`); reports arriving after that reach the
attachment's receive queue like any other data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from apexmesh.apex.report import StatusResponse
from apexmesh.client.errors import ApexClientError


class SendResult:
    """A data operation the relay accepted (it answered ``<ok />``, section 4.4.4.1)."""

    __slots__ = (
        "_collected",
        "_end",
        "_on_close",
        "_ready",
        "recipients",
        "status_trans_id",
        "timing_trans_id",
    )

    def __init__(
        self,
        *,
        recipients: tuple[str, ...],
        status_trans_id: int | None,
        timing_trans_id: int | None = None,
        on_close: Callable[[SendResult], None] | None = None,
    ) -> None:
        #: The recipients named by the data, as text.
        self.recipients = recipients
        #: transID of the statusRequest option, or None when none was requested.
        self.status_trans_id = status_trans_id
        #: transID of the dataTiming option (RFC 3342 section 2), whose final hop (250),
        #: timing error (550) and transient (350) reports are collected here too.
        self.timing_trans_id = timing_trans_id
        self._collected: list[StatusResponse] = []
        #: Made by the first reports() that must wait (most results are never asked).
        self._ready: asyncio.Event | None = None
        self._end: ApexClientError | None = None
        self._on_close = on_close

    @property
    def trans_ids(self) -> tuple[int, ...]:
        """The transIDs whose statusResponses this result collects."""
        return tuple(t for t in (self.status_trans_id, self.timing_trans_id) if t is not None)

    @property
    def collected(self) -> tuple[StatusResponse, ...]:
        """The statusResponses collected so far, in arrival order."""
        return tuple(self._collected)

    async def reports(
        self,
        count: int = 1,
        *,
        timeout: float | None = None,  # noqa: ASYNC109  (one bound over several reports)
    ) -> tuple[StatusResponse, ...]:
        """Wait until at least ``count`` statusResponses arrived, return them all and
        stop collecting. Raises TimeoutError after ``timeout`` seconds, the attachment's
        error if it ends first, ValueError when neither a statusRequest nor a dataTiming
        option was sent."""
        if not self.trans_ids:
            raise ValueError("this data was sent without a statusRequest or dataTiming option")
        async with asyncio.timeout(timeout):
            while len(self._collected) < count:
                if self._end is not None:
                    raise self._end
                if self._ready is None:
                    self._ready = asyncio.Event()
                self._ready.clear()
                await self._ready.wait()
        self.close()
        return tuple(self._collected)

    def close(self) -> None:
        """Stop collecting: later reports go to the attachment's receive queue."""
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close(self)

    def _deliver(self, response: StatusResponse) -> None:
        self._collected.append(response)
        if self._ready is not None:
            self._ready.set()

    def _fail(self, error: ApexClientError) -> None:
        self._end = error
        if self._ready is not None:
            self._ready.set()


__all__ = ["SendResult"]
