"""Message selector classes (draft-wyman-apex-pubsub-00 section 5.4.1) by name.

"Support for particular message selector classes is implementation-dependent": a class
is one module exposing an object with a ``name`` and a ``compile(text, types)`` that
returns a :class:`~.types.Selector` or raises 567; :func:`default_classes` lists the
ones this service offers. A subscription naming any other class is answered 566.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Protocol

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.selection.jms import JmsClass
from apexmesh.pubsub.selection.ldap import LdapClass
from apexmesh.pubsub.selection.types import Selector, TypeMap


class SelectorClass(Protocol):
    """A selector class registration (section 7.1)."""

    @property
    def name(self) -> str: ...

    def compile(self, text: str, types: TypeMap) -> Selector: ...


class SelectorClasses:
    """The classes a service supports, looked up case-insensitively by name."""

    __slots__ = ("_by_name",)

    def __init__(self, classes: Iterable[SelectorClass]) -> None:
        self._by_name: Mapping[str, SelectorClass] = MappingProxyType(
            {selector_class.name.casefold(): selector_class for selector_class in classes}
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(selector_class.name for selector_class in self._by_name.values())

    def get(self, name: str) -> SelectorClass | None:
        return self._by_name.get(name.casefold())

    def compile(self, name: str, text: str, types: TypeMap) -> Selector | None:
        """The selector ``text`` of class ``name`` checked against ``types``.

        None for an empty selector (JMS 3.8.1.1: "treated as a null and indicates that
        there is no message selector"; section 5.6: the subscription matches every
        message). 566 for a class not supported, 567 for an incorrect selector.
        """
        selector_class = self.get(name)
        if selector_class is None:
            raise ApexError(
                ApexReplyCode.UNSUPPORTED_SELECTOR_CLASS,
                f"selector class {name[:64]!r} is not supported (supported: "
                f"{', '.join(self.names)})",
            )
        if not text.strip():
            return None
        return selector_class.compile(text, types)


def default_classes() -> SelectorClasses:
    """The classes of sections 7.2 and 7.3."""
    return SelectorClasses((LdapClass(), JmsClass()))


__all__ = ["SelectorClass", "SelectorClasses", "default_classes"]
