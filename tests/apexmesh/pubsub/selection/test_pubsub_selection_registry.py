"""Selector classes by name (5.4.1): 566 for a class not supported, no selector for an
empty one, adding a class is one object with a name and a compile."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.selection.registry import SelectorClasses, default_classes
from apexmesh.pubsub.selection.types import AccessPredicate, MessageView, TypeMap

pytestmark = pytest.mark.unit


def test_the_registered_classes_and_566() -> None:
    classes = default_classes()
    assert set(classes.names) == {"JMS", "RFC-2254"}
    assert classes.get("jms") is classes.get("JMS")
    with pytest.raises(ApexError) as caught:
        classes.compile("XPath", "/a", TypeMap())
    assert caught.value.code == 566
    assert "JMS" in str(caught.value)
    assert classes.compile("JMS", "   ", TypeMap()) is None  # 3.8.1.1: empty is none


@dataclass(frozen=True)
class _Always:
    text: str
    selector_class: str = "ALWAYS"

    def matches(self, view: MessageView) -> bool:
        return True

    def access_predicates(self) -> tuple[AccessPredicate, ...]:
        return ()


class _AlwaysClass:
    name = "ALWAYS"

    def compile(self, text: str, types: TypeMap) -> _Always:
        return _Always(text)


def test_a_class_is_one_object() -> None:
    classes = SelectorClasses((_AlwaysClass(),))
    selector = classes.compile("always", "anything", TypeMap())
    assert selector is not None
    assert selector.matches(MessageView.of_values({}))
