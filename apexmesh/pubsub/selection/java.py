"""Java values and SQL's three-valued logic, as JMS selectors evaluate them (Jakarta
Messaging 3.8.1): exact values are Java longs (64 bits, wrapping), exact and approximate
values meet as doubles (numeric promotion), comparisons of unlike kinds are false, and
AND, OR and NOT follow tables 3-4 to 3-6 with ``None`` for UNKNOWN.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable
from typing import Any, Final

from apexmesh.pubsub.selection.types import MISMATCH, Value

LONG_MIN: Final = -(1 << 63)
LONG_MAX: Final = (1 << 63) - 1

#: TRUE, FALSE or UNKNOWN (None).
Truth = bool | None


def wrap(number: int) -> int:
    """Java long arithmetic wraps around."""
    return (number - LONG_MIN) % (1 << 64) + LONG_MIN


def not_(value: Truth) -> Truth:
    return None if value is None else not value


def any_(values: Iterable[Truth]) -> Truth:
    """OR over instances (3.8.1.2 table 3-5): TRUE if any, else UNKNOWN if any."""
    unknown = False
    for value in values:
        if value:
            return True
        if value is None:
            unknown = True
    return None if unknown else False


def numeric_compare(op: Callable[[Any, Any], bool]) -> Callable[[Value, Value], Truth]:
    def compare(left: Value, right: Value) -> Truth:
        if left is MISMATCH or right is MISMATCH:
            return False
        if isinstance(left, float) or isinstance(right, float):
            return op(float(left), float(right))  # type: ignore[arg-type]
        return op(left, right)

    return compare


def plain_compare(op: Callable[[Any, Any], bool]) -> Callable[[Value, Value], Truth]:
    def compare(left: Value, right: Value) -> Truth:
        if left is MISMATCH or right is MISMATCH:
            return False
        return op(left, right)

    return compare


OPERATORS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "=": operator.eq,
    "<>": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def and_(values: Iterable[Truth]) -> Truth:
    """AND (3.8.1.2 table 3-4): FALSE if any, else UNKNOWN if any."""
    unknown = False
    for value in values:
        if value is False:
            return False
        if value is None:
            unknown = True
    return None if unknown else True


def arithmetic(symbol: str, left: Value, right: Value) -> Value | None:
    """One Java arithmetic operation; None where Java throws (exact division by zero)."""
    if left is MISMATCH or right is MISMATCH:
        return MISMATCH
    if isinstance(left, float) or isinstance(right, float):
        a, b = float(left), float(right)  # type: ignore[arg-type]
        if symbol == "/":
            if b == 0.0:
                return (
                    math.nan
                    if a == 0.0 or math.isnan(a)
                    else math.copysign(math.inf, a) * math.copysign(1.0, b)
                )
            return a / b
        return {"+": a + b, "-": a - b, "*": a * b}[symbol]
    x, y = int(left), int(right)  # type: ignore[call-overload]
    if symbol == "/":
        if y == 0:
            return None
        quotient = abs(x) // abs(y)
        return wrap(quotient if (x < 0) == (y < 0) else -quotient)
    return wrap({"+": x + y, "-": x - y, "*": x * y}[symbol])


__all__ = [
    "LONG_MAX",
    "LONG_MIN",
    "OPERATORS",
    "Truth",
    "and_",
    "any_",
    "arithmetic",
    "not_",
    "numeric_compare",
    "plain_compare",
    "wrap",
]
