"""The SCRAM-SHA-256 SASL mechanism (RFC 7677, on RFC 5802), via the scramp library.

Client-first: client-first-message as the initial response, server-first-message as the
one challenge, client-final-message as the second response, and the server-final-message
(``v=`` server signature) as additional data with success (RFC 5802 section 5, RFC 4422
section 3.6), which the client checks. The server holds only the salted verifier
(:class:`~apexmesh.beep.sasl.credentials.ScramKeys`), never the password.

Not supported: channel binding (SCRAM-SHA-256-PLUS; clients send gs2 flag ``n``) and an
authzid in the gs2-header (scramp rejects it), so SCRAM yields no authorization identity.
An unknown user gets a simulated exchange that fails at the proof (RFC 5802 section 9),
so the server-first message does not reveal which users exist.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any, Final

from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.sasl.credentials import SCRAM_ITERATIONS, SCRAM_MECHANISM, CredentialStore
from apexmesh.beep.sasl.mechanism import SaslError, ServerStep

NAME: Final = SCRAM_MECHANISM

#: scramp raises these on malformed peer messages besides ScramException (it is
#: third-party code; the list is the set its parsers can raise on hostile input).
_PARSE_ERRORS: Final = (ValueError, KeyError, IndexError, TypeError)


def _scramp() -> Any:
    # Imported on first use: scramp imports ssl (and so socket) for TLS channel binding,
    # which this sans-I/O package must not drag in for sessions that never use SCRAM.
    import scramp

    return scramp


def _scramp_errors() -> tuple[type[Exception], ...]:
    return (_scramp().ScramException, *_PARSE_ERRORS)


#: Keys the simulated salts of unknown users; fresh per process, never leaves it.
_SIMULATION_KEY: Final = secrets.token_bytes(32)


def _error_name(exc: Exception) -> str | None:
    server_error: Any = getattr(exc, "server_error", None)
    return None if server_error is None else str(server_error.value)


def _decode(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError(ReplyCode.PARAMETER_SYNTAX_ERROR, "SCRAM message is not UTF-8") from None


class ScramSha256Server:
    """Server side of SCRAM-SHA-256: server-first challenge, proof check, server-final."""

    def __init__(self, credentials: CredentialStore, *, nonce: str | None = None) -> None:
        self._credentials = credentials
        self._username: str | None = None
        self._known = False
        self.claimed_identity: str | None = None
        self._stage = 0
        self._server = (
            _scramp().ScramMechanism(SCRAM_MECHANISM).make_server(self._auth_info, s_nonce=nonce)
        )

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        self._username = username
        self.claimed_identity = username
        keys = self._credentials.scram_keys(username)
        if keys is None:
            # Simulate a user (RFC 5802 section 9): random keys never match a proof, and
            # the salt is stable per name so asking twice does not give the game away.
            return (
                hmac.new(_SIMULATION_KEY, username.encode("utf-8"), "sha256").digest()[:16],
                secrets.token_bytes(32),
                secrets.token_bytes(32),
                SCRAM_ITERATIONS,
            )
        self._known = True
        return keys.salt, keys.stored_key, keys.server_key, keys.iterations

    def step(self, response: bytes | None) -> ServerStep:
        if response is None:
            return ServerStep(data=b"", complete=False)  # ask for client-first
        text = _decode(response)
        if self._stage == 0:
            self._stage = 1
            try:
                self._server.set_client_first(text)
                return ServerStep(data=self._server.get_server_first().encode(), complete=False)
            except _scramp_errors() as exc:
                raise SaslError(
                    ReplyCode.PARAMETER_SYNTAX_ERROR, "malformed client-first-message"
                ) from exc
        if self._stage != 1:
            raise SaslError(ReplyCode.PARAMETER_SYNTAX_ERROR, "SCRAM exchange already over")
        self._stage = 2
        try:
            self._server.set_client_final(text)
            final = self._server.get_server_final()
        except _scramp_errors() as exc:
            if _error_name(exc) == "invalid-proof":
                raise SaslError(ReplyCode.AUTH_FAILURE, "authentication failure") from exc
            raise SaslError(
                ReplyCode.PARAMETER_SYNTAX_ERROR, "malformed client-final-message"
            ) from exc
        if not self._known:
            raise SaslError(ReplyCode.AUTH_FAILURE, "authentication failure")
        return ServerStep(data=final.encode(), complete=True, authcid=self._username)


class ScramSha256Client:
    """Client side of SCRAM-SHA-256."""

    def __init__(
        self, *, authcid: str, password: str, authzid: str | None = None, nonce: str | None = None
    ) -> None:
        if authzid:
            raise ValueError("SCRAM-SHA-256 here carries no authzid (scramp rejects it)")
        self._client = _scramp().ScramClient([SCRAM_MECHANISM], authcid, password, c_nonce=nonce)
        self._stage = 0

    def initial_response(self) -> bytes | None:
        self._stage = 1
        return str(self._client.get_client_first()).encode("utf-8")

    def step(self, challenge: bytes) -> bytes:
        if self._stage != 1:
            raise SaslError(ReplyCode.PARAMETER_SYNTAX_ERROR, "unexpected SCRAM challenge")
        self._stage = 2
        try:
            self._client.set_server_first(_decode(challenge))
            return str(self._client.get_client_final()).encode("utf-8")
        except _scramp_errors() as exc:
            raise SaslError(
                ReplyCode.PARAMETER_SYNTAX_ERROR, "malformed server-first-message"
            ) from exc

    def verify_success(self, data: bytes | None) -> None:
        if self._stage != 2 or data is None:
            raise SaslError(ReplyCode.AUTH_FAILURE, "success without a server signature")
        self._stage = 3
        try:
            self._client.set_server_final(_decode(data))
        except _scramp_errors() as exc:
            raise SaslError(
                ReplyCode.AUTH_FAILURE, "server signature wrong: the server is not authentic"
            ) from exc


__all__ = ["NAME", "ScramSha256Client", "ScramSha256Server"]
