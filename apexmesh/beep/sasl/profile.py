"""The BEEP SASL family of profiles, sans-I/O (RFC 3080 section 4.1, DTD in section 7.3).

Each SASL mechanism is a BEEP profile ``http://iana.org/beep/SASL/<MECHANISM>`` (section
4.1.1). The client's initial response may ride in the channel ``start`` (piggybacked in
the ``profile`` element), and the server's first answer in the positive reply to it; later
challenges and responses are ``blob`` elements in MSG/RPY on the new channel, success is
``<blob status='complete'/>`` and failure an ``error`` element, in an RPY to the start
(section 4.1.1 example) or in an ERR to a MSG (section 4.1.1, last examples).

Decisions this module makes, where RFC 3080 leaves room:

* Additional data with success (RFC 4422 section 3.6: DIGEST-MD5's rspauth, SCRAM's
  server-final) rides in the ``complete`` blob: ``<blob status='complete'>...</blob>``.
* A client abort (``<blob status='abort'/>``) ends the exchange with failure (RFC 4422
  section 3.5) and is answered with ERR ``451`` ("requested action aborted", RFC 3080
  section 8): every MSG needs a reply, and the action the client asked for was aborted.
* A MSG that arrives before the start or after the exchange is over gets ERR ``550``
  (requested action not taken); the outcome of the exchange does not change.
* A malformed element ends the exchange with 500 (poorly-formed XML) or 501.
* The server refuses PLAIN with ``538`` unless TLS is active or the development switch
  ``allow_plaintext_without_tls`` is set (RFC 4616 section 4); CRAM-MD5 likewise (an
  eavesdropped challenge and answer open the password to an offline search, RFC 2195
  section 5).
* A requested authorization identity different from the authentication identity needs
  the ``authorize`` callback's consent, else the exchange fails with ``537``.

Not here: RFC 3080 section 4 allows one successful authentication per session, and no
SASL security layer once TLS is on (and vice versa). The session layer enforces both
(it refuses to start another SASL channel); the exchange objects below know only their
own channel. No mechanism here negotiates a security layer, so no greeting is re-issued.

Strings returned by :meth:`SaslServerExchange.handle_start` and
:meth:`SaslClientExchange.start_piggyback` are element text; the session layer puts them
in the ``profile`` element (escaped or in CDATA, as section 2.3.1.2 allows).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from typing import Final

from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.sasl import anonymous, cram_md5, digest_md5, plain, scram
from apexmesh.beep.sasl.blob import (
    Blob,
    BlobStatus,
    ErrorElement,
    encode_blob,
    encode_error,
    parse_blob,
    parse_element,
)
from apexmesh.beep.sasl.credentials import CredentialStore
from apexmesh.beep.sasl.mechanism import ClientMechanism, SaslError, ServerMechanism

#: RFC 3080 section 4.1.1.
SASL_URI_PREFIX: Final = "http://iana.org/beep/SASL/"

#: The mechanisms this package implements, strongest first (which of them a listener
#: offers is its configuration's choice: apexmesh/beep/sasl/servers.py).
SUPPORTED_MECHANISMS: Final = (
    scram.NAME,
    digest_md5.NAME,
    cram_md5.NAME,
    plain.NAME,
    anonymous.NAME,
)

#: Mechanisms that must not run without a confidentiality layer (TLS) outside a
#: development run: PLAIN sends the password, CRAM-MD5 an answer that a password
#: search can be tested against.
NEEDS_PRIVACY: Final = frozenset({plain.NAME, cram_md5.NAME})

#: RFC 4422 section 3.1: 1 to 20 characters of upper-case letters, digits, "-" and "_".
_MECHANISM_NAME: Final = re.compile(r"[A-Z0-9_-]{1,20}")

#: Decides whether ``authcid`` may act as ``authzid`` (RFC 4422 section 3.4.1).
Authorizer = Callable[[str, str], bool]


def profile_uri(mechanism: str) -> str:
    """The profile URI of a SASL mechanism. Raises ValueError for an invalid name."""
    if not _MECHANISM_NAME.fullmatch(mechanism):
        raise ValueError(f"not a SASL mechanism name: {mechanism!r}")
    return SASL_URI_PREFIX + mechanism


def mechanism_from_uri(uri: str) -> str | None:
    """The mechanism name of a SASL profile URI, or None if ``uri`` is not one."""
    if not uri.startswith(SASL_URI_PREFIX):
        return None
    name = uri[len(SASL_URI_PREFIX) :]
    return name if _MECHANISM_NAME.fullmatch(name) else None


class _State(enum.Enum):
    START = "start"
    RUNNING = "running"
    DONE = "done"


def _not_running() -> bytes:
    return encode_error(ReplyCode.ACTION_NOT_TAKEN, "no SASL exchange in progress").encode()


class SaslServerExchange:
    """The listener's side of one SASL channel.

    Call :meth:`handle_start` once, with the piggyback of the channel ``start``; then
    :meth:`handle_message` for every MSG on the channel, until :attr:`done`. Peer input
    never raises: every problem is answered with an ``error`` element and its code.
    """

    def __init__(
        self,
        mechanism_name: str,
        credentials: CredentialStore,
        *,
        tls_active: bool,
        allow_plaintext_without_tls: bool = False,
        realm: str,
        host: str | Sequence[str],
        service: str = "beep",
        authorize: Authorizer | None = None,
        nonce: str | None = None,
    ) -> None:
        """Raises ValueError when ``mechanism_name`` is not in :data:`SUPPORTED_MECHANISMS`.

        ``nonce`` fixes the server nonce (DIGEST-MD5, SCRAM; CRAM-MD5's whole challenge)
        for reproducible tests;
        ``service`` and ``host`` make DIGEST-MD5's digest-uri ``service/host``, accepted
        for each name in ``host`` when it is several (every name the server answers to).
        """
        self._mechanism: ServerMechanism
        if mechanism_name == anonymous.NAME:
            self._mechanism = anonymous.AnonymousServer()
        elif mechanism_name == plain.NAME:
            self._mechanism = plain.PlainServer(credentials)
        elif mechanism_name == digest_md5.NAME:
            self._mechanism = digest_md5.DigestMd5Server(
                credentials, realm=realm, host=host, service=service, nonce=nonce
            )
        elif mechanism_name == scram.NAME:
            self._mechanism = scram.ScramSha256Server(credentials, nonce=nonce)
        elif mechanism_name == cram_md5.NAME:
            first_host = host if isinstance(host, str) else next(iter(host), "localhost")
            self._mechanism = cram_md5.CramMd5Server(
                credentials, host=first_host, challenge=None if nonce is None else nonce.encode()
            )
        else:
            raise ValueError(f"unsupported SASL mechanism: {mechanism_name!r}")
        self.mechanism_name = mechanism_name
        self._refuse_plaintext = (
            mechanism_name in NEEDS_PRIVACY and not tls_active and not allow_plaintext_without_tls
        )
        self._authorize = authorize
        self._state = _State.START
        self._succeeded = False
        self._authcid: str | None = None
        self._authzid: str | None = None
        self._failure_code: int | None = None
        self._failure_text = ""

    @property
    def done(self) -> bool:
        """True once the exchange has succeeded or failed."""
        return self._state is _State.DONE

    @property
    def succeeded(self) -> bool:
        """True once the client is authenticated."""
        return self._succeeded

    @property
    def authenticated_identity(self) -> str | None:
        """The authcid after success, else None."""
        return self._authcid

    @property
    def authorization_identity(self) -> str | None:
        """The authzid the client asked for (and was granted) after success, else None."""
        return self._authzid

    @property
    def failure_code(self) -> int | None:
        """The reply code the exchange failed with, else None."""
        return self._failure_code

    @property
    def failure_text(self) -> str:
        """Why the exchange failed, for the server's log (the client is told less)."""
        return self._failure_text

    @property
    def claimed_identity(self) -> str | None:
        """The authentication identity the client claimed, once read, whatever the
        outcome (the guessing throttle counts failures per claimed identity)."""
        return self._mechanism.claimed_identity

    def handle_start(self, piggyback: str | None) -> str:
        """Handle the channel ``start``; return the content for the RPY's ``profile``.

        ``piggyback`` is the decoded content of the ``profile`` element (None or blank:
        the client sent no initial response). The answer is a ``blob`` (challenge),
        ``<blob status='complete'.../>`` or an ``error`` element. Raises RuntimeError if
        called twice (a bug in the caller, not the peer).
        """
        if self._state is not _State.START:
            raise RuntimeError("handle_start called twice")
        self._state = _State.RUNNING
        if self._refuse_plaintext:
            return self._fail(
                ReplyCode.AUTH_REQUIRES_ENCRYPTION, f"{self.mechanism_name} requires TLS"
            )
        response: bytes | None = None
        if piggyback is not None and piggyback.strip():
            try:
                blob = parse_blob(piggyback)
            except SaslError as exc:
                return self._fail(exc.code, exc.message)
            refusal = self._refuse_status(blob)
            if refusal is not None:
                return refusal
            response = blob.data
        return self._advance(response)[1]

    def handle_message(self, payload_xml: bytes) -> tuple[bool, bytes]:
        """Handle one MSG body; return ``(True, RPY body)`` or ``(False, ERR body)``."""
        if self._state is not _State.RUNNING:
            return False, _not_running()
        try:
            blob = parse_blob(payload_xml)
        except SaslError as exc:
            return False, self._fail(exc.code, exc.message).encode()
        refusal = self._refuse_status(blob)
        if refusal is not None:
            return False, refusal.encode()
        ok, body = self._advance(blob.data)
        return ok, body.encode()

    def _refuse_status(self, blob: Blob) -> str | None:
        if blob.status is BlobStatus.ABORT:
            return self._fail(ReplyCode.ACTION_ABORTED, "aborted by the client")
        if blob.status is BlobStatus.COMPLETE:
            return self._fail(ReplyCode.PARAMETER_SYNTAX_ERROR, "only a server completes")
        return None

    def _advance(self, response: bytes | None) -> tuple[bool, str]:
        try:
            step = self._mechanism.step(response)
        except SaslError as exc:
            return False, self._fail(exc.code, exc.message)
        if not step.complete:
            return True, encode_blob(step.data or b"")
        authcid = step.authcid or ""
        if (
            step.authzid is not None
            and step.authzid != authcid
            and (self._authorize is None or not self._authorize(authcid, step.authzid))
        ):
            return False, self._fail(ReplyCode.NOT_AUTHORIZED, "authorization identity refused")
        self._state = _State.DONE
        self._succeeded = True
        self._authcid = authcid
        self._authzid = step.authzid
        return True, encode_blob(step.data, BlobStatus.COMPLETE)

    def _fail(self, code: int, text: str) -> str:
        self._state = _State.DONE
        self._failure_code = code
        self._failure_text = text
        # Diagnostics for 535 stay generic: they must not tell which part was wrong.
        return encode_error(code, "authentication failure" if code == 535 else text)


class RefusedServerExchange:
    """A SASL exchange refused before anything the client sends is read: the listener
    will not authenticate this peer now (a guessing throttle's 421, RFC 4422 section
    6.2). The start is answered with the error; no credential is ever looked at, so the
    refusal says nothing of whether a password was right."""

    def __init__(self, mechanism_name: str, code: int, text: str) -> None:
        self.mechanism_name = mechanism_name
        self._code = code
        self._text = text
        self._started = False

    @property
    def done(self) -> bool:
        return self._started

    @property
    def succeeded(self) -> bool:
        return False

    @property
    def authenticated_identity(self) -> str | None:
        return None

    @property
    def authorization_identity(self) -> str | None:
        return None

    @property
    def failure_code(self) -> int:
        return self._code

    @property
    def failure_text(self) -> str:
        return self._text

    @property
    def claimed_identity(self) -> str | None:
        return None  # never read

    def handle_start(self, piggyback: str | None) -> str:  # noqa: ARG002  (not read)
        self._started = True
        return encode_error(self._code, self._text)

    def handle_message(self, payload_xml: bytes) -> tuple[bool, bytes]:  # noqa: ARG002
        return False, _not_running()


class SaslClientExchange:
    """The initiator's side of one SASL channel.

    Put :meth:`start_piggyback` (if not None) in the ``profile`` element of the channel
    ``start``; feed the ``profile`` content of the RPY to :meth:`handle_start_reply`, and
    every later RPY/ERR to :meth:`handle_reply`. Whenever either returns bytes, send them
    as the next MSG on the channel; None means nothing to send. When :attr:`done`,
    :attr:`succeeded` says whether the server authenticated the client and, for
    DIGEST-MD5 and SCRAM, proved it knows the credentials too. If the client rejects the
    server's proof after the server reported success, :attr:`succeeded` is False with
    ``failure_code`` 535 and the session should be closed.
    """

    def __init__(
        self,
        mechanism_name: str,
        *,
        authcid: str,
        password: str,
        authzid: str | None = None,
        host: str,
        service: str = "beep",
        trace: str | None = None,
        nonce: str | None = None,
    ) -> None:
        """Raises ValueError for an unsupported mechanism or unusable credentials.

        ``nonce`` fixes the client nonce (DIGEST-MD5 cnonce, SCRAM c-nonce) for tests.
        """
        self._mechanism: ClientMechanism
        if mechanism_name == anonymous.NAME:
            self._mechanism = anonymous.AnonymousClient(trace)
        elif mechanism_name == plain.NAME:
            self._mechanism = plain.PlainClient(authcid, password, authzid)
        elif mechanism_name == digest_md5.NAME:
            self._mechanism = digest_md5.DigestMd5Client(
                authcid=authcid,
                password=password,
                host=host,
                service=service,
                authzid=authzid,
                cnonce=nonce,
            )
        elif mechanism_name == scram.NAME:
            self._mechanism = scram.ScramSha256Client(
                authcid=authcid, password=password, authzid=authzid, nonce=nonce
            )
        elif mechanism_name == cram_md5.NAME:
            if authzid:
                raise ValueError("CRAM-MD5 carries no authorization identity")
            self._mechanism = cram_md5.CramMd5Client(authcid, password)
        else:
            raise ValueError(f"unsupported SASL mechanism: {mechanism_name!r}")
        self.mechanism_name = mechanism_name
        self._initial = self._mechanism.initial_response()
        self._initial_sent = False
        self._done = False
        self._succeeded = False
        self._failure_code: int | None = None
        self._failure_text = ""

    @property
    def done(self) -> bool:
        """True once the exchange has succeeded or failed."""
        return self._done

    @property
    def succeeded(self) -> bool:
        """True once the server accepted the client (and proved itself, where it can)."""
        return self._succeeded

    @property
    def failure_code(self) -> int | None:
        """The server's error code, or the local one (e.g. 535 for a bad server proof)."""
        return self._failure_code

    @property
    def failure_text(self) -> str:
        """The server's diagnostic text, or why this side gave up; "" on success."""
        return self._failure_text

    def start_piggyback(self) -> str | None:
        """The ``blob`` to piggyback in the channel ``start``, or None (server-first)."""
        if self._initial is None or self._initial_sent:
            return None
        self._initial_sent = True
        return encode_blob(self._initial)

    def handle_start_reply(self, content: str) -> bytes | None:
        """Handle the ``profile`` content of the RPY to the channel ``start``.

        Returns the next MSG body, or None. An empty content means the server has not
        answered yet: the initial response (or an empty blob) is sent as a MSG.
        """
        if self._done:
            return None
        if not content.strip():
            return self._send_initial_or(b"")
        return self._handle(content, expect_error=None)

    def handle_reply(self, is_error: bool, payload_xml: bytes) -> bytes | None:
        """Handle the RPY (``is_error`` False) or ERR to our last MSG; return the next MSG."""
        if self._done:
            return None
        return self._handle(payload_xml, expect_error=is_error)

    def _handle(self, text: str | bytes, *, expect_error: bool | None) -> bytes | None:
        try:
            element = parse_element(text)
        except SaslError as exc:
            return self._abort(exc.code, exc.message)
        if isinstance(element, ErrorElement):
            if expect_error is False:
                return self._abort(ReplyCode.PARAMETER_SYNTAX_ERROR, "error element in a RPY")
            self._finish(element.code, element.text)
            return None
        if expect_error is True:
            self._finish(ReplyCode.GENERAL_SYNTAX_ERROR, "ERR without an error element")
            return None
        if element.status is BlobStatus.ABORT:
            self._finish(ReplyCode.PARAMETER_SYNTAX_ERROR, "the server aborted")
            return None
        if element.status is BlobStatus.COMPLETE:
            if self._initial is not None and not self._initial_sent:
                # success before we said anything
                self._finish(ReplyCode.AUTH_FAILURE, "success before the initial response")
                return None
            try:
                self._mechanism.verify_success(element.data or None)
            except SaslError as exc:
                self._finish(exc.code, exc.message)
                return None
            self._done = True
            self._succeeded = True
            return None
        if self._initial is not None and not self._initial_sent:
            return self._send_initial_or(b"")
        try:
            response = self._mechanism.step(element.data)
        except SaslError as exc:
            return self._abort(exc.code, exc.message)
        return encode_blob(response).encode()

    def _send_initial_or(self, fallback: bytes) -> bytes:
        if self._initial is not None and not self._initial_sent:
            self._initial_sent = True
            return encode_blob(self._initial).encode()
        return encode_blob(fallback).encode()

    def _finish(self, code: int, text: str = "") -> None:
        self._done = True
        self._failure_code = code
        self._failure_text = text

    def _abort(self, code: int, text: str) -> bytes:
        # The server may be waiting for our next blob: tell it we give up (RFC 3080 4.1.3).
        self._finish(code, text)
        return encode_blob(None, BlobStatus.ABORT).encode()


__all__ = [
    "NEEDS_PRIVACY",
    "SASL_URI_PREFIX",
    "SUPPORTED_MECHANISMS",
    "Authorizer",
    "RefusedServerExchange",
    "SaslClientExchange",
    "SaslServerExchange",
    "mechanism_from_uri",
    "profile_uri",
]
