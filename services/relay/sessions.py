"""The BEEP sessions of one relay pod, as operators see them, and its drain.

Every accepted connection is registered here with an id (unique in the pod's life), the
listener it came through (apex-edge or apex-mesh) and when it opened. The admin API
lists them with their peer, TLS, authenticated identity, channels and the attachments
made over them, and closes one on request.

Drain (``POST /admin/v1/drain``, the chart's preStop hook): the listeners stop
accepting, readiness turns false (the Service stops sending new sessions here), and
sessions already open go on until their endpoints leave or the pod is stopped.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from apexmesh.aio import BeepConnection
from apexmesh.beep import events as ev
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


class Sessions:
    """The pod's sessions (see the module docstring)."""

    def __init__(self, failures: AuthFailures, on_count: Callable[[int], None]) -> None:
        self._failures = failures
        self._on_count = on_count
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
        conn.on_auth_failed = self._auth_failed
        self._on_count(1)

        def gone(_: object) -> None:
            if self._records.pop(record.id, None) is not None:
                self._on_count(-1)

        conn.closed.add_done_callback(gone)

    def _auth_failed(self, conn: BeepConnection, event: ev.AuthenticationFailed) -> None:
        self._failures.record(event.mechanism, conn.peer_address, f"reply code {event.code}")

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
