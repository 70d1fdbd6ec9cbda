"""Errors of the BEEP core, each carrying the reply code of RFC 3080 section 8.

As in h11, the core raises :class:`LocalProtocolError` when the local application misuses
the API and :class:`RemoteProtocolError` when the peer breaks the protocol. A remote
error never escapes :meth:`Session.receive_data`: the session turns it into the answer the
RFC names (usually termination without a response, section 2.2.1.1) and reports it as a
``SessionTerminated`` event carrying the code.
"""

from __future__ import annotations

from apexmesh.beep.codes import ReplyCode


class BeepError(Exception):
    """Base of every error raised by the BEEP core."""

    code: ReplyCode = ReplyCode.GENERAL_SYNTAX_ERROR

    def __init__(self, message: str, *, code: ReplyCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class LocalProtocolError(BeepError):
    """The local application asked for something the protocol or the session's state forbids."""


class RemoteProtocolError(BeepError):
    """The peer sent something that breaks RFC 3080 or RFC 3081."""


class FramingError(RemoteProtocolError):
    """A poorly-formed frame (RFC 3080 section 2.2.1.1): the session must be terminated."""


class LimitExceededError(RemoteProtocolError):
    """The peer exceeded one of the limits in ``apexmesh.beep.limits``."""

    code = ReplyCode.TRANSACTION_FAILED
