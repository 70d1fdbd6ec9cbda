"""Where SASL server mechanisms find what they check a client against.

PLAIN (RFC 4616) and DIGEST-MD5 (RFC 2831 section 2.1.2.1, which hashes
``username:realm:passwd``) need the password itself. SCRAM-SHA-256 (RFC 5802 section 3,
RFC 7677) needs only the salted, derived keys, so a store can hold those without keeping
the password at all. :class:`CredentialStore` is deliberately two methods wide: the
production store (Redis, later) implements the same two look-ups.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping
from typing import Final, Protocol

#: RFC 7677 section 4 recommends at least 4096 iterations for SCRAM-SHA-256; scramp
#: refuses fewer.
SCRAM_ITERATIONS: Final = 4096

#: The SCRAM mechanism the stored keys are derived for.
SCRAM_MECHANISM: Final = "SCRAM-SHA-256"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ScramKeys:
    """A SCRAM-SHA-256 verifier (RFC 5802 section 3): everything but the password."""

    #: The per-user random salt.
    salt: bytes
    #: H(ClientKey), the key the client's proof is checked against.
    stored_key: bytes
    #: HMAC(SaltedPassword, "Server Key"), used to sign the server-final message.
    server_key: bytes
    #: The PBKDF2 iteration count used to derive SaltedPassword.
    iterations: int


def make_scram_keys(
    password: str, *, iterations: int = SCRAM_ITERATIONS, salt: bytes | None = None
) -> ScramKeys:
    """Derive the SCRAM-SHA-256 verifier for ``password`` (random 16-octet salt by default)."""
    import scramp  # on first use: scramp imports ssl, see scram.py

    mechanism = scramp.ScramMechanism(SCRAM_MECHANISM)
    if salt is None:
        salt = secrets.token_bytes(16)
    salt_out, stored_key, server_key, count = mechanism.make_auth_info(
        password, iteration_count=iterations, salt=salt
    )
    return ScramKeys(
        salt=bytes(salt_out),
        stored_key=bytes(stored_key),
        server_key=bytes(server_key),
        iterations=int(count),
    )


class CredentialStore(Protocol):
    """The look-ups a SASL server needs. Both answer None for an unknown user."""

    def lookup(self, username: str) -> str | None:
        """The user's password, for PLAIN and DIGEST-MD5; None if unknown or not stored."""
        ...

    def scram_keys(self, username: str) -> ScramKeys | None:
        """The user's SCRAM-SHA-256 verifier; None if unknown."""
        ...


class StaticCredentials:
    """An in-memory :class:`CredentialStore`, for tests and single-node development runs.

    ``passwords`` serve PLAIN and DIGEST-MD5 and, unless ``scram_keys`` already has an
    entry for the user, are turned into SCRAM verifiers once, here; the SCRAM path never
    sees a password. Pass only ``scram_keys`` to keep no password in memory at all.
    """

    def __init__(
        self,
        passwords: Mapping[str, str] | None = None,
        *,
        scram_keys: Mapping[str, ScramKeys] | None = None,
        scram_iterations: int = SCRAM_ITERATIONS,
    ) -> None:
        self._passwords = dict(passwords or {})
        self._scram = dict(scram_keys or {})
        for username, password in self._passwords.items():
            if username not in self._scram:
                self._scram[username] = make_scram_keys(password, iterations=scram_iterations)

    def lookup(self, username: str) -> str | None:
        return self._passwords.get(username)

    def scram_keys(self, username: str) -> ScramKeys | None:
        return self._scram.get(username)


__all__ = [
    "SCRAM_ITERATIONS",
    "SCRAM_MECHANISM",
    "CredentialStore",
    "ScramKeys",
    "StaticCredentials",
    "make_scram_keys",
]
