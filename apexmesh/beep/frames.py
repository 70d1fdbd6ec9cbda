"""BEEP frames (RFC 3080 section 2.2.1) and SEQ frames (RFC 3081 section 3.1.3).

This module turns bytes into frames and frames into bytes and knows nothing of channels
or sessions: semantic checks (sequence numbers, message numbers, windows) belong to the
session. It sits on the hot path, so frames are NamedTuples (created at C speed, unlike
frozen dataclasses) and the header is matched by one precompiled regular expression
applied in place on the receive buffer.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from apexmesh.beep.errors import FramingError
from apexmesh.beep.limits import MAX_HEADER_OCTETS, MAX_NUMBER, SEQNO_MODULUS

MSG: Final = "MSG"
RPY: Final = "RPY"
ERR: Final = "ERR"
ANS: Final = "ANS"
NUL: Final = "NUL"
SEQ: Final = "SEQ"

TRAILER: Final = b"END\r\n"

_DATA_HEADER: Final = re.compile(
    rb"(MSG|RPY|ERR|ANS|NUL) ([0-9]{1,10}) ([0-9]{1,10}) ([.*]) ([0-9]{1,10}) ([0-9]{1,10})"
    rb"(?: ([0-9]{1,10}))?\r\n"
)
_SEQ_HEADER: Final = re.compile(rb"SEQ ([0-9]{1,10}) ([0-9]{1,10}) ([0-9]{1,10})\r\n")
_KEYWORDS: Final = (b"MSG ", b"RPY ", b"ERR ", b"ANS ", b"NUL ", b"SEQ ")
_KEYWORD_NAMES: Final = {b"MSG": MSG, b"RPY": RPY, b"ERR": ERR, b"ANS": ANS, b"NUL": NUL}
_KEYWORD_OCTETS: Final = {name: octets for octets, name in _KEYWORD_NAMES.items()}


class Frame(NamedTuple):
    """A data frame: one MSG, RPY, ERR, ANS or NUL header, its payload and trailer."""

    #: "MSG", "RPY", "ERR", "ANS" or "NUL".
    keyword: str
    #: Channel number, 0..2147483647.
    channel: int
    #: Message number, 0..2147483647.
    msgno: int
    #: True for the continuation indicator "*" (more frames follow), False for ".".
    more: bool
    #: Sequence number of the first payload octet on this channel, modulo 2**32.
    seqno: int
    #: The payload octets (a fragment of the message's MIME entity).
    payload: bytes
    #: Answer number for ANS frames, None otherwise.
    ansno: int | None = None


class SeqFrame(NamedTuple):
    """A SEQ frame of the TCP mapping: a new receive window for one channel."""

    #: Channel number.
    channel: int
    #: The next sequence number the window's owner expects on this channel.
    ackno: int
    #: Octets the window's owner will accept beginning with ``ackno``.
    window: int


#: Builds a NamedTuple from a tuple of its fields without its Python-level ``__new__``
#: (a frame is made for every frame received).
_new_tuple = tuple.__new__


def encode_frame(
    keyword: str,
    channel: int,
    msgno: int,
    more: bool,
    seqno: int,
    payload: bytes | memoryview,
    ansno: int | None = None,
) -> bytes:
    """Return the octets of one data frame (header, payload, trailer)."""
    # Formatted as octets, not text then encoded: every reply an endpoint or a relay
    # sends is framed here.
    header = b"%b %d %d %b %d %d" % (
        _KEYWORD_OCTETS[keyword],
        channel,
        msgno,
        b"*" if more else b".",
        seqno,
        len(payload),
    )
    end = b"\r\n" if ansno is None else b" %d\r\n" % ansno
    return b"".join((header, end, payload, TRAILER))


def encode_seq(channel: int, ackno: int, window: int) -> bytes:
    """Return the octets of one SEQ frame."""
    return f"SEQ {channel} {ackno} {window}\r\n".encode("ascii")


class FrameReader:
    """Incremental frame parser over a receive buffer.

    Feed it bytes with :meth:`feed`; :meth:`next_frame` returns the next complete frame,
    or None when more bytes are needed. A poorly-formed frame raises
    :class:`FramingError`; after that the reader must not be used again (the session is
    terminated, RFC 3080 section 2.2.1.1).

    ``max_payload`` bounds the size a header may announce: a frame larger than any window
    the session ever advertised is a protocol violation, and refusing it at the header
    stops a peer from making us buffer gigabytes before the size check.
    """

    __slots__ = ("_buf", "_need", "_pos", "max_payload")

    def __init__(self, max_payload: int) -> None:
        # bytes while it is exactly one received chunk (parsed in place, payloads are
        # single-copy slices); a bytearray once octets must be accumulated.
        self._buf: bytes | bytearray = b""
        self._pos = 0
        #: Octets a partly received frame needs in all (its header was already parsed):
        #: until that many are buffered, next_frame answers None without parsing again.
        self._need = 0
        self.max_payload = max_payload

    def feed(self, data: bytes) -> None:
        """Append received octets to the buffer."""
        buf = self._buf
        pos = self._pos
        if pos >= len(buf):
            # Nothing pending (the common case): keep the chunk itself, no copy.
            self._buf = data if type(data) is bytes else bytes(data)
            self._pos = 0
            return
        if isinstance(buf, bytearray):
            if pos > 65536:
                # Compacting only past 64 KiB keeps del[:n] (O(n)) amortised.
                del buf[:pos]
                self._pos = 0
        else:
            self._buf = buf = bytearray(memoryview(buf)[pos:])
            self._pos = 0
        buf += data

    @property
    def buffered(self) -> int:
        """Octets received and not yet consumed by a complete frame."""
        return len(self._buf) - self._pos

    def take_trailing_data(self) -> bytes:
        """Remove and return unparsed octets (used when the transport is re-tuned)."""
        rest = bytes(self._buf[self._pos :])
        self._buf = b""
        self._pos = 0
        self._need = 0
        return rest

    def next_frame(self) -> Frame | SeqFrame | None:
        """Return the next complete frame, or None if the buffer holds only part of one."""
        buf = self._buf
        pos = self._pos
        avail = len(buf) - pos
        if avail == 0 or avail < self._need:
            return None
        match = _DATA_HEADER.match(buf, pos)
        if match is None:
            return self._next_other(buf, pos, avail)
        keyword_b, chan_b, msgno_b, more_b, seqno_b, size_b, ansno_b = match.groups()
        size = int(size_b)
        start = match.end()
        end = start + size
        if end + 5 > len(buf):
            if size > self.max_payload:
                raise FramingError(f"frame announces {size} octets, over the limit")
            self._need = end + 5 - pos
            return None
        self._need = 0
        if not buf.startswith(TRAILER, end):
            raise FramingError("frame trailer is not END CRLF (or payload size mismatch)")
        channel = int(chan_b)
        msgno = int(msgno_b)
        seqno = int(seqno_b)
        if channel > MAX_NUMBER or msgno > MAX_NUMBER or seqno >= SEQNO_MODULUS:
            raise FramingError("frame header number out of range")
        if size > self.max_payload:
            raise FramingError(f"frame announces {size} octets, over the limit")
        keyword = _KEYWORD_NAMES[keyword_b]
        ansno: int | None = None
        if ansno_b is not None:
            if keyword != ANS:
                raise FramingError(f"{keyword} header carries an answer number")
            ansno = int(ansno_b)
            if ansno > MAX_NUMBER:
                raise FramingError("answer number out of range")
        elif keyword == ANS:
            raise FramingError("ANS header lacks the answer number")
        self._pos = end + 5
        payload = buf[start:end]
        if type(payload) is not bytes:
            payload = bytes(payload)
        return _new_tuple(Frame, (keyword, channel, msgno, more_b == b"*", seqno, payload, ansno))

    def _next_other(self, buf: bytes | bytearray, pos: int, avail: int) -> SeqFrame | None:
        match = _SEQ_HEADER.match(buf, pos)
        if match is not None:
            channel, ackno, window = (int(g) for g in match.groups())
            if channel > MAX_NUMBER or ackno >= SEQNO_MODULUS or window > MAX_NUMBER:
                raise FramingError("SEQ frame number out of range")
            self._pos = match.end()
            return SeqFrame(channel, ackno, window)
        # No complete header: decide between "need more octets" and garbage.
        prefix = bytes(buf[pos : pos + 4])
        if not any(k.startswith(prefix) or prefix.startswith(k) for k in _KEYWORDS):
            raise FramingError(f"frame header does not start with a BEEP keyword: {prefix!r}")
        newline = buf.find(b"\n", pos, pos + MAX_HEADER_OCTETS)
        if newline >= 0:
            line = bytes(buf[pos : newline + 1])
            raise FramingError(f"poorly-formed frame header: {line[:MAX_HEADER_OCTETS]!r}")
        if avail >= MAX_HEADER_OCTETS:
            raise FramingError("frame header longer than any valid header")
        return None
