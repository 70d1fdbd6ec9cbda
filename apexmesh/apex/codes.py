"""APEX reply codes (RFC 3340 section 10, 551 of RFC 3341 section 4.3, and the
content-based pubsub codes of draft-wyman-apex-pubsub-00 Appendix A).

APEX reuses BEEP's three-digit codes (RFC 3080 section 8, ``apexmesh.beep.codes``) and
adds 250 ("transaction successful") and 555 ("transaction already in progress"). RFC 3341
section 4.3 step 5 also names 551 for "no such access entry", which RFC 3340 section 10
does not list; it is registered here so that the access service never invents a number.
The content-based pubsub draft adds 561, 566, 567 and 568 (Appendix A) the same way.
Each member carries the RFC's own wording as ``text`` so that a ``reply`` element can
carry a diagnostic without a second table.
"""

from __future__ import annotations

import enum

from apexmesh.beep.codes import ReplyCode


class ApexReplyCode(enum.IntEnum):
    """RFC 3340 section 10 - Reply Codes (and RFC 3341 section 4.3 for 551)."""

    text: str

    def __new__(cls, value: int, text: str) -> ApexReplyCode:
        member = int.__new__(cls, value)
        member._value_ = value
        member.text = text
        return member

    #: transaction successful
    SUCCESS = (250, "transaction successful")
    #: service not available
    SERVICE_NOT_AVAILABLE = (ReplyCode.SERVICE_NOT_AVAILABLE.value, "service not available")
    #: requested action not taken
    ACTION_NOT_TAKEN_TRANSIENT = (
        ReplyCode.ACTION_NOT_TAKEN_TRANSIENT.value,
        "requested action not taken",
    )
    #: requested action aborted
    ACTION_ABORTED = (ReplyCode.ACTION_ABORTED.value, "requested action aborted")
    #: temporary authentication failure
    TEMPORARY_AUTH_FAILURE = (
        ReplyCode.TEMPORARY_AUTH_FAILURE.value,
        "temporary authentication failure",
    )
    #: general syntax error (e.g., poorly-formed XML)
    GENERAL_SYNTAX_ERROR = (
        ReplyCode.GENERAL_SYNTAX_ERROR.value,
        "general syntax error (e.g., poorly-formed XML)",
    )
    #: syntax error in parameters (e.g., non-valid XML)
    PARAMETER_SYNTAX_ERROR = (
        ReplyCode.PARAMETER_SYNTAX_ERROR.value,
        "syntax error in parameters (e.g., non-valid XML)",
    )
    #: parameter not implemented
    PARAMETER_NOT_IMPLEMENTED = (
        ReplyCode.PARAMETER_NOT_IMPLEMENTED.value,
        "parameter not implemented",
    )
    #: authentication required
    AUTH_REQUIRED = (ReplyCode.AUTH_REQUIRED.value, "authentication required")
    #: authentication mechanism insufficient
    AUTH_MECHANISM_INSUFFICIENT = (
        ReplyCode.AUTH_MECHANISM_INSUFFICIENT.value,
        "authentication mechanism insufficient",
    )
    #: authentication failure
    AUTH_FAILURE = (ReplyCode.AUTH_FAILURE.value, "authentication failure")
    #: action not authorized for user
    NOT_AUTHORIZED = (ReplyCode.NOT_AUTHORIZED.value, "action not authorized for user")
    #: authentication mechanism requires encryption
    AUTH_REQUIRES_ENCRYPTION = (
        ReplyCode.AUTH_REQUIRES_ENCRYPTION.value,
        "authentication mechanism requires encryption",
    )
    #: requested action not taken
    ACTION_NOT_TAKEN = (ReplyCode.ACTION_NOT_TAKEN.value, "requested action not taken")
    #: no such access entry (RFC 3341 section 4.3, step 5)
    NO_SUCH_ENTRY = (551, "no access entry for this owner/actor combination")
    #: parameter invalid
    PARAMETER_INVALID = (ReplyCode.PARAMETER_INVALID.value, "parameter invalid")
    #: transaction failed (e.g., policy violation)
    TRANSACTION_FAILED = (
        ReplyCode.TRANSACTION_FAILED.value,
        "transaction failed (e.g., policy violation)",
    )
    #: transaction already in progress
    TRANSACTION_IN_PROGRESS = (555, "transaction already in progress")
    #: invalid message structure (draft-wyman-apex-pubsub-00 section 5.9.1)
    INVALID_MESSAGE = (561, "invalid message structure")
    #: unsupported message selector class (draft-wyman-apex-pubsub-00 section 5.8.1)
    UNSUPPORTED_SELECTOR_CLASS = (566, "unsupported message selector class")
    #: incorrect message selector (draft-wyman-apex-pubsub-00 section 5.8.1)
    INCORRECT_SELECTOR = (567, "incorrect message selector")
    #: invalid topic name and subscription identifier (draft-wyman-apex-pubsub-00 5.8.2)
    NO_SUCH_SUBSCRIPTION = (568, "invalid topic name and subscription identifier")

    @property
    def transient(self) -> bool:
        """4xx codes report a condition that may go away if the request is repeated."""
        return 400 <= self < 500


def for_code(code: int) -> ApexReplyCode | None:
    """Return the registered APEX code, or None for an unregistered three-digit value."""
    return _BY_VALUE.get(code)


_BY_VALUE: dict[int, ApexReplyCode] = {member.value: member for member in ApexReplyCode}


__all__ = ["ApexReplyCode", "for_code"]
