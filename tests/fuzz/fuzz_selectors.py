"""Fuzz entry point for the two selector parsers (JMS and RFC-2254).

``fuzz_one(data)`` never raises for any input: compiling a selector may only fail with
the 567 of draft-wyman-apex-pubsub-00 section 5.8.1 (an :class:`ApexError`), and a
compiled selector must evaluate against any message without raising and within the
bounds (no recursion, no backtracking). Any other exception is a bug.

Run it with atheris when installed::

    python tests/fuzz/fuzz_selectors.py [corpus_dir] [-max_total_time=60]

or with the seeded mutator over the draft's example selectors, for as long as wanted::

    python tests/fuzz/fuzz_selectors.py --seconds 600

The unit suite (``tests/apexmesh/pubsub/selection/test_pubsub_selector_fuzz.py``) drives
it with Hypothesis for a bounded number of examples, so it works without atheris.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script (atheris, --seconds): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.selection.registry import default_classes
from apexmesh.pubsub.selection.types import Kind, MessageView, TypeMap
from tests.support.fuzzing import fuzz_main, mutate

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


#: Selectors the mutator starts from: the draft's examples (5.6, 5.8) and one of each
#: operator family of both classes.
SEEDS: tuple[bytes, ...] = (
    b"symbol = 'IBM' AND price > 120.5",
    b"symbol IN ('IBM', 'SUNW') AND (change > 2 OR change < -2)",
    b"name LIKE 'a\\%b_%' ESCAPE '\\' AND NOT (x IS NULL)",
    b"a BETWEEN 1 AND 5 OR b NOT BETWEEN -2.5e1 AND 0 OR t = TRUE",
    b"(s <> 'abc') AND (a * 2 + b / 3 - -1 >= 4)",
    b"(&(symbol=IBM)(|(price>=120)(change<=-2)))",
    b"(&(objectClass=quote)(!(s=*a\\2a*b*))(a~=5)(s=\\28x\\29))",
    b"(|(a=*)(t=true)(s=ab*c*))",
)
#: Numbers where the checks live: bounds of 64-bit integers, floats' edges.
NUMBERS: tuple[int, ...] = (0, -1, 1, 2**31, 2**63 - 1, 2**63, -(2**63), 10**400)
#: Each class's own tokens.
INSERTS: tuple[bytes, ...] = (
    b"(", b")", b"&", b"|", b"!", b"=", b"~=", b">=", b"<=", b"*", b"\\", b"\\2a",
    b"'", b"AND", b"OR", b"NOT", b"BETWEEN", b"IN", b"LIKE", b"ESCAPE", b"IS NULL",
    b"NULL", b"TRUE", b"1e308", b"%", b"_",
)  # fmt: skip


def run(seconds: float, *, seed: int = 2254, limit: int | None = None) -> int:
    """Fuzz with the seeded mutator for ``seconds`` (or ``limit`` inputs); the count."""
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    done = 0
    while time.monotonic() < deadline and (limit is None or done < limit):
        data = mutate(rng, rng.choice(SEEDS), rng.choice(SEEDS), numbers=NUMBERS, inserts=INSERTS)
        fuzz_one(data)
        done += 1
    return done


def main() -> None:  # pragma: no cover - a long run, by hand
    fuzz_main("fuzz_selectors", run, fuzz_one)


if __name__ == "__main__":  # pragma: no cover
    main()
