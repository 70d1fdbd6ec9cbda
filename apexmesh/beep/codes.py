"""Reply codes of BEEP (RFC 3080 section 8).

The same three-digit codes are reused by every APEX document (RFC 3340 section 10 adds
a few of its own, registered in ``apexmesh.apex.codes``).
"""

from __future__ import annotations

import enum


class ReplyCode(enum.IntEnum):
    """RFC 3080 section 8 - Reply Codes."""

    #: success
    SUCCESS = 200
    #: service not available
    SERVICE_NOT_AVAILABLE = 421
    #: requested action not taken (e.g., lock already in use)
    ACTION_NOT_TAKEN_TRANSIENT = 450
    #: requested action aborted (e.g., local error in processing)
    ACTION_ABORTED = 451
    #: temporary authentication failure
    TEMPORARY_AUTH_FAILURE = 454
    #: general syntax error (e.g., poorly-formed XML)
    GENERAL_SYNTAX_ERROR = 500
    #: syntax error in parameters (e.g., non-valid XML)
    PARAMETER_SYNTAX_ERROR = 501
    #: parameter not implemented
    PARAMETER_NOT_IMPLEMENTED = 504
    #: authentication required
    AUTH_REQUIRED = 530
    #: authentication mechanism insufficient (e.g., too weak, sequence exhausted)
    AUTH_MECHANISM_INSUFFICIENT = 534
    #: authentication failure
    AUTH_FAILURE = 535
    #: action not authorized for user
    NOT_AUTHORIZED = 537
    #: authentication mechanism requires encryption
    AUTH_REQUIRES_ENCRYPTION = 538
    #: requested action not taken (e.g., no requested profiles are acceptable)
    ACTION_NOT_TAKEN = 550
    #: parameter invalid
    PARAMETER_INVALID = 553
    #: transaction failed (e.g., policy violation)
    TRANSACTION_FAILED = 554

    @property
    def transient(self) -> bool:
        """4xx codes report a condition that may go away if the request is repeated."""
        return 400 <= self < 500


def for_code(code: int) -> ReplyCode | None:
    """Return the registered code, or None for an unregistered three-digit value."""
    try:
        return ReplyCode(code)
    except ValueError:
        return None
