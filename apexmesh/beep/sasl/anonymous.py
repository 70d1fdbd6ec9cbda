"""The ANONYMOUS SASL mechanism (RFC 4505).

The client sends one message: an optional trace string (RFC 4505 section 2: 0 to 255
UTF-8 characters, an e-mail address or any other token), which the server may log but
must not treat as an identity. The authenticated identity is always ``anonymous``.
Whether anonymous access is acceptable at all is the session's policy, not this module's.
"""

from __future__ import annotations

from typing import Final

from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.sasl.mechanism import SaslError, ServerStep

NAME: Final = "ANONYMOUS"

#: The identity every ANONYMOUS client authenticates as.
ANONYMOUS_IDENTITY: Final = "anonymous"

#: RFC 4505 section 3: ``message = [ email / token ]`` of at most 255 UTF-8 characters.
MAX_TRACE_CHARS: Final = 255


class AnonymousServer:
    """Server side: accepts any well-formed trace in one step."""

    def __init__(self) -> None:
        self.trace: str | None = None
        #: ANONYMOUS claims no identity (the trace is not one, RFC 4505 section 2).
        self.claimed_identity: str | None = None

    def step(self, response: bytes | None) -> ServerStep:
        if response is None:
            # No initial response: ask for it with an empty challenge (RFC 4422 3.3).
            return ServerStep(data=b"", complete=False)
        try:
            trace = response.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError(ReplyCode.PARAMETER_SYNTAX_ERROR, "trace is not UTF-8") from None
        if len(trace) > MAX_TRACE_CHARS:
            raise SaslError(ReplyCode.PARAMETER_SYNTAX_ERROR, "trace longer than 255 chars")
        self.trace = trace
        return ServerStep(data=None, complete=True, authcid=ANONYMOUS_IDENTITY)


class AnonymousClient:
    """Client side: sends the trace as the initial response."""

    def __init__(self, trace: str | None = None) -> None:
        self._trace = trace or ""
        if len(self._trace) > MAX_TRACE_CHARS:
            raise ValueError("an ANONYMOUS trace is at most 255 characters (RFC 4505)")

    def initial_response(self) -> bytes | None:
        return self._trace.encode("utf-8")

    def step(self, challenge: bytes) -> bytes:
        raise SaslError(
            ReplyCode.PARAMETER_SYNTAX_ERROR,
            f"ANONYMOUS has no challenges ({len(challenge)} octets)",
        )

    def verify_success(self, data: bytes | None) -> None:
        if data:
            raise SaslError(ReplyCode.PARAMETER_SYNTAX_ERROR, "unexpected data with success")


__all__ = ["ANONYMOUS_IDENTITY", "MAX_TRACE_CHARS", "NAME", "AnonymousClient", "AnonymousServer"]
