"""Tuning profiles of BEEP: TLS (RFC 3080 section 3.1) and SASL (section 4.1).

The session runs both as part of its state machine (the TLS handshake itself is the
adapter's job, signalled by ``TlsStartRequired``). This module holds the profile URIs, the
TLS profile's elements, and the small interfaces a SASL exchange must offer; the
mechanisms live in ``apexmesh.beep.sasl``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.management import ManagementError
from apexmesh.beep.xml import XmlError, parse_xml

TLS_PROFILE: Final = "http://iana.org/beep/TLS"
SASL_PROFILE_PREFIX: Final = "http://iana.org/beep/SASL/"

READY_XML: Final = "<ready />"
PROCEED_XML: Final = "<proceed />"


def sasl_profile(mechanism: str) -> str:
    """Profile URI of a SASL mechanism (RFC 3080 section 4.1.1)."""
    return SASL_PROFILE_PREFIX + mechanism.upper()


def sasl_mechanism(uri: str) -> str | None:
    """The mechanism named by a SASL profile URI, or None for another profile."""
    if uri.startswith(SASL_PROFILE_PREFIX):
        return uri[len(SASL_PROFILE_PREFIX) :]
    return None


def parse_ready(content: str | None) -> None:
    """Check a piggybacked ``ready`` element (section 3.1.3.1).

    Raises :class:`ManagementError` with code 501 when the element is poorly formed or
    asks for a TLS version this peer does not support ("1" is TLS 1.0 or later, which
    every modern TLS stack satisfies).
    """
    if content is None:
        raise ManagementError(
            "TLS start lacks the ready element", code=ReplyCode.PARAMETER_SYNTAX_ERROR
        )
    try:
        root = parse_xml(content)
    except XmlError as exc:
        raise ManagementError(str(exc), code=ReplyCode(exc.code)) from None
    if root.tag != "ready" or len(root) or (root.text or "").strip():
        raise ManagementError(
            "expected an empty ready element", code=ReplyCode.PARAMETER_SYNTAX_ERROR
        )
    if root.get("version", "1") != "1":
        raise ManagementError(
            "version attribute poorly formed in <ready> element",
            code=ReplyCode.PARAMETER_SYNTAX_ERROR,
        )


def is_proceed(content: str | None) -> bool:
    """True when a reply's piggybacked content is the ``proceed`` element."""
    if content is None:
        return False
    try:
        root = parse_xml(content)
    except XmlError:
        return False
    return bool(root.tag == "proceed")


class SaslServer(Protocol):
    """The server side of one SASL exchange, as the session drives it."""

    @property
    def done(self) -> bool: ...
    @property
    def succeeded(self) -> bool: ...
    @property
    def authenticated_identity(self) -> str | None: ...
    @property
    def authorization_identity(self) -> str | None: ...
    @property
    def failure_code(self) -> int | None: ...
    @property
    def failure_text(self) -> str:
        """Why the exchange failed (for the log), "" when it did not."""
        ...

    @property
    def claimed_identity(self) -> str | None:
        """The identity the client claimed, when the exchange read one (even on failure)."""
        ...

    def handle_start(self, piggyback: str | None) -> str:
        """Content for the positive reply's profile element (blob or error)."""
        ...

    def handle_message(self, payload_xml: bytes) -> tuple[bool, bytes]:
        """(True, RPY body) or (False, ERR body) for one MSG body."""
        ...


class SaslClient(Protocol):
    """The client side of one SASL exchange, as the session drives it."""

    @property
    def done(self) -> bool: ...
    @property
    def succeeded(self) -> bool: ...
    @property
    def failure_code(self) -> int | None: ...
    @property
    def failure_text(self) -> str:
        """The server's diagnostic (or the local reason) of a failure, "" otherwise."""
        ...

    def start_piggyback(self) -> str | None:
        """Content of the start's profile element (initial response blob), if any."""
        ...

    def handle_start_reply(self, content: str) -> bytes | None:
        """Next MSG body after the positive reply to start, or None when finished."""
        ...

    def handle_reply(self, is_error: bool, payload_xml: bytes) -> bytes | None:
        """Next MSG body after a reply, or None when finished."""
        ...


#: Builds the server side of an exchange for a mechanism, given whether TLS is active;
#: returns None when the mechanism is not offered.
SaslServerFactory = Callable[[str, bool], SaslServer | None]
