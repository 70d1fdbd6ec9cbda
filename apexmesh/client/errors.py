"""Typed errors of the endpoint SDK (RFC 3340 section 10 reply codes).

Every failure an application sees carries the three-digit reply code that describes it,
so that callers branch on ``exc.code`` (553, 537, 554, 555, ...) rather than on text:

* :class:`ApexRequestError`: the relay answered an operation (attach, terminate, data)
  with an ``error`` element (RFC 3340 sections 4.4.1, 4.4.3, 4.4.4), or refused the
  APEX channel itself;
* :class:`AttachmentTerminatedError`: the attachment ended (our terminate, the relay's
  terminate of section 4.4.3, or the BEEP session going away, section 6.1.1) and a
  receiver or sender of that attachment is woken with it.
"""

from __future__ import annotations

from typing import Final

#: Code used when the BEEP session ends under an attachment: "service not available"
#: (RFC 3340 section 10), the transient code for "closing transmission channel".
SESSION_ENDED_CODE: Final = 421


class ApexClientError(Exception):
    """Base class of the SDK's errors; ``code`` is an RFC 3340 section 10 reply code."""

    def __init__(self, code: int, text: str = "") -> None:
        super().__init__(f"{code} {text}".rstrip())
        self.code = code
        self.text = text

    @property
    def transient(self) -> bool:
        """True for 4xx codes: the same request may succeed later."""
        return 400 <= self.code < 500


class ApexRequestError(ApexClientError):
    """The relay answered an APEX operation with ``<error code='...'>``.

    ``trans_id`` names the operation's transaction identifier when it had one (attach,
    terminate), None for data.
    """

    def __init__(self, code: int, text: str = "", *, trans_id: int | None = None) -> None:
        super().__init__(code, text)
        self.trans_id = trans_id


class SessionClosedError(ApexClientError):
    """The client was closed, or its BEEP session ended, before an operation completed;
    with the session, every attachment is gone (RFC 3340 section 6.1.1). ``code`` is
    421."""

    def __init__(self, text: str = "BEEP session ended") -> None:
        super().__init__(SESSION_ENDED_CODE, text)


class PubsubError(ApexRequestError):
    """A pubsub operation or publication was refused (draft-schwartz-apex-pubsub-02):
    ``code`` is the service's reply code (537 not authorized, 550 no such topic for a
    publication, 553 no such topic or one that exists, 555 ...), ``text`` its
    diagnostic, ``trans_id`` the operation's transID (None for a publication) and
    ``topic`` the topic it was about, when there was one."""

    def __init__(
        self,
        code: int,
        text: str = "",
        *,
        trans_id: int | None = None,
        topic: str | None = None,
    ) -> None:
        super().__init__(code, text, trans_id=trans_id)
        self.topic = topic


class AttachmentTerminatedError(ApexClientError):
    """The attachment is over; ``code``/``text`` come from the terminate that ended it
    (250 for our own, the relay's code for a relay-initiated one, 421 when the session
    ended)."""


__all__ = [
    "SESSION_ENDED_CODE",
    "ApexClientError",
    "ApexRequestError",
    "AttachmentTerminatedError",
    "PubsubError",
    "SessionClosedError",
]
