"""The CRAM-MD5 SASL mechanism (RFC 2195), for peers that offer nothing better.

Server-first, one round: the server's challenge is a fresh string in the form of an RFC
822 msg-id, ``<random.digits@host>`` (RFC 2195 section 2); the client answers with its
user name, a space, and the HMAC-MD5 (RFC 2104) of the challenge keyed by its password,
as 32 lower-case hexadecimal digits. There is no additional data with success and no
authorization identity; the server does not prove itself. RFC 2195's own example: the
challenge ``<1896.697170952@postoffice.reston.mci.net>`` and the password
``tanstaaftanstaaf`` give ``tim b913a602c7eda7a495b4e6e7334d3890``.

What the server needs: the password (:meth:`CredentialStore.lookup`), which is the HMAC
key. RFC 2195 allows keeping the HMAC's two intermediate MD5 states instead, but those
are password-equivalent for this mechanism (whoever holds them answers any challenge)
and :mod:`hashlib` cannot resume MD5 from a stored state, so nothing is gained; a
deployment that wants no password on the server uses SCRAM-SHA-256 (stored keys only).
Because an eavesdropper who sees a challenge and its answer can test passwords offline
(RFC 2195 section 5), :mod:`apexmesh.beep.sasl.profile` refuses CRAM-MD5 without TLS
(538) unless a development run says otherwise, as it does PLAIN. The IANA registry marks
CRAM-MD5 "LIMITED" use: the relay offers it only when configured.

An unknown user is answered as a wrong password is, after the same HMAC computation
(against a key no password equals), so the answer does not tell who exists. Malformed
responses are 501; a wrong user or digest is 535. MD5 is required by the RFC, hence the
per-file S324 exemption in pyproject.toml.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Final

from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.sasl.credentials import CredentialStore
from apexmesh.beep.sasl.mechanism import SaslError, ServerStep

NAME: Final = "CRAM-MD5"

#: Longest response accepted: a user name of 255 octets, a space and 32 hex digits.
MAX_RESPONSE_OCTETS: Final = 255 + 1 + 32
#: Longest challenge a client answers.
MAX_CHALLENGE_OCTETS: Final = 1024

#: Keys the HMAC of an unknown user's exchange; fresh per process, never leaves it, and
#: no password equals it (it is not text), so the comparison always fails.
_NO_PASSWORD: Final = secrets.token_bytes(32)


def _syntax(message: str) -> SaslError:
    return SaslError(ReplyCode.PARAMETER_SYNTAX_ERROR, message)


def digest(key: bytes, challenge: bytes) -> str:
    """HMAC-MD5 of ``challenge`` keyed by ``key``, as RFC 2195 writes it (32 lower-case
    hexadecimal digits)."""
    return hmac.new(key, challenge, hashlib.md5).hexdigest()


def make_challenge(host: str) -> bytes:
    """A fresh challenge in the msg-id form of RFC 2195 section 2. The sans-I/O core has no
    clock: where the RFC puts a timestamp this puts more random digits (what makes a
    challenge fresh is that it never repeats, which the 96 random bits see to)."""
    first = secrets.randbelow(10**12)
    second = secrets.randbelow(10**18)
    return f"<{first}.{second}@{host}>".encode("ascii", "replace")


class CramMd5Server:
    """Server side: the challenge, then one response checked against the password."""

    def __init__(
        self, credentials: CredentialStore, *, host: str, challenge: bytes | None = None
    ) -> None:
        """``host`` names the server in the challenge; ``challenge`` fixes it (tests)."""
        self._credentials = credentials
        self._challenge = challenge if challenge is not None else make_challenge(host)
        self._challenged = False
        self.claimed_identity: str | None = None

    @property
    def challenge(self) -> bytes:
        return self._challenge

    def step(self, response: bytes | None) -> ServerStep:
        if not self._challenged:
            # Server-first: an initial response has nothing to answer yet; ignored.
            self._challenged = True
            return ServerStep(data=self._challenge, complete=False)
        if response is None:
            raise _syntax("CRAM-MD5 response expected")
        if len(response) > MAX_RESPONSE_OCTETS:
            raise _syntax("CRAM-MD5 response longer than 288 octets")
        raw_user, space, raw_digest = response.rpartition(b" ")
        if not space or not raw_user:
            raise _syntax("CRAM-MD5 response is 'user digest'")
        if len(raw_digest) != 32 or raw_digest.strip(b"0123456789abcdef"):
            raise _syntax("CRAM-MD5 digest must be 32 lower-case hex digits")
        try:
            username = raw_user.decode("utf-8")
        except UnicodeDecodeError:
            raise _syntax("CRAM-MD5 user name is not UTF-8") from None
        self.claimed_identity = username
        password = self._credentials.lookup(username)
        key = _NO_PASSWORD if password is None else password.encode("utf-8")
        expected = digest(key, self._challenge).encode("ascii")
        if not hmac.compare_digest(expected, raw_digest) or password is None:
            raise SaslError(ReplyCode.AUTH_FAILURE, "authentication failure")
        return ServerStep(data=None, complete=True, authcid=username, authzid=None)


class CramMd5Client:
    """Client side: answers the one challenge."""

    def __init__(self, authcid: str, password: str) -> None:
        if not authcid or not password:
            raise ValueError("CRAM-MD5 needs a non-empty user name and password")
        self._user = authcid.encode("utf-8")
        self._key = password.encode("utf-8")
        self._answered = False

    def initial_response(self) -> bytes | None:
        return None  # server-first (RFC 2195 section 2)

    def step(self, challenge: bytes) -> bytes:
        if self._answered:
            raise _syntax("a second CRAM-MD5 challenge")
        if not challenge or len(challenge) > MAX_CHALLENGE_OCTETS:
            raise _syntax("CRAM-MD5 challenge empty or too long")
        self._answered = True
        return self._user + b" " + digest(self._key, challenge).encode("ascii")

    def verify_success(self, data: bytes | None) -> None:
        if not self._answered:
            raise SaslError(ReplyCode.AUTH_FAILURE, "success before the challenge")
        if data:
            raise _syntax("CRAM-MD5 has no additional data with success")


__all__ = [
    "MAX_CHALLENGE_OCTETS",
    "MAX_RESPONSE_OCTETS",
    "NAME",
    "CramMd5Client",
    "CramMd5Server",
    "digest",
    "make_challenge",
]
