"""The PLAIN SASL mechanism (RFC 4616).

One client message: ``[authzid] NUL authcid NUL passwd`` in UTF-8 (RFC 4616 section 2),
each field at most 255 octets. The password crosses the wire in clear, so RFC 4616
section 4 requires a confidentiality layer: :mod:`apexmesh.beep.sasl.profile` refuses
PLAIN with 538 unless TLS is active or a development run said otherwise. SASLprep
(RFC 4013) is not applied; credentials are compared octet for octet.
"""

from __future__ import annotations

import hmac
from typing import Final

from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.sasl.credentials import CredentialStore
from apexmesh.beep.sasl.mechanism import SaslError, ServerStep

NAME: Final = "PLAIN"

#: RFC 4616 section 2: authzid, authcid and passwd are each 1 to 255 octets.
MAX_FIELD_OCTETS: Final = 255


def _syntax(message: str) -> SaslError:
    return SaslError(ReplyCode.PARAMETER_SYNTAX_ERROR, message)


class PlainServer:
    """Server side: checks the one message against the credential store."""

    def __init__(self, credentials: CredentialStore) -> None:
        self._credentials = credentials
        self.claimed_identity: str | None = None

    def step(self, response: bytes | None) -> ServerStep:
        if response is None:
            return ServerStep(data=b"", complete=False)
        fields = response.split(b"\x00")
        if len(fields) != 3:
            raise _syntax("PLAIN message needs exactly two NUL separators")
        raw_authzid, raw_authcid, raw_passwd = fields
        if not raw_authcid or not raw_passwd:
            raise _syntax("PLAIN authcid and passwd must not be empty")
        if any(len(field) > MAX_FIELD_OCTETS for field in fields):
            raise _syntax("PLAIN field longer than 255 octets")
        try:
            authzid = raw_authzid.decode("utf-8")
            authcid = raw_authcid.decode("utf-8")
            raw_passwd.decode("utf-8")
        except UnicodeDecodeError:
            raise _syntax("PLAIN fields must be UTF-8") from None
        self.claimed_identity = authcid
        stored = self._credentials.lookup(authcid)
        # Compare even for an unknown user so timing says little about who exists.
        expected = (stored if stored is not None else "\x00unknown").encode("utf-8")
        if not hmac.compare_digest(expected, raw_passwd) or stored is None:
            raise SaslError(ReplyCode.AUTH_FAILURE, "authentication failure")
        return ServerStep(data=None, complete=True, authcid=authcid, authzid=authzid or None)


class PlainClient:
    """Client side: sends the one message as the initial response."""

    def __init__(self, authcid: str, password: str, authzid: str | None = None) -> None:
        if not authcid or not password:
            raise ValueError("PLAIN needs a non-empty authcid and password")
        if any("\x00" in part for part in (authcid, password, authzid or "")):
            raise ValueError("PLAIN fields must not contain NUL")
        message = b"\x00".join(part.encode("utf-8") for part in (authzid or "", authcid, password))
        self._message = message

    def initial_response(self) -> bytes | None:
        return self._message

    def step(self, challenge: bytes) -> bytes:
        raise SaslError(
            ReplyCode.PARAMETER_SYNTAX_ERROR, f"PLAIN has no challenges ({len(challenge)} octets)"
        )

    def verify_success(self, data: bytes | None) -> None:
        if data:
            raise SaslError(ReplyCode.PARAMETER_SYNTAX_ERROR, "unexpected data with success")


__all__ = ["MAX_FIELD_OCTETS", "NAME", "PlainClient", "PlainServer"]
