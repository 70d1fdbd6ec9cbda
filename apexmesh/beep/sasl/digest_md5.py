"""The DIGEST-MD5 SASL mechanism (RFC 2831), authentication only (qop=auth).

Server-first: the server sends a digest-challenge (RFC 2831 section 2.1.1), the client a
digest-response (section 2.1.2), and the server proves it knows the password too with
``rspauth`` (section 2.1.3), which this implementation carries as additional data with
success (RFC 4422 section 3.6) in ``<blob status='complete'>``. Only ``qop=auth`` is offered
and accepted: no integrity or confidentiality layer (auth-int, auth-conf) is negotiated,
so the session needs TLS for privacy. Subsequent authentication (section 2.2) is not
supported: an initial response is ignored and a fresh challenge sent, as 2.2 allows.

RFC 6331 moved DIGEST-MD5 to Historic; it is here for interoperability with older BEEP
peers. MD5 is required by the RFC, hence the per-file S324 exemption in pyproject.toml.

Syntax errors in directives are answered with 501; directives that parse but do not match
(nonce, realm, digest-uri, nonce-count, qop, response) with 535.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import Final

from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.sasl.credentials import CredentialStore
from apexmesh.beep.sasl.mechanism import SaslError, ServerStep

NAME: Final = "DIGEST-MD5"

#: RFC 2831 section 2.1.1: a digest-challenge is at most 2048 octets.
MAX_CHALLENGE_OCTETS: Final = 2048
#: RFC 2831 section 2.1.2: a digest-response is at most 4096 octets.
MAX_RESPONSE_OCTETS: Final = 4096

#: The only nonce-count this server accepts (RFC 2831 section 2.1.3, no reauthentication).
FIRST_NONCE_COUNT: Final = "00000001"

_SEPARATORS: Final = frozenset('()<>@,;:\\"/[]?={} \t')
_LWS: Final = " \t\r\n"


def _syntax(message: str) -> SaslError:
    return SaslError(ReplyCode.PARAMETER_SYNTAX_ERROR, message)


def _fail(message: str) -> SaslError:
    return SaslError(ReplyCode.AUTH_FAILURE, message)


def parse_directives(text: str) -> dict[str, list[str]]:
    """Parse ``1#( token "=" ( token | quoted-string ) )`` (RFC 2831 section 1.2, 7.1).

    Returns every value of every directive, names lower-cased, quotes and backslash
    escapes removed. Raises :class:`SaslError` (501) on any syntax error.
    """
    directives: dict[str, list[str]] = {}
    pos, end = 0, len(text)
    while True:
        while pos < end and (text[pos] in _LWS or text[pos] == ","):
            pos += 1  # the #rule allows empty list elements and LWS around commas
        if pos >= end:
            break
        start = pos
        while pos < end and text[pos] not in _SEPARATORS and 32 < ord(text[pos]) < 127:
            pos += 1
        name = text[start:pos].lower()
        if not name:
            raise _syntax("directive name expected")
        while pos < end and text[pos] in _LWS:
            pos += 1
        if pos >= end or text[pos] != "=":
            raise _syntax(f"'=' expected after {name!r}")
        pos += 1
        while pos < end and text[pos] in _LWS:
            pos += 1
        if pos < end and text[pos] == '"':
            pos += 1
            chars: list[str] = []
            while True:
                if pos >= end:
                    raise _syntax("unterminated quoted-string")
                char = text[pos]
                pos += 1
                if char == '"':
                    break
                if char == "\\":
                    if pos >= end:
                        raise _syntax("unterminated quoted-pair")
                    char = text[pos]
                    pos += 1
                chars.append(char)
            value = "".join(chars)
        else:
            start = pos
            while pos < end and text[pos] not in _SEPARATORS and 32 < ord(text[pos]) < 127:
                pos += 1
            value = text[start:pos]
            if not value:
                raise _syntax(f"value expected for {name!r}")
        directives.setdefault(name, []).append(value)
        while pos < end and text[pos] in _LWS:
            pos += 1
        if pos < end and text[pos] != ",":
            raise _syntax("',' expected between directives")
    return directives


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _optional(directives: dict[str, list[str]], name: str) -> str | None:
    values = directives.get(name)
    if values is None:
        return None
    if len(values) > 1:
        raise _syntax(f"directive {name!r} appears more than once")
    return values[0]


def _required(directives: dict[str, list[str]], name: str) -> str:
    value = _optional(directives, name)
    if value is None:
        raise _syntax(f"directive {name!r} missing")
    return value


def _decode(message: bytes) -> dict[str, list[str]]:
    # Parse over ISO 8859-1 (one character per octet, never fails), then re-decode values
    # as UTF-8 when charset=utf-8 says so (RFC 2831 sections 2.1.1 and 2.1.2).
    directives = parse_directives(message.decode("latin-1"))
    charset = _optional(directives, "charset")
    if charset is None:
        return directives
    if charset.lower() != "utf-8":
        raise _syntax("charset must be utf-8")
    try:
        return {
            name: [value.encode("latin-1").decode("utf-8") for value in values]
            for name, values in directives.items()
        }
    except UnicodeDecodeError:
        raise _syntax("directive value is not UTF-8") from None


def _user_octets(value: str) -> bytes:
    # RFC 2831 section 2.1.2.1: username, realm and passwd are hashed in ISO 8859-1 when
    # every character fits, in UTF-8 otherwise (the sample code of section 8).
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")


def _md5(data: bytes) -> bytes:
    return hashlib.md5(data).digest()


def compute_response(
    *,
    username: str,
    realm: str,
    password: str,
    nonce: str,
    cnonce: str,
    nc: str,
    qop: str,
    digest_uri: str,
    authzid: str | None,
    for_rspauth: bool = False,
) -> str:
    """The response-value of RFC 2831 section 2.1.2.1 (qop=auth), 32 lower-case hex digits.

    ``for_rspauth`` computes the server's rspauth instead (section 2.1.3: A2 without
    "AUTHENTICATE").
    """
    secret = _md5(b":".join((_user_octets(username), _user_octets(realm), _user_octets(password))))
    a1 = secret + f":{nonce}:{cnonce}".encode()
    if authzid:
        a1 += b":" + authzid.encode("utf-8")
    a2 = (":" if for_rspauth else "AUTHENTICATE:") + digest_uri
    ha1 = hashlib.md5(a1).hexdigest()
    ha2 = hashlib.md5(a2.encode("utf-8")).hexdigest()
    return hashlib.md5(f"{ha1}:{nonce}:{nc}:{cnonce}:{qop}:{ha2}".encode()).hexdigest()


def _is_response_value(value: str) -> bool:
    return len(value) == 32 and all(c in "0123456789abcdef" for c in value)


def _make_nonce() -> str:
    # RFC 2831 section 2.1.1: at least 64 bits of entropy; base64url keeps it a token.
    return secrets.token_urlsafe(24)


class DigestMd5Server:
    """Server side of DIGEST-MD5: challenge, verify, answer with rspauth.

    ``host`` is every name the server answers to (its domain, its host names, the names
    in its certificate): a client builds digest-uri from the name it dialled (RFC 2831
    section 2.1.2), so ``beep/relay1.example.com`` and ``beep/example.com`` both name a
    relay of example.com that runs on relay1.
    """

    def __init__(
        self,
        credentials: CredentialStore,
        *,
        realm: str,
        host: str | Sequence[str],
        service: str = "beep",
        nonce: str | None = None,
    ) -> None:
        self._credentials = credentials
        self._realm = realm
        hosts = (host,) if isinstance(host, str) else tuple(host)
        if not hosts:
            raise ValueError("DIGEST-MD5 needs at least one host name")
        self._digest_uris = frozenset(f"{service}/{name}".lower() for name in hosts)
        self._nonce = nonce if nonce is not None else _make_nonce()
        self._challenged = False
        self.claimed_identity: str | None = None

    def challenge(self) -> bytes:
        """The digest-challenge, in the order of RFC 2831 section 4's example."""
        return (
            f'realm={_quote(self._realm)},nonce={_quote(self._nonce)},qop="auth",'
            "algorithm=md5-sess,charset=utf-8"
        ).encode()

    def step(self, response: bytes | None) -> ServerStep:
        if not self._challenged:
            # Any initial response is a reauthentication attempt (section 2.2), which
            # this server does not support: answer with a fresh challenge.
            self._challenged = True
            return ServerStep(data=self.challenge(), complete=False)
        if response is None:
            raise _syntax("digest-response expected")
        if len(response) > MAX_RESPONSE_OCTETS:
            raise _syntax("digest-response longer than 4096 octets")
        directives = _decode(response)
        username = _required(directives, "username")
        realm = _optional(directives, "realm")
        nonce = _required(directives, "nonce")
        cnonce = _required(directives, "cnonce")
        nc = _required(directives, "nc")
        qop = _optional(directives, "qop")
        digest_uri = _required(directives, "digest-uri")
        response_value = _required(directives, "response")
        authzid = _optional(directives, "authzid")
        if not username or not cnonce:
            raise _syntax("username and cnonce must not be empty")
        self.claimed_identity = username
        if not _is_response_value(response_value):
            raise _syntax("response must be 32 lower-case hex digits")
        qop = qop if qop is not None else "auth"
        realm = realm if realm is not None else ""
        if realm != self._realm:
            raise _fail("realm does not match")
        if nonce != self._nonce:
            raise _fail("nonce does not match")
        if nc != FIRST_NONCE_COUNT:
            raise _fail("nonce-count must be 00000001")
        if qop != "auth":
            raise _fail("only qop=auth was offered")
        if digest_uri.lower() not in self._digest_uris:
            raise _fail(f"digest-uri {digest_uri!r} does not name this service and host")
        password = self._credentials.lookup(username)
        known = password is not None
        digest = functools.partial(
            compute_response,
            username=username,
            realm=realm,
            password=password if password is not None else "",
            nonce=nonce,
            cnonce=cnonce,
            nc=nc,
            qop=qop,
            digest_uri=digest_uri,
            authzid=authzid,
        )
        expected = digest()
        if not hmac.compare_digest(expected.encode(), response_value.encode()) or not known:
            raise _fail("authentication failure")
        rspauth = digest(for_rspauth=True)
        return ServerStep(
            data=f"rspauth={rspauth}".encode(),
            complete=True,
            authcid=username,
            authzid=authzid or None,
        )


class DigestMd5Client:
    """Client side of DIGEST-MD5: answer the challenge, then check rspauth."""

    def __init__(
        self,
        *,
        authcid: str,
        password: str,
        host: str,
        service: str = "beep",
        authzid: str | None = None,
        cnonce: str | None = None,
    ) -> None:
        self._authcid = authcid
        self._password = password
        self._authzid = authzid
        self._digest_uri = f"{service}/{host}"
        self._cnonce = cnonce if cnonce is not None else _make_nonce()
        self._rspauth: str | None = None

    def initial_response(self) -> bytes | None:
        return None  # server-first (RFC 2831 section 2.1)

    def step(self, challenge: bytes) -> bytes:
        if self._rspauth is not None:
            raise _syntax("a second digest-challenge")
        if len(challenge) > MAX_CHALLENGE_OCTETS:
            raise _syntax("digest-challenge longer than 2048 octets")
        directives = _decode(challenge)
        realms = directives.get("realm", [])
        realm = realms[0] if realms else ""
        nonce = _required(directives, "nonce")
        algorithm = _required(directives, "algorithm")
        if algorithm != "md5-sess":
            raise _syntax("algorithm must be md5-sess")
        offered = {
            option.strip()
            for value in directives.get("qop", ["auth"])
            for option in value.split(",")
        }
        if "auth" not in offered:
            raise SaslError(ReplyCode.AUTH_MECHANISM_INSUFFICIENT, "server does not offer qop=auth")
        utf8 = "charset" in directives
        if not utf8:
            try:
                for value in (self._authcid, realm, self._password):
                    value.encode("latin-1")
            except UnicodeEncodeError:
                raise _syntax("credentials need charset=utf-8, which the server lacks") from None
        digest = functools.partial(
            compute_response,
            username=self._authcid,
            realm=realm,
            password=self._password,
            nonce=nonce,
            cnonce=self._cnonce,
            nc=FIRST_NONCE_COUNT,
            qop="auth",
            digest_uri=self._digest_uri,
            authzid=self._authzid,
        )
        response = digest()
        self._rspauth = digest(for_rspauth=True)
        parts = [
            *(["charset=utf-8"] if utf8 else []),
            f"username={_quote(self._authcid)}",
            f"realm={_quote(realm)}",
            f"nonce={_quote(nonce)}",
            f"nc={FIRST_NONCE_COUNT}",
            f"cnonce={_quote(self._cnonce)}",
            f"digest-uri={_quote(self._digest_uri)}",
            f"response={response}",
            "qop=auth",
        ]
        if self._authzid:
            parts.append(f"authzid={_quote(self._authzid)}")
        return ",".join(parts).encode("utf-8" if utf8 else "latin-1")

    def verify_success(self, data: bytes | None) -> None:
        if self._rspauth is None:
            raise _fail("success before any digest-challenge")
        if data is None:
            raise _fail("server sent no rspauth")
        directives = _decode(data)
        rspauth = _required(directives, "rspauth")
        if not hmac.compare_digest(rspauth.encode("utf-8"), self._rspauth.encode()):
            raise _fail("server's rspauth is wrong: the server does not know the password")


__all__ = [
    "FIRST_NONCE_COUNT",
    "MAX_CHALLENGE_OCTETS",
    "MAX_RESPONSE_OCTETS",
    "NAME",
    "DigestMd5Client",
    "DigestMd5Server",
    "compute_response",
    "parse_directives",
]
