"""The BEEP sessions of one relay pod, as operators see them, and its drain.

Every accepted connection is registered here with an id (unique in the pod's life), the
listener it came through (apex-edge or apex-mesh) and when it opened. The admin API
lists them with their peer, TLS, authenticated identity, channels and the attachments
made over them, and closes one on request.

Failed SASL authentications (RFC 4422 section 6.2) are counted and logged
(:class:`~apexmesh.ops.audit.AuthFailures`) and slowed down: the session reads nothing for
the throttle's delay, which grows with each failure of the session or of its peer
address, and at the throttle's maximum the session is released with 421
(:mod:`apexmesh.beep.sasl.throttle`).

Drain (``POST /admin/v1/drain``, the chart's preStop hook): the listeners stop
accepting, readiness turns false (the Service stops sending new sessions here), and
sessions already open go on until their endpoints leave or the pod is stopped.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from apexmesh.aio import BeepConnection
from apexmesh.beep import events as ev
from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.sasl.throttle import FailureThrottle
from apexmesh.ops.audit import AuthFailures
from services.relay.edge import Mode


@dataclass(eq=False, slots=True)
class SessionRecord:
    """One BEEP session of this pod."""

    id: int
    conn: BeepConnection
    mode: Mode
    #: Seconds since the epoch.
    opened_at: float = field(default_factory=time.time)
    #: SASL exchanges this session failed.
    auth_failures: int = 0


class Sessions:
    """The pod's sessions (see the module docstring)."""

    def __init__(
        self,
        failures: AuthFailures,
        on_count: Callable[[int], None],
        *,
        throttle: FailureThrottle | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._failures = failures
        self._on_count = on_count
        self._throttle = throttle
        self._clock = clock
        self._closing: set[asyncio.Task[None]] = set()
        self._records: dict[int, SessionRecord] = {}
        self._ids = itertools.count(1)
        #: True once the pod is draining (no new sessions, not ready).
        self.draining = False
        #: When the drain began (seconds since the epoch), 0 when not draining.
        self.drain_started = 0.0

    def add(self, mode: Mode, conn: BeepConnection) -> None:
        """A listener accepted ``conn`` (the ``on_connection`` hook of a listener)."""
        record = SessionRecord(next(self._ids), conn, mode)
        self._records[record.id] = record
        conn.on_auth_failed = functools.partial(self._auth_failed, record)
        self._on_count(1)

        def gone(_: object) -> None:
            if self._records.pop(record.id, None) is not None:
                self._on_count(-1)

        conn.closed.add_done_callback(gone)

    def _auth_failed(
        self, record: SessionRecord, conn: BeepConnection, event: ev.AuthenticationFailed
    ) -> None:
        """Count and log the failure, then hold the session or release it (421)."""
        record.auth_failures += 1
        reason = f"reply code {event.code}" + (f", {event.text}" if event.text else "")
        if self._throttle is None:
            self._failures.record(event.mechanism, conn.peer_address, reason)
            return
        address = conn.peer_address
        host = str(address[0]) if isinstance(address, tuple) and address else str(address)
        verdict = self._throttle.failed(host, record.auth_failures, self._clock())
        action = "session closed" if verdict.close else f"session held {verdict.delay:.2f} s"
        self._failures.record(
            event.mechanism,
            address,
            f"{reason}; {verdict.failures} recent failures, {action}",
        )
        if verdict.close:
            task = asyncio.get_running_loop().create_task(
                conn.close(ReplyCode.SERVICE_NOT_AVAILABLE, timeout=2.0)
            )
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        else:
            conn.hold_reading(verdict.delay)

    def __iter__(self) -> Iterator[SessionRecord]:
        return iter(list(self._records.values()))

    def __len__(self) -> int:
        return len(self._records)

    def get(self, session_id: int) -> SessionRecord | None:
        return self._records.get(session_id)

    def connections(self) -> list[BeepConnection]:
        return [record.conn for record in self._records.values()]

    def start_draining(self) -> bool:
        """Mark the pod draining; False when it already was."""
        if self.draining:
            return False
        self.draining = True
        self.drain_started = time.time()
        return True


__all__ = ["SessionRecord", "Sessions"]
