"""The presence service's state machine (RFC 3343 section 4), sans I/O.

:class:`PresenceCore` holds the presence entries and the in-progress subscribe and watch
operations of the domains it serves, and turns each operation into the elements the
service sends (:class:`Outbound`, in the order they must be sent). Time is always passed
in (``now``): the core reads no clock, and :meth:`PresenceCore.handle_timer` ends the
operations whose duration is over, as aioquic's ``handle_timer(now)`` does.

Steps 1 and 2 of sections 4.2-4.4 (domain, valid endpoint) are :meth:`check_subject`;
step 3/4 (the ``presence:*`` token) needs the access service, so the caller checks it
between :meth:`check_subject` and the operation itself. The caller persists what changed
(:meth:`take_changes`) before sending anything, so a restarted service resumes with every
entry and subscription it acknowledged (section 4: "must maintain information about
both presence entries and in-progress operations in persistent storage").

Readings of the RFC, written down here and in docs/presence.md:

- Section 3: every endpoint of a domain has an entry, "regardless of whether those
  endpoints are currently attached". An endpoint nobody published for has the default
  entry (:func:`default_entry`): one tuple, its ``apex:`` destination, available until
  (and last updated at) :data:`NEVER`. A ``subscribe`` is therefore always answered with
  a ``publish`` (section 4.2 step 6.1).
- Section 4.4 step 5: the ``lastUpdate`` of a ``publish`` must be semantically identical
  to the entry's (the default entry's is :data:`NEVER`); an application retrieves the
  entry first (section 2.2: "usually ... subscribing with a zero-valued duration").
- Section 4.5 step 1: a ``terminate`` for an unknown transID is answered with an
  ``error`` element (RFC 3340's DTD: code and text, no transID), as the text says;
  every other refusal is a ``reply`` with the transID (section 4.7).
- Removing the last tuple removes the entry (the subject falls back to the default);
  subscribers are then sent nothing. The mesh's own tuples are never removed this way:
  a detached endpoint keeps its tuple with ``availableUntil`` set to the detach time.
- The 256-tuple bound of :data:`~apexmesh.apex.presence.MAX_TUPLES` applies to what an
  application publishes; the mesh's own tuples (one per topic of a pubsub service) are
  not bounded by it, and are kept and stored one by one.
- Tuple destinations that are ``apex:`` URIs are compared with their URL encoding
  reversed (RFC 3340 section 2.2.1): :func:`destination_key`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Literal

from apexmesh.apex import _dtd
from apexmesh.apex.access import is_valid_owner
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Error, Reply, Terminate
from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.apex.errors import ApexError
from apexmesh.apex.presence import (
    Notify,
    Presence,
    PresenceTuple,
    Publish,
    Subscribe,
    Watch,
    check_timestamp,
    format_time,
    same_instant,
)

#: Section 4.4 step 1: the publisher of ``publish`` and ``presence`` differ. RFC 3343
#: names 503, which RFC 3340 section 10 does not register; it is sent as a number.
PUBLISHER_MISMATCH: Final = 503

#: ``availableUntil`` of a tuple with no end ("until further notice"); RFC 3343's own
#: example uses a far-away date the same way (2525-12-31T23:59:59-08:00).
FOREVER: Final = "9999-12-31T23:59:59Z"

#: The destination URI the mesh publishes for an attached endpoint.
ATTACH_SCHEME: Final = "apex:"

#: ``lastUpdate`` (and ``availableUntil``) of the default entry of an endpoint nobody has
#: published for (section 3: every endpoint has an entry).
NEVER: Final = "1970-01-01T00:00:00Z"

Kind = Literal["subscribe", "watch"]


@dataclass(frozen=True, slots=True)
class Outbound:
    """One element the service sends to ``recipient`` as ``apex=presence@DOMAIN``."""

    recipient: Endpoint
    content: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class InProgress:
    """An in-progress subscribe or watch operation (durations > 0 only)."""

    kind: Kind
    originator: Endpoint
    subject: Endpoint
    trans_id: int
    duration: int
    #: When the duration is over and the service sends ``terminate``.
    expires: datetime

    @property
    def key(self) -> tuple[Endpoint, int]:
        return (self.originator, self.trans_id)


class UnknownTransactionError(ApexError):
    """Section 4.5 step 1: answered with an ``error`` element, not a ``reply``."""


@dataclass(slots=True)
class Changes:
    """What changed since the last :meth:`PresenceCore.take_changes`."""

    #: Subjects whose entry head (lastUpdate, publisherInfo, the application's tuples)
    #: was written or whose entry was removed (look it up in ``entries``).
    entries: set[Endpoint] = field(default_factory=set)
    #: The mesh's tuples written or removed, by (subject, destination key): stored one
    #: by one, so a pubsub service with 10,000 topics writes one tuple per change.
    tuples: set[tuple[Endpoint, str]] = field(default_factory=set)
    #: Operations added or removed, by (originator, transID).
    operations: set[tuple[Endpoint, int]] = field(default_factory=set)
    #: Endpoints added to or removed from the mesh-attached set.
    attached: set[Endpoint] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.entries or self.tuples or self.operations or self.attached)


def attach_destination(endpoint: Endpoint) -> str:
    """The tuple destination the mesh publishes for an attached endpoint."""
    return endpoint.to_uri()


def destination_key(destination: str) -> str:
    """The destination as tuples are compared: an ``apex:`` URI with its URL encoding
    reversed (RFC 3340 section 2.2.1), any other URI as it is."""
    if destination[:5].lower() != ATTACH_SCHEME:
        return destination
    try:
        return Endpoint.from_uri(destination).to_uri()
    except EndpointError:
        return destination


def default_entry(subject: Endpoint) -> Presence:
    """The entry of an endpoint nobody has published for (section 3)."""
    return Presence(
        publisher=subject,
        last_update=NEVER,
        tuples=(PresenceTuple(destination=attach_destination(subject), available_until=NEVER),),
    )


class PresenceCore:
    """Presence entries and in-progress operations of the served domains (section 4)."""

    def __init__(
        self,
        domains: Iterable[str],
        *,
        entries: Iterable[Presence] = (),
        mesh: dict[Endpoint, set[str]] | None = None,
        operations: Iterable[InProgress] = (),
        attached: Iterable[Endpoint] = (),
    ) -> None:
        self.domains = frozenset(domains)
        self.entries: dict[Endpoint, Presence] = {p.publisher: p for p in entries}
        #: Destination keys of the tuples the mesh keeps in each entry (attachments,
        #: services' tuples): an application's publish leaves them in place.
        self.mesh: dict[Endpoint, set[str]] = {s: set(d) for s, d in (mesh or {}).items()}
        #: Each entry's tuples by destination key, made on first use and kept current
        #: by set_tuples: a service's entry with 10,000 tuples changes in O(1) lookups.
        self._maps: dict[Endpoint, dict[str, PresenceTuple]] = {}
        self.operations: dict[tuple[Endpoint, int], InProgress] = {op.key: op for op in operations}
        #: Endpoints the mesh shows attached (relay reports; checked for lapsed leases).
        self.attached: set[Endpoint] = set(attached)
        self._changes = Changes()

    # ------------------------------------------------------------------ bookkeeping

    def take_changes(self) -> Changes:
        changes, self._changes = self._changes, Changes()
        return changes

    def _add(self, op: InProgress) -> None:
        self.operations[op.key] = op
        self._changes.operations.add(op.key)

    def _remove(self, key: tuple[Endpoint, int]) -> InProgress | None:
        op = self.operations.pop(key, None)
        if op is not None:
            self._changes.operations.add(key)
        return op

    def _set_entry(
        self,
        subject: Endpoint,
        entry: Presence | None,
        by_key: dict[str, PresenceTuple] | None = None,
    ) -> None:
        """Replace (or with None remove) ``subject``'s entry; ``by_key``: its tuples by
        destination key when the caller has them at hand."""
        if entry is None:
            self.entries.pop(subject, None)
            self._maps.pop(subject, None)
            for key in self.mesh.pop(subject, ()):
                self._changes.tuples.add((subject, key))
        else:
            self.entries[subject] = entry
            if by_key is None:
                self._maps.pop(subject, None)
            else:
                self._maps[subject] = by_key
        self._changes.entries.add(subject)

    def _map(self, subject: Endpoint) -> dict[str, PresenceTuple]:
        by_key = self._maps.get(subject)
        if by_key is None:
            entry = self.entries.get(subject)
            tuples = () if entry is None else entry.tuples
            by_key = self._maps[subject] = {destination_key(t.destination): t for t in tuples}
        return by_key

    def tuple_of(self, subject: Endpoint, key: str) -> PresenceTuple | None:
        """The tuple of ``subject``'s entry for a destination key, if any."""
        return self._map(subject).get(key) if subject in self.entries else None

    def application_tuples(self, subject: Endpoint) -> list[PresenceTuple]:
        """The tuples of ``subject``'s entry that applications published."""
        by_key = self._map(subject)
        keys = self.mesh.get(subject, set())
        if len(keys) == len(by_key):  # the mesh's keys are always among the entry's
            return []
        return [t for key, t in by_key.items() if key not in keys]

    def entry_of(self, subject: Endpoint) -> Presence:
        """The subject's entry, or its default entry (section 3)."""
        return self.entries.get(subject) or default_entry(subject)

    def mesh_tuples(self, subject: Endpoint) -> list[PresenceTuple]:
        """The tuples of ``subject``'s entry that the mesh keeps."""
        keys = self.mesh.get(subject)
        if not keys or subject not in self.entries:
            return []
        by_key = self._map(subject)
        return [by_key[key] for key in keys if key in by_key]

    def of_kind(self, kind: Kind, subject: Endpoint) -> list[InProgress]:
        return [op for op in self.operations.values() if op.kind == kind and op.subject == subject]

    def get_timer(self) -> datetime | None:
        """When :meth:`handle_timer` must next be called (None: no operation runs)."""
        return min((op.expires for op in self.operations.values()), default=None)

    # ------------------------------------------------------------------ steps 1 and 2

    def check_subject(self, subject: Endpoint, trans_id: int | None = None) -> None:
        """Steps 1 and 2 of sections 4.2-4.4: 553 outside the served domains, 550 for an
        endpoint that cannot exist (an unregistered ``apex=`` service)."""
        if subject.domain not in self.domains:
            _dtd.fail(
                f"{subject} is outside this administrative domain",
                ApexReplyCode.PARAMETER_INVALID,
                trans_id=trans_id,
            )
        if not is_valid_owner(subject):
            _dtd.fail(
                f"{subject} is not a valid endpoint",
                ApexReplyCode.ACTION_NOT_TAKEN,
                trans_id=trans_id,
            )

    # ------------------------------------------------------------------ operations

    def _check_trans_id(self, originator: Endpoint, trans_id: int) -> None:
        if (originator, trans_id) in self.operations:
            _dtd.fail(
                f"transID {trans_id} is in progress",
                ApexReplyCode.TRANSACTION_IN_PROGRESS,
                trans_id=trans_id,
            )

    def _publish_to(
        self, op_trans_id: int, recipient: Endpoint, entry: Presence, now: datetime
    ) -> Outbound:
        publish = Publish(
            publisher=entry.publisher,
            trans_id=op_trans_id,
            time_stamp=format_time(now),
            presence=entry,
        )
        return Outbound(recipient, publish.to_xml())

    def _notify_watchers(
        self,
        subject: Endpoint,
        subscriber: Endpoint,
        duration: int,
        action: Literal["subscribe", "terminate"],
    ) -> list[Outbound]:
        return [
            Outbound(
                watch.originator,
                Notify(
                    subscriber=subscriber,
                    trans_id=watch.trans_id,
                    duration=duration if action == "subscribe" else 0,
                    action=action,
                ).to_xml(),
            )
            for watch in self.of_kind("watch", subject)
        ]

    def subscribe(self, originator: Endpoint, op: Subscribe, now: datetime) -> list[Outbound]:
        """Steps 4-6 of section 4.2 (the caller did steps 1-3)."""
        for previous in self.of_kind("subscribe", op.publisher):
            if previous.originator == originator:
                self._remove(previous.key)  # step 4: silently terminated
        self._check_trans_id(originator, op.trans_id)  # step 5
        # step 6.1: the entry, the default one when nobody has published (section 3)
        out = [self._publish_to(op.trans_id, originator, self.entry_of(op.publisher), now)]
        out += self._notify_watchers(op.publisher, originator, op.duration, "subscribe")
        if op.duration:
            self._add(
                InProgress(
                    kind="subscribe",
                    originator=originator,
                    subject=op.publisher,
                    trans_id=op.trans_id,
                    duration=op.duration,
                    expires=now + timedelta(seconds=op.duration),
                )
            )
        return out

    def watch(self, originator: Endpoint, op: Watch, now: datetime) -> list[Outbound]:
        """Steps 4-6 of section 4.3 (the caller did steps 1-3)."""
        for previous in self.of_kind("watch", op.publisher):
            if previous.originator == originator:
                self._remove(previous.key)  # step 4
        self._check_trans_id(originator, op.trans_id)  # step 5
        out = [Outbound(originator, Reply(code=250, trans_id=op.trans_id).to_xml())]
        for sub in self.of_kind("subscribe", op.publisher):
            notify = Notify(subscriber=sub.originator, trans_id=op.trans_id, duration=sub.duration)
            out.append(Outbound(originator, notify.to_xml()))
        if op.duration:
            self._add(
                InProgress(
                    kind="watch",
                    originator=originator,
                    subject=op.publisher,
                    trans_id=op.trans_id,
                    duration=op.duration,
                    expires=now + timedelta(seconds=op.duration),
                )
            )
        return out

    def check_publisher(self, op: Publish) -> Reply | None:
        """Step 1 of section 4.4: 503 when the two publisher attributes differ."""
        if op.publisher != op.presence.publisher:
            return Reply(
                code=PUBLISHER_MISMATCH,
                trans_id=op.trans_id,
                text="publisher of publish and presence differ",
            )
        return None

    def _stamp(self, subject: Endpoint, now: datetime) -> str:
        """Step 6.2: the service's current time, strictly after the entry's lastUpdate."""
        previous = self.entries.get(subject)
        if previous is not None:
            last = check_timestamp(previous.last_update, "presence lastUpdate")
            if now <= last:
                now = last + timedelta(microseconds=1)
        return format_time(now)

    def _changed(self, subject: Endpoint, now: datetime) -> list[Outbound]:
        """Section 4.2 step 6.3: the new entry to every subscriber of ``subject``."""
        entry = self.entries.get(subject)
        if entry is None:
            return []
        return [
            self._publish_to(sub.trans_id, sub.originator, entry, now)
            for sub in self.of_kind("subscribe", subject)
        ]

    def publish(self, originator: Endpoint, op: Publish, now: datetime) -> list[Outbound]:
        """Steps 5-6 of section 4.4 (the caller did steps 1-4).

        Step 5: ``lastUpdate`` must be semantically identical to the entry's (the default
        entry's :data:`NEVER` when there is none). The mesh's tuples stay in the entry; a
        published tuple for a destination the mesh keeps is the mesh's (docs/presence.md).
        """
        current = self.entry_of(op.publisher)
        if not same_instant(current.last_update, op.presence.last_update):
            _dtd.fail(
                "lastUpdate differs from the entry's: retrieve the entry first",
                ApexReplyCode.TRANSACTION_IN_PROGRESS,
                trans_id=op.trans_id,
            )
        keys = self.mesh.get(op.publisher, set())
        own = [t for t in op.presence.tuples if destination_key(t.destination) not in keys]
        stamp = self._stamp(op.publisher, now)
        tuples = (*own, *self.mesh_tuples(op.publisher))
        if not tuples:  # nothing of the application's, nothing of the mesh's
            self._set_entry(op.publisher, None)
        else:
            entry = dataclasses.replace(op.presence, last_update=stamp, tuples=tuples)
            self._set_entry(op.publisher, entry)
        out = [Outbound(originator, Reply(code=250, trans_id=op.trans_id).to_xml())]
        return out + self._changed(op.publisher, now)

    def terminate(self, originator: Endpoint, op: Terminate) -> list[Outbound]:
        """Section 4.5 (and the watchers' notice of section 4.3 step 6.3)."""
        found = self._remove((originator, op.trans_id))
        if found is None:
            raise UnknownTransactionError(
                ApexReplyCode.ACTION_NOT_TAKEN,
                f"transID {op.trans_id} is no subscribe or watch of yours",
                trans_id=op.trans_id or None,
            )
        out = [Outbound(originator, Reply(code=250, trans_id=op.trans_id).to_xml())]
        if found.kind == "subscribe":
            out += self._notify_watchers(found.subject, originator, 0, "terminate")
        return out

    # ------------------------------------------------------------------ time

    def handle_timer(self, now: datetime) -> list[Outbound]:
        """End every operation whose duration is over: ``terminate`` to its originator,
        and for a subscription a ``notify`` (terminate) to the subject's watchers."""
        out: list[Outbound] = []
        for op in sorted(self.operations.values(), key=lambda item: item.expires):
            if op.expires > now:
                break
            self._remove(op.key)
            out.append(Outbound(op.originator, Terminate(trans_id=op.trans_id).to_xml()))
            if op.kind == "subscribe":
                out += self._notify_watchers(op.subject, op.originator, 0, "terminate")
        return out

    # ------------------------------------------------------------------ the mesh's own tuples

    def set_tuples(
        self, publisher: Endpoint, tuples: Iterable[PresenceTuple], now: datetime
    ) -> list[Outbound]:
        """Add or replace the mesh's tuples (by destination); subscribers get the entry."""
        self.check_subject(publisher)
        new = {destination_key(item.destination): item for item in tuples}
        current = self.entries.get(publisher)
        by_key = self._map(publisher)
        by_key.update(new)
        entry = Presence(
            publisher=publisher,
            last_update=self._stamp(publisher, now),
            publisher_info="" if current is None else current.publisher_info,
            tuples=tuple(by_key.values()),
        )
        self._set_entry(publisher, entry, by_key)
        self.mesh.setdefault(publisher, set()).update(new)
        self._changes.tuples.update((publisher, key) for key in new)
        return self._changed(publisher, now)

    def remove_tuples(
        self, publisher: Endpoint, destinations: Iterable[str], now: datetime
    ) -> list[Outbound]:
        """Remove tuples by destination; the entry goes when its last tuple does."""
        self.check_subject(publisher)
        current = self.entries.get(publisher)
        gone = {destination_key(d) for d in destinations}
        if current is None or not any(
            destination_key(t.destination) in gone for t in current.tuples
        ):
            return []
        keys = self.mesh.get(publisher, set())
        self._changes.tuples.update((publisher, key) for key in gone & keys)
        keys -= gone
        kept = tuple(t for t in current.tuples if destination_key(t.destination) not in gone)
        if not kept:
            self._set_entry(publisher, None)
            return []
        entry = dataclasses.replace(current, tuples=kept, last_update=self._stamp(publisher, now))
        self._set_entry(publisher, entry)
        return self._changed(publisher, now)

    def endpoint_attached(self, endpoint: Endpoint, now: datetime) -> list[Outbound]:
        """A relay reports an attachment: the endpoint's ``apex:`` tuple, available until
        further notice."""
        self.check_subject(endpoint.base)
        self.attached.add(endpoint)
        self._changes.attached.add(endpoint)
        tuple_ = PresenceTuple(destination=attach_destination(endpoint), available_until=FOREVER)
        return self.set_tuples(endpoint.base, (tuple_,), now)

    def endpoint_detached(self, endpoint: Endpoint, now: datetime) -> list[Outbound]:
        """The attachment ended (or its lease lapsed): the tuple stays, available until
        ``now``, so subscribers see the endpoint leave."""
        if endpoint not in self.attached:
            return []
        self.attached.discard(endpoint)
        self._changes.attached.add(endpoint)
        tuple_ = PresenceTuple(
            destination=attach_destination(endpoint), available_until=format_time(now)
        )
        return self.set_tuples(endpoint.base, (tuple_,), now)


def error_reply(exc: ApexError) -> Reply:
    """The ``reply`` answering a refused operation (its transID when one was read)."""
    text = str(exc)
    return Reply(code=int(exc.code), trans_id=exc.trans_id, text=text[:200])


def refusal(exc: ApexError) -> bytes:
    """What answers a refused operation: an ``error`` element for an unknown transID of
    ``terminate`` (section 4.5 step 1), a ``reply`` with the transID otherwise."""
    if isinstance(exc, UnknownTransactionError):
        return Error(code=int(exc.code), text="unknown transaction-identifier").to_xml()
    return error_reply(exc).to_xml()


__all__ = [
    "ATTACH_SCHEME",
    "FOREVER",
    "PUBLISHER_MISMATCH",
    "NEVER",
    "Changes",
    "InProgress",
    "Kind",
    "Outbound",
    "PresenceCore",
    "UnknownTransactionError",
    "attach_destination",
    "default_entry",
    "destination_key",
    "error_reply",
    "refusal",
]
