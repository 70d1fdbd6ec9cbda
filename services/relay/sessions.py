"""The BEEP sessions of one relay pod, as operators see them, and its drain.

Every accepted connection is registered here with an id (unique in the pod's life), the
listener it came through (apex-edge or apex-mesh) and when it opened. The admin API
lists them with their peer, TLS, authenticated identity, channels and the attachments
made over them, and closes one on request.

Failed SASL authentications (RFC 4422 section 6.2) are counted and logged
(:class:`~apexmesh.ops.audit.AuthFailures`) and slowed down by the throttle's policy
(:mod:`apexmesh.beep.sasl.throttle`): the failure's answer is held (and the session reads
nothing) for a delay that grows with the failures of its peer address and of the claimed
identity; at the throttle's maximum the session is released with 421; and a SASL start
from an address past the throttle's limit is refused with 421 before any credential is
checked. Each exchange comes from the relay's :class:`~apexmesh.beep.sasl.SaslServers`
for its connection (DIGEST-MD5 then also accepts the address the session was made to).

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
from apexmesh.beep.sasl import RefusedServerExchange, SaslServers
from apexmesh.beep.sasl.throttle import FailureThrottle
from apexmesh.beep.tuning import SaslServer
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
    #: Its last SASL start was refused by the throttle (not a failure of its own).
    refused: bool = False


class Sessions:
    """The pod's sessions (see the module docstring)."""

    def __init__(
        self,
        failures: AuthFailures,
        on_count: Callable[[int], None],
        *,
        throttle: FailureThrottle | None = None,
        sasl: SaslServers | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._failures = failures
        self._on_count = on_count
        self._throttle = throttle
        self._sasl = sasl
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
        if self._sasl is not None:
            conn.sasl_servers = functools.partial(self._sasl_server, record)
        self._on_count(1)

        def gone(_: object) -> None:
            if self._records.pop(record.id, None) is not None:
                self._on_count(-1)

        conn.closed.add_done_callback(gone)

    def _sasl_server(
        self, record: SessionRecord, conn: BeepConnection, mechanism: str, tls_active: bool
    ) -> SaslServer | None:
        """The exchange of a SASL start on ``conn``: refused unchecked while its address
        is past the throttle's limit, else built for this connection."""
        assert self._sasl is not None  # noqa: S101  (installed only with one)
        refusal = None
        if self._throttle is not None:
            refusal = self._throttle.admit(_host(conn.peer_address), self._clock())
        if refusal is not None:
            record.refused = True
            return RefusedServerExchange(mechanism, refusal.code, refusal.text)
        return self._sasl.exchange(mechanism, tls_active, local_host=_host(conn.local_address))

    def _auth_failed(
        self, record: SessionRecord, conn: BeepConnection, event: ev.AuthenticationFailed
    ) -> None:
        """Count and log the failure, hold its answer, and release the session (421)
        when the throttle says so or refused the exchange."""
        reason = f"reply code {event.code}" + (f", {event.text}" if event.text else "")
        if record.refused:
            record.refused = False
            self._failures.record(event.mechanism, conn.peer_address, f"{reason}; refused")
            self._release(conn, 0.0)
            return
        record.auth_failures += 1
        if self._throttle is None:
            self._failures.record(event.mechanism, conn.peer_address, reason)
            return
        verdict = self._throttle.failed(
            _host(conn.peer_address), record.auth_failures, self._clock(), event.identity
        )
        action = "session closed" if verdict.close else "session held"
        self._failures.record(
            event.mechanism,
            conn.peer_address,
            f"{reason}; {verdict.failures} recent failures, answer held "
            f"{verdict.delay:.2f} s, {action}",
        )
        conn.hold(verdict.delay)  # the answer waits: it is still in the session's output
        if verdict.close:
            self._release(conn, verdict.delay)

    def _release(self, conn: BeepConnection, after: float) -> None:
        """Release ``conn`` with 421 once its held answer has gone (``after`` s)."""

        async def release() -> None:
            await asyncio.sleep(after)
            await conn.close(ReplyCode.SERVICE_NOT_AVAILABLE, timeout=2.0)

        task = asyncio.get_running_loop().create_task(release())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

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

    def stop_draining(self) -> None:
        """The drain was undone: accepting sessions again, ready."""
        self.draining = False
        self.drain_started = 0.0


def _host(address: object) -> str:
    """The host part of a socket address (a Unix socket's path as it is)."""
    return str(address[0]) if isinstance(address, tuple) and address else str(address)


__all__ = ["SessionRecord", "Sessions"]
