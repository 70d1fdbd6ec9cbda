"""Fuzz entry point for the two selector parsers (JMS and RFC-2254).

``fuzz_one(data)`` never raises for any input: compiling a selector may only fail with
the 567 of draft-wyman-apex-pubsub-00 section 5.8.1 (an :class:`ApexError`), and a
compiled selector must evaluate against any message without raising and within the
bounds (no recursion, no backtracking). Any other exception is a bug.

Run it with atheris when installed::

    python tests/fuzz/fuzz_selectors.py [corpus_dir] [-max_total_time=60]

The unit suite (``tests/apexmesh/pubsub/selection/test_pubsub_selector_fuzz.py``) drives
it with Hypothesis for a bounded number of examples, so it works without atheris.
"""

from __future__ import annotations

import sys

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.selection.registry import default_classes
from apexmesh.pubsub.selection.types import Kind, MessageView, TypeMap

CLASSES = default_classes()
TYPES = (
    TypeMap(),
    TypeMap(
        kinds={"a": Kind.EXACT, "b": Kind.APPROX, "s": Kind.STRING, "t": Kind.BOOLEAN},
        open=False,
    ),
)
VIEWS = (
    MessageView.of_values({}),
    MessageView.of_values(
        {
            "a": ["5", "-3", "x"],
            "b": ["2.5e1", "NaN"],
            "s": ["abc", "", "a%b_c\\"],
            "t": ["true", "0"],
            "x": ["9223372036854775807"],
        }
    ),
    # A text/* body (draft-wyman 7.2, 7.3): the text of message-content.
    MessageView.of_text(" abc a%b_c\\ (x) *y* 42 \n"),
)


def fuzz_selector(class_name: str, text: str) -> None:
    """Compile ``text`` as ``class_name`` under each schema and evaluate it."""
    for types in TYPES:
        try:
            selector = CLASSES.compile(class_name, text, types)
        except ApexError as exc:
            if exc.code != ApexReplyCode.INCORRECT_SELECTOR:
                raise
            continue
        if selector is None:
            continue
        for view in VIEWS:
            selector.matches(view)
            selector.access_predicates()


def fuzz_one(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    for class_name in ("JMS", "RFC-2254"):
        fuzz_selector(class_name, text)


def main() -> None:  # pragma: no cover - needs atheris
    import atheris  # type: ignore[import-not-found]

    atheris.Setup(sys.argv, fuzz_one)
    atheris.Fuzz()


if __name__ == "__main__":  # pragma: no cover
    main()
