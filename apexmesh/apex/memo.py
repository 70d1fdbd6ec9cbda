"""What a reader of many similar APEX documents remembers between them, owned by it.

A relay, an endpoint SDK or a service parses thousands of documents that differ from
earlier ones in one attribute (a fresh Content-ID) and name the same recipients and
options again and again. A :class:`ParseMemo` keeps, each in its own bounded cache:

* parsed ``data`` by the rest of their document (:func:`apexmesh.apex.data.document_shape`),
  so a document that differs from one parsed before in its ``content`` value only is
  answered without the hardened parser and the DTD checks;
* templates of data whose options carry numbers that change with every document (the
  link and source seqs of a robust delivery), by the rest of their document without
  those numbers (:mod:`apexmesh.apex.numbered`), so that such a document is answered
  the same way;
* options by their serialization;
* recipients without options by endpoint (one shared immutable object each, whose
  serialization is made once).

The memo belongs to whoever parses (one per relay process, per SDK client, per service);
the parsing functions take it as an argument and parse everything without one. Nothing
is remembered at module level.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Final

from apexmesh.apex.data import KNOWN_DOCUMENTS, Data, Recipient, document_shape, rememberable
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.numbered import (
    KNOWN_NUMBERED_DOCUMENTS,
    NUMBERED_REST_MAX,
    NumberedTemplate,
    numbers_of,
)
from apexmesh.apex.options import Option
from apexmesh.common.cache import BoundedCache

#: Options remembered by serialization.
KNOWN_OPTIONS: Final = 4096
#: Longest option serialization remembered.
MAX_OPTION_KEY_OCTETS: Final = 1024
#: Recipients without options remembered (a fan-out names each subscriber every time).
KNOWN_RECIPIENTS: Final = 65536


class ParseMemo:
    """See the module docstring."""

    __slots__ = (
        "_documents",
        "_last",
        "_made",
        "_numbered",
        "_options",
        "_recipients",
        "_shapes",
    )

    def __init__(
        self,
        *,
        documents: int = KNOWN_DOCUMENTS,
        numbered: int = KNOWN_NUMBERED_DOCUMENTS,
        options: int = KNOWN_OPTIONS,
        recipients: int = KNOWN_RECIPIENTS,
    ) -> None:
        self._documents: BoundedCache[bytes, Data] = BoundedCache("parsed data", documents)
        self._numbered: BoundedCache[bytes, NumberedTemplate] = BoundedCache(
            "numbered data", numbered
        )
        #: Numbered shapes without a template: True seen once, False refused by the
        #: self-check (see :meth:`remember_data`).
        self._shapes: BoundedCache[bytes, bool] = BoundedCache("numbered shapes", numbered)
        self._options: BoundedCache[bytes, Option] = BoundedCache("parsed options", options)
        self._made: BoundedCache[Hashable, Option] = BoundedCache("built options", options)
        self._recipients: BoundedCache[Endpoint, Recipient] = BoundedCache(
            "plain recipients", recipients
        )
        #: The rest and data of the last plain document answered from ``_documents``: a
        #: subscriber mostly receives one topic's data after data, and comparing octets
        #: costs less than the number search, the hash and the cache's bookkeeping.
        self._last: tuple[bytes, Data] | None = None

    def known_data(self, raw: bytes) -> Data | None:
        """The data of document ``raw`` when one that differed only in its ``content``
        value (and in the numbers of its options, :mod:`apexmesh.apex.numbered`) was
        remembered, else None."""
        shape = document_shape(raw)
        if shape is None:
            return None
        rest, content = shape
        last = self._last
        if last is not None and last[0] == rest:
            return last[1].with_content(content)
        numbered = numbers_of(rest)
        if numbered is not None:
            template = self._numbered.get(numbered[0])
            return None if template is None else template.data(content, numbered[1])
        known = self._documents.get(rest)
        if known is None:
            return None
        self._last = (rest, known)
        return known.with_content(content)

    def remember_data(self, raw: bytes, data: Data) -> None:
        """Keep ``data``, parsed from ``raw`` by the full parser, for :meth:`known_data`
        (a numbered document only when its template passes the self-check)."""
        shape = document_shape(raw)
        if shape is None:
            return
        rest, content = shape
        numbered = numbers_of(rest)
        if numbered is None:
            if rememberable(rest):
                self._documents.put(rest, data)
            return
        key, numbers = numbered
        if len(rest) > NUMBERED_REST_MAX:
            return
        # A template costs two parses and its making (the self-check): it is made the
        # second time a shape is seen, and a refusal is remembered, so that shapes seen
        # once each (a topic's thousands of items) or refused cost no more than a parse.
        seen = self._shapes.get(key)
        if seen is None:
            self._shapes.put(key, True)
            return
        if not seen:
            return
        template = NumberedTemplate.checked(data, content, key, numbers)
        if template is None:
            self._shapes.put(key, False)
            return
        self._shapes.pop(key)
        self._numbered.put(key, template)

    def option_made(self, key: Hashable, build: Callable[[], Option]) -> Option:
        """An option this reader builds again and again (the dataHopping of every
        publication of a topic), built once per ``key``: an Option checks and
        canonicalizes its content when built, which costs more than the lookup."""
        return self._made.get_or_build(key, build)

    def option(self, key: bytes) -> Option | None:
        """The option serialized as ``key``, when remembered."""
        return self._options.get(key)

    def remember_option(self, key: bytes, option: Option) -> None:
        if len(key) <= MAX_OPTION_KEY_OCTETS:
            self._options.put(key, option)

    def recipient(self, identity: Endpoint) -> Recipient:
        """The shared recipient element without options for ``identity``."""
        known = self._recipients.get(identity)
        if known is None:
            known = Recipient(identity=identity)
            self._recipients.put(identity, known)
        return known


__all__ = ["KNOWN_OPTIONS", "KNOWN_RECIPIENTS", "ParseMemo"]
