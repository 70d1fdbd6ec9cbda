"""Wildcard patterns (JMS ``LIKE``, RFC 2254 substrings) matched without backtracking.

Both selector classes have the same shape of pattern: fixed parts separated by "any
sequence" wildcards (JMS ``%``, RFC 2254 ``*``), where a JMS fixed part may also hold
"any one character" (``_``). Translating such a pattern into a backtracking regular
expression (``.*a.*a.*a...b``) makes a 40-character pattern take exponential time on a
long text. Here the parts are matched greedily, leftmost first, which is exact for this
pattern language: the first part is anchored at the start, the last at the end, and each
middle part is taken at its leftmost occurrence after the previous one (taking a later
occurrence can only leave less room for the rest). A part without ``_`` is found with
``str.find`` (linear); a part with ``_`` is compared position by position, so the whole
match costs at most text length x longest such part, and the selector length bounds
that part.
"""

from __future__ import annotations

from dataclasses import dataclass

#: One fixed part: characters, ``None`` standing for any one character.
Part = tuple[str | None, ...]


def _plain(part: Part) -> str | None:
    """The part as a string when it has no single-character wildcard."""
    if any(char is None for char in part):
        return None
    return "".join(part)  # type: ignore[arg-type]


def _at(text: str, start: int, part: Part) -> bool:
    if start + len(part) > len(text):
        return False
    return all(char is None or text[start + i] == char for i, char in enumerate(part))


def _find(text: str, part: Part, start: int, end: int) -> int:
    """Leftmost index >= start where ``part`` fits entirely before ``end``; -1 if none."""
    plain = _plain(part)
    if plain is not None:
        return text.find(plain, start, end)
    for index in range(start, end - len(part) + 1):
        if _at(text, index, part):
            return index
    return -1


@dataclass(frozen=True, slots=True)
class Wildcard:
    """``initial`` [any ``middle``...] any ``final``, or exactly ``initial`` when
    ``exact`` (a pattern without any-sequence wildcards)."""

    initial: Part
    middle: tuple[Part, ...] = ()
    final: Part = ()
    exact: bool = False

    @classmethod
    def of_parts(cls, parts: list[Part]) -> Wildcard:
        """From the fixed parts between any-sequence wildcards: one part means no
        wildcard; ``["a", "", "b"]`` is ``a%%b``."""
        if len(parts) == 1:
            return cls(initial=parts[0], exact=True)
        middle = tuple(part for part in parts[1:-1] if part)
        return cls(initial=parts[0], middle=middle, final=parts[-1])

    def matches(self, text: str) -> bool:
        if self.exact:
            return len(text) == len(self.initial) and _at(text, 0, self.initial)
        head, tail = len(self.initial), len(self.final)
        if head + tail > len(text):
            return False
        if not _at(text, 0, self.initial) or not _at(text, len(text) - tail, self.final):
            return False
        position, end = head, len(text) - tail
        for part in self.middle:
            found = _find(text, part, position, end)
            if found < 0:
                return False
            position = found + len(part)
        return True

    def prefix(self) -> str:
        """The literal text every match starts with."""
        plain = []
        for char in self.initial:
            if char is None:
                break
            plain.append(char)
        return "".join(plain)


__all__ = ["Part", "Wildcard"]
