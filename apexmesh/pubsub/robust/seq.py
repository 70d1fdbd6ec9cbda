"""Link sequence arithmetic (XEP-0040 section 2.2).

A link sequence number increases by one per delivery and per heartbeat; after the
largest value of the link's resolution (16, 32 or 64 bits, a topic setting reported by
source queries) it continues at **1**, not 0: zero is reserved for resynchronisation
("Zero should not be used in the situation of sequence number wrapping/rollover, wherein
the value 1 should be used"). The 16-bit run of the XEP is ``..., 65534, 65535, 1, 2``.

So the numbers in use form a cycle of ``2**bits - 1`` values (1 .. max). Comparison across
the wrap is serial-number arithmetic (RFC 1982's idea on that cycle): ``b`` is after
``a`` when the forward distance from ``a`` to ``b`` is less than half the cycle. Two
numbers half a cycle apart or more cannot be ordered; a link never has that many
deliveries outstanding (a stub asks for repair long before).
"""

from __future__ import annotations

import enum
from typing import Final

#: Link seq of a resynchronisation (XEP 2.2: "Zero is used to reset").
RESYNC: Final = 0

#: Largest source sequence number: a Redis counter (signed 64-bit INCR). Source seqs
#: never wrap in practice (2**63 publications at 10**6/s is 292,000 years).
MAX_SOURCE_SEQ: Final = (1 << 63) - 1


class Resolution(enum.IntEnum):
    """Bits of a link sequence number (XEP 2.2 "bit resolution", section 4)."""

    BITS16 = 16
    BITS32 = 32
    BITS64 = 64

    @property
    def max_seq(self) -> int:
        """The largest link seq; the next one is 1."""
        return (1 << int(self)) - 1

    @property
    def cycle(self) -> int:
        """How many distinct non-zero link seqs there are (1 .. max)."""
        return self.max_seq

    def valid(self, seq: int) -> bool:
        """True for 0 (resync) and every number the resolution can carry."""
        return 0 <= seq <= self.max_seq

    def next(self, seq: int) -> int:
        """The link seq after ``seq``: +1, 1 after the largest, 1 after a resync (0)."""
        return 1 if seq >= self.max_seq else seq + 1

    def advance(self, seq: int, count: int) -> int:
        """The link seq ``count`` >= 0 steps after ``seq`` (0 counts as the step before
        1)."""
        if count == 0:
            return seq
        return (seq - 1 + count) % self.cycle + 1 if seq else (count - 1) % self.cycle + 1

    def distance(self, a: int, b: int) -> int:
        """Forward steps from ``a`` to ``b`` (both non-zero), 0 .. cycle - 1."""
        return (b - a) % self.cycle

    def after(self, a: int, b: int) -> bool:
        """True when ``b`` comes after ``a`` across the wrap (both non-zero)."""
        return 0 < self.distance(a, b) <= self.cycle // 2

    def delta(self, a: int, b: int) -> int:
        """Signed steps from ``a`` to ``b`` (both non-zero): positive when ``b`` is after
        ``a``, negative when before, in ``-(cycle // 2) .. cycle // 2``."""
        d = self.distance(a, b)
        return d if d <= self.cycle // 2 else d - self.cycle

    def span(self, first: int, last: int) -> int:
        """How many link seqs ``first .. last`` covers, wrapping (both non-zero)."""
        return self.distance(first, last) + 1


def resolution_of(bits: int) -> Resolution:
    """The resolution for ``bits``; ValueError for anything but 16, 32 and 64."""
    return Resolution(bits)


__all__ = ["MAX_SOURCE_SEQ", "RESYNC", "Resolution", "resolution_of"]
