"""Data documents that differ from one another in the numbers their options carry.

Every delivery of a robust topic (docs/robust.md) names its recipient with a per-recipient
``robust`` option whose content carries that recipient's link seq and link epoch and the
publication's source seq. No two deliveries are the same document, so the memo of
:mod:`apexmesh.apex.memo`, which recognizes a document differing from an earlier one in
its ``content`` value only, never recognized one, and every delivery went through the
hardened parser and the option checks again: in bench/robust_pubsub.py that was most of
the CPU of subscribers and relays.

Here such a document is seen as a *shape* with *numbers*: the octets of the rest of the
document (after ``<data content='V'>``) between the values of its numbering attributes
(:data:`NUMBERED_ATTRIBUTES`, written as ``name="digits"``), and those values. A digit is
never markup, so two documents of one shape have the same element tree except for those
attribute values, and the data of the second is the data of the first with its numbers
in place. A :class:`NumberedTemplate` keeps the parsed data and the places of its
numbers in the option contents (and inline content), and is only made when it passes a
self-check (:meth:`NumberedTemplate.checked`): its rebuild of the document's own numbers
must equal the full parse, and its rebuild of other, distinct numbers must equal the full
parse of the document with those numbers. The memo makes a template the second time it
sees a shape, and remembers a refusal. Anything else (another quoting, a number in a
comment, an entity reference) is a different shape or no template, and the full parser
reads it.

The APEX layer does not interpret the numbers (option content is ``ANY``, RFC 3340
section 9.1); the robust elements check them when the final recipient reads its option.
Sans-I/O, no module-level state: templates live in the reader's memo.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import fields
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.data import (
    SHAPED_REST_MAX,
    Data,
    DataContent,
    Originator,
    Recipient,
    data_from,
)
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import Option

#: The attributes whose values are the numbers of a shape: those of the robust option
#: that change from delivery to delivery (apexmesh/pubsub/robust/elements.py
#: ``RobustInfo``; tests/apexmesh/pubsub/robust keeps the two in step). This
#: layer does not import the robust elements (it sits below them).
NUMBERED_ATTRIBUTES: Final = ("linkseq", "linkepoch", "sourceseq", "gapseq", "gap")

#: One number: `` name="digits"`` for a name of :data:`NUMBERED_ATTRIBUTES`, up to 20
#: digits (every 64-bit value; longer runs stay part of the shape). Only the parser's own
#: double-quoted form, which every apex-mesh sender writes (option content is kept in
#: canonical form); other writings are simply not recognized. Three groups, so that a
#: split keeps the name: (`` name="``, digits, ``"``).
_NUMBER: Final = re.compile(
    rb"( (?:" + b"|".join(name.encode() for name in NUMBERED_ATTRIBUTES) + rb')=")([0-9]{1,20})(")'
)
#: Every numbered option carries linkseq, sourceseq or gapseq: a document without this
#: is not searched (a plain delivery pays one substring search).
_MARK: Final = b'seq="'
#: What stands for each number in a shape: NUL, which no XML document holds (a document
#: holding one is not numbered, and the parser refuses it).
HOLE: Final = b"\x00"

#: Longest rest of a numbered document a memo keeps (a relay receives one data for about
#: 50 robust recipients of a pod, some 230 octets each): the bound on the memory of a
#: memo's templates is about three times this times :data:`KNOWN_NUMBERED_DOCUMENTS`.
NUMBERED_REST_MAX: Final = SHAPED_REST_MAX
#: How many numbered shapes a memo keeps by default (a relay sees one per batch of
#: recipients of a topic, an endpoint one per topic and source).
KNOWN_NUMBERED_DOCUMENTS: Final = 256


def numbers_of(rest: bytes) -> tuple[bytes, list[bytes]] | None:
    """``rest`` as (its shape: ``rest`` with :data:`HOLE` in place of each number; the
    numbers, in document order), or None when it carries no number (see the module
    docstring)."""
    if _MARK not in rest or HOLE in rest:
        return None
    parts = _NUMBER.split(rest)
    if len(parts) == 1:
        return None
    numbers = parts[2::4]
    parts[2::4] = [HOLE] * len(numbers)
    return b"".join(parts), numbers


def with_numbers(shape: bytes, numbers: list[bytes]) -> bytes:
    """The rest of the document of ``shape`` with ``numbers`` in place."""
    pieces = shape.split(HOLE)
    out = [b""] * (2 * len(pieces) - 1)
    out[0::2] = pieces
    out[1::2] = numbers
    return b"".join(out)


class _Text:
    """A text holding numbers (an option content, an inline content), split around
    them, so that any numbers are put in place by a slice assignment and a join."""

    __slots__ = ("count", "numbers", "parts")

    def __init__(self, text: bytes) -> None:
        #: ``text`` split by :data:`_NUMBER` (every fourth item from the third a number).
        self.parts = _NUMBER.split(text)
        #: The numbers of the text the template was made from.
        self.numbers: list[bytes] = self.parts[2::4]
        #: How many numbers the text holds.
        self.count = len(self.numbers)

    def fill(self, numbers: list[bytes], start: int) -> bytes:
        """The text with ``numbers[start:start + count]`` in place."""
        parts = self.parts.copy()
        parts[2::4] = numbers[start : start + self.count]
        return b"".join(parts)


def _setters(cls: type, names: tuple[str, ...]) -> tuple[Callable[[object, object], None], ...]:
    """The setters of ``names``, slots of the frozen dataclass ``cls``: a copy made
    with them costs a third of one made with ``object.__setattr__``."""
    return tuple(cls.__dict__[name].__set__ for name in names)


#: The fields of an option, the content last, and their setters.
_OPTION_FIELDS: Final = (*(f.name for f in fields(Option) if f.name != "content"), "content")
_OPTION_SETTERS: Final = _setters(Option, _OPTION_FIELDS)
#: The setters of a recipient's identity, options and serialization.
_RECIPIENT_SETTERS: Final = _setters(Recipient, ("identity", "options", "_xml"))
_new_object = object.__new__


class _OptionsTemplate:
    """The options of one containing element, each kept as it is or, when its content
    holds numbers, as a :class:`_Text` and its other fields."""

    __slots__ = ("count", "options", "texts", "values")

    def __init__(self, options: tuple[Option, ...]) -> None:
        self.options = options
        texts = [_Text(option.content) if _MARK in option.content else None for option in options]
        self.texts: tuple[_Text | None, ...] = tuple(
            text if text is not None and text.count else None for text in texts
        )
        #: Each option's fields but the content, in :data:`_OPTION_FIELDS` order.
        self.values = tuple(
            tuple(getattr(option, name) for name in _OPTION_FIELDS[:-1]) for option in options
        )
        #: How many numbers these options hold together.
        self.count = sum(text.count for text in self.texts if text is not None)

    def numbers(self) -> list[bytes]:
        return [number for text in self.texts if text is not None for number in text.numbers]

    def fill(self, numbers: list[bytes], start: int) -> tuple[Option, ...]:
        """The options with ``numbers[start:start + count]`` in place."""
        if not self.count:
            return self.options
        out: list[Option] = []
        for option, text, values in zip(self.options, self.texts, self.values, strict=True):
            if text is None:
                out.append(option)
                continue
            # Built without Option's checks: the template's option passed them, and
            # digits in place of digits change neither its well-formedness nor its
            # canonical form (the self-check showed the canonical form holds them).
            copy = _new_object(Option)
            for setter, value in zip(
                _OPTION_SETTERS, (*values, text.fill(numbers, start)), strict=True
            ):
                setter(copy, value)
            start += text.count
            out.append(copy)
        return tuple(out)


class _RecipientTemplate:
    """One recipient: kept as it is when its options hold no number, else made again
    with their numbers, its serialization too (a relay writes it per recipient)."""

    __slots__ = ("count", "options", "recipient", "xml")

    def __init__(self, recipient: Recipient) -> None:
        self.recipient = recipient
        self.options = _OptionsTemplate(recipient.options)
        #: How many numbers the recipient's options hold.
        self.count = self.options.count
        xml = _Text(recipient.to_xml()) if self.count else None
        #: The serialization around the numbers, when it holds the options' numbers and
        #: no other (None: serialized on first use, as any recipient).
        self.xml = xml if xml is not None and xml.numbers == self.options.numbers() else None

    def fill(self, numbers: list[bytes], start: int) -> Recipient:
        if not self.count:
            return self.recipient
        copy = _new_object(Recipient)
        set_identity, set_options, set_xml = _RECIPIENT_SETTERS
        set_identity(copy, self.recipient.identity)
        set_options(copy, self.options.fill(numbers, start))
        set_xml(copy, None if self.xml is None else self.xml.fill(numbers, start))
        return copy


class NumberedTemplate:
    """The data of one numbered shape, with the places of its numbers; see the module
    docstring. Make one with :meth:`checked`."""

    __slots__ = ("_content", "_count", "_data", "_options", "_originator", "_recipients")

    def __init__(self, data: Data) -> None:
        self._data = data
        self._originator = _OptionsTemplate(data.originator.options)
        self._recipients = tuple(_RecipientTemplate(r) for r in data.recipients)
        self._options = _OptionsTemplate(data.options)
        content = data.data_content
        text = None if content is None or _MARK not in content.content else _Text(content.content)
        self._content = text if text is not None and text.count else None
        #: How many numbers a document of this shape carries.
        self._count = (
            self._originator.count
            + sum(r.count for r in self._recipients)
            + self._options.count
            + (0 if self._content is None else self._content.count)
        )

    def _numbers(self) -> list[bytes]:
        """The numbers of the data this template was made from, in document order."""
        numbers = self._originator.numbers()
        for recipient in self._recipients:
            numbers.extend(recipient.options.numbers())
        numbers.extend(self._options.numbers())
        if self._content is not None:
            numbers.extend(self._content.numbers)
        return numbers

    @classmethod
    def checked(
        cls, data: Data, content: str, shape: bytes, numbers: list[bytes]
    ) -> NumberedTemplate | None:
        """A template of ``data``, parsed by the full parser from the document of
        ``content``, ``shape`` and ``numbers``; None when it fails the self-check.

        The check, made once per shape: the numbers found in the parsed data are the
        document's, in document order (none sits in a comment, a CDATA section that
        canonical form rewrites, or another attribute); the rebuild of the document's
        numbers equals ``data`` (fields and serialization); and the rebuild of distinct
        other numbers equals the full parse of the document written with them (so a
        number's place in the text is the place the parser puts it).
        """
        template = cls(data)
        if template._count != len(numbers) or template._numbers() != numbers:
            return None
        same = template.data(content, numbers)
        if same != data or same.to_xml() != data.to_xml():
            return None
        others = [b"%d" % (index + 1) for index in range(len(numbers))]
        if others == numbers:
            others = [b"%d" % (index + 2) for index in range(len(numbers))]
        raw = b"<data content='" + content.encode("ascii") + b"'>" + with_numbers(shape, others)
        try:
            parsed = data_from(_dtd.parse_root(raw), raw)
        except ApexError:
            return None
        rebuilt = template.data(content, others)
        if rebuilt != parsed or rebuilt.to_xml() != parsed.to_xml():
            return None
        return template

    def data(self, content: str, numbers: list[bytes]) -> Data:
        """The data of the document of this shape with ``content`` and ``numbers``
        (``content`` of plain characters, ``numbers`` as many as the shape holds)."""
        data = self._data
        at = 0
        originator = data.originator
        if self._originator.count:
            originator = Originator(
                identity=originator.identity, options=self._originator.fill(numbers, at)
            )
            at += self._originator.count
        recipients: list[Recipient] = []
        for template in self._recipients:
            recipients.append(template.fill(numbers, at))
            at += template.count
        options = self._options.fill(numbers, at)
        at += self._options.count
        data_content = data.data_content
        if self._content is not None and data_content is not None:
            data_content = DataContent(
                name=data_content.name, content=self._content.fill(numbers, at)
            )
        return data.with_parts(
            content=content,
            originator=originator,
            recipients=tuple(recipients),
            options=options,
            data_content=data_content,
        )


__all__ = [
    "HOLE",
    "KNOWN_NUMBERED_DOCUMENTS",
    "NUMBERED_ATTRIBUTES",
    "NUMBERED_REST_MAX",
    "NumberedTemplate",
    "numbers_of",
    "with_numbers",
]
