"""One lark LALR(1) parser per selector class, building while it reduces.

Both classes parse the same way: the class's callbacks (a lark ``Transformer`` passed as
``transformer=``) run as the LALR parser reduces, so no parse tree is built and nothing
recurses however deep a selector nests (the callbacks stop at
:data:`~.types.MAX_SELECTOR_DEPTH`); the length is checked before any parsing. Every
failure is the 567 of draft-wyman-apex-pubsub-00 section 5.8.1.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from lark import Lark
from lark.exceptions import LarkError, VisitError

from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.selection.types import TypeMap, check_length, incorrect


class Builder(Protocol):
    """The class's callbacks, which read the selector schema of the compile at hand."""

    types: TypeMap


class BottomUpParser:
    """``parse(text, types)`` returns what the callbacks built for the start rule."""

    __slots__ = ("_builder", "_parser", "what")

    def __init__(
        self,
        grammar: str,
        builder: Builder,
        *,
        lexer: Literal["basic", "contextual"],
        what: str,
    ) -> None:
        self.what = what
        self._builder = builder
        self._parser = Lark(grammar, parser="lalr", lexer=lexer, start="start", transformer=builder)

    def parse(self, text: str, types: TypeMap) -> Any:
        """567 (:class:`ApexError`) when ``text`` is too long, does not parse, or its
        callbacks refuse it. The parser calls back synchronously, so setting the schema
        for the duration of one parse is safe (one compile never sees another's)."""
        check_length(text)
        self._builder.types = types
        try:
            return self._parser.parse(text)
        except VisitError as exc:
            if isinstance(exc.orig_exc, ApexError):
                raise exc.orig_exc from None
            raise incorrect(f"selector is not {self.what}: {exc.orig_exc}") from None
        except LarkError as exc:
            first = str(exc).splitlines()[0][:200]
            raise incorrect(f"selector is not {self.what}: {first}") from None
        finally:
            self._builder.types = TypeMap()


__all__ = ["BottomUpParser", "Builder"]
