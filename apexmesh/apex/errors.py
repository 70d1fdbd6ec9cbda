"""The typed error of the APEX layer (RFC 3340 section 10).

Every rejection of peer input in :mod:`apexmesh.apex` is an :class:`ApexError` carrying
the reply code the RFC names, so that the session boundary can turn it into the
``<error code='...'>`` (or ``reply``) element without a second mapping table, and so that
no untyped exception ever escapes from the parsing of a peer's bytes (STYLE.md 3.3,
habits 4 and 5).
"""

from __future__ import annotations

from apexmesh.apex.codes import ApexReplyCode


class ApexError(ValueError):
    """An APEX element or operation cannot be accepted; ``code`` is the reply to send.

    ``trans_id`` is the transaction identifier of the offending element when one could be
    read, so that the answer can name it (RFC 3340 section 6.1.2).
    """

    def __init__(self, code: ApexReplyCode, message: str, *, trans_id: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.trans_id = trans_id

    @property
    def transient(self) -> bool:
        """True for 4xx codes: the same request may succeed later."""
        return self.code.transient


__all__ = ["ApexError"]
