"""What every SASL mechanism looks like to the BEEP SASL profile (RFC 4422 section 3).

A mechanism is a small sans-I/O state machine: the server side is fed the client's
responses and answers with a challenge, with success (optionally carrying "additional data
with success", RFC 4422 section 3.6) or by raising :class:`SaslError`; the client side is
fed the server's challenges and answers with responses. No mechanism here negotiates a
security layer (RFC 4422 section 3.7): every one authenticates only.

:class:`SaslError` never leaves this package: :mod:`apexmesh.beep.sasl.profile` turns it
into the ``<error code='...'>`` element RFC 3080 section 4.1 prescribes.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from apexmesh.beep.codes import ReplyCode


class SaslError(Exception):
    """An exchange failed; ``code`` is the RFC 3080 section 8 reply code for the peer."""

    def __init__(self, code: ReplyCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ServerStep:
    """The server mechanism's answer to one client response."""

    #: Challenge octets to send (``complete`` False), or additional data with success
    #: (``complete`` True; None when there is none).
    data: bytes | None
    #: True when the client is authenticated and the exchange is over.
    complete: bool
    #: The authentication identity (authcid), set when ``complete``.
    authcid: str | None = None
    #: The requested authorization identity (authzid), or None when the client sent none.
    authzid: str | None = None


class ServerMechanism(Protocol):
    """Server side of one mechanism, for one exchange."""

    #: The authentication identity the client claimed, once the exchange has read it,
    #: whether or not it exists and whether or not the exchange then succeeds (the
    #: guessing throttle counts failures per claimed identity); None before, or for a
    #: mechanism without one (ANONYMOUS).
    claimed_identity: str | None

    def step(self, response: bytes | None) -> ServerStep:
        """Consume the client's next response (None: no initial response was sent).

        Raises :class:`SaslError` when the exchange fails; the mechanism is then unusable.
        """
        ...


class ClientMechanism(Protocol):
    """Client side of one mechanism, for one exchange."""

    def initial_response(self) -> bytes | None:
        """The initial response (RFC 4422 section 3.3), or None for server-first mechanisms."""
        ...

    def step(self, challenge: bytes) -> bytes:
        """Answer one server challenge. Raises :class:`SaslError` on a bad challenge."""
        ...

    def verify_success(self, data: bytes | None) -> None:
        """Check the server's additional data with success (RFC 4422 section 3.6).

        Raises :class:`SaslError` (535) when the server failed to prove itself.
        """
        ...


__all__ = ["ClientMechanism", "SaslError", "ServerMechanism", "ServerStep"]
