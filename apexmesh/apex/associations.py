"""Attachments and bindings made over one APEX channel (RFC 3340 sections 4.4.1-4.4.3).

Transaction identifiers of attach and bind "are meaningful only during the lifetime of a
BEEP channel" (section 6.1.1), so each APEX channel keeps its own table: a transID in use
by an unterminated operation cannot be reused (555, steps 4.4.1.1 and 4.4.2.1), terminate
names one by transID (550 when unknown, step 4.4.3.2) or all of them with transID 0
(step 4.4.3.1). Pure bookkeeping: the relay does the I/O around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError


@dataclass(frozen=True, slots=True)
class Attachment:
    """An endpoint attached over the channel."""

    trans_id: int
    endpoint: Endpoint


@dataclass(frozen=True, slots=True)
class Binding:
    """An administrative domain a peer relay bound as over the channel."""

    trans_id: int
    domain: str


Association = Attachment | Binding


@dataclass(slots=True)
class Associations:
    """The unterminated attach and bind operations of one APEX channel."""

    _by_trans_id: dict[int, Association] = field(default_factory=dict)
    _pending: set[int] = field(default_factory=set)
    #: The endpoints of ``_by_trans_id``'s attachments (asked for every data received).
    _attached: set[Endpoint] = field(default_factory=set)

    def begin(self, trans_id: int) -> None:
        """Reserve ``trans_id`` for an attach or bind being processed (555 if in use)."""
        if trans_id in self._by_trans_id or trans_id in self._pending:
            raise ApexError(
                ApexReplyCode.TRANSACTION_IN_PROGRESS,
                f"transaction {trans_id} already in progress",
                trans_id=trans_id,
            )
        self._pending.add(trans_id)

    def complete(self, association: Association) -> None:
        """The operation begun with ``begin`` succeeded."""
        self._pending.discard(association.trans_id)
        self._by_trans_id[association.trans_id] = association
        if isinstance(association, Attachment):
            self._attached.add(association.endpoint)

    def abandon(self, trans_id: int) -> None:
        """The operation begun with ``begin`` failed; its transID is free again."""
        self._pending.discard(trans_id)

    def terminate(self, trans_id: int) -> tuple[Association, ...]:
        """Remove and return what ``trans_id`` names (all for 0); 550 when unknown."""
        if trans_id == 0:
            everything = tuple(self._by_trans_id.values())
            self._by_trans_id.clear()
            self._attached.clear()
            return everything
        association = self._by_trans_id.pop(trans_id, None)
        if association is None:
            raise ApexError(
                ApexReplyCode.ACTION_NOT_TAKEN, "unknown transaction-identifier", trans_id=trans_id
            )
        self._forget(association)
        return (association,)

    def remove(self, association: Association) -> None:
        """Forget an association the relay itself ended (relay-initiated terminate)."""
        if self._by_trans_id.get(association.trans_id) == association:
            del self._by_trans_id[association.trans_id]
            self._forget(association)

    def _forget(self, association: Association) -> None:
        if isinstance(association, Attachment) and self.attachment_of(association.endpoint) is None:
            self._attached.discard(association.endpoint)

    def attached(self, endpoint: Endpoint) -> bool:
        """True when ``endpoint`` is attached over this channel."""
        return endpoint in self._attached

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """Endpoints attached over this channel."""
        return tuple(a.endpoint for a in self._by_trans_id.values() if isinstance(a, Attachment))

    @property
    def domains(self) -> tuple[str, ...]:
        """Domains bound over this channel."""
        return tuple(a.domain for a in self._by_trans_id.values() if isinstance(a, Binding))

    def attachment_of(self, endpoint: Endpoint) -> Attachment | None:
        """The attachment of ``endpoint`` over this channel, if any."""
        for association in self._by_trans_id.values():
            if isinstance(association, Attachment) and association.endpoint == endpoint:
                return association
        return None

    def __len__(self) -> int:
        return len(self._by_trans_id)
