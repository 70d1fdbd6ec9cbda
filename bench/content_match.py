"""Content-based matching: the selector index against evaluating every selector, one run.

Setup (draft-wyman-apex-pubsub-00's stock-quote topic, sections 5.2 to 5.8): one topic
whose selector schema types ``symbol`` as a string and the prices as decimals;
subscriptions drawn from a mix modelled on the draft's examples, over 2,000 symbols:

* 55 % JMS ``symbol = 'S0042' AND net-change-pct > 3.5`` (one symbol, a move up);
* 15 % JMS ``symbol IN ('S0001', 'S0777', 'S1234') AND (net-change-pct > 5.0 OR
  net-change-pct < -5.0)`` (section 5.8's example, three symbols);
* 15 % RFC-2254 ``(&(symbol=S0042)(|(net-change-pct>=5.0)(net-change-pct<=-5.0)))``
  (section 5.6's example);
* 10 % JMS ``symbol = 'S0042' AND last-trade BETWEEN 40 AND 60`` (a price band);
* 4 % JMS "big movers" ``net-change-pct > 9.0`` or ``< -9.0`` (no symbol);
* 1 % selectors the index cannot use (``symbol LIKE 'S12%' AND ...``,
  ``NOT (net-change-pct BETWEEN -9.5 AND 9.5)``): evaluated for every message.

Messages are ``message-content`` envelopes (section 5.2) with an ``equity-quote`` of a
uniformly drawn symbol and uniform prices and moves, parsed by the hardened parser once
each; both loops build the message's identifier view themselves (that cost is in both).

Figures: matches per second (subscriptions found matching, per second of matching time)
and microseconds per message, for the index (``Matcher.match``) and, as the same-run
baseline, the naive loop evaluating every selector (``Matcher.match_all``), at 100,000
and at 1,000 subscriptions. Targets: at least 20x the naive loop at 100,000; at 1,000 no
slower than it. Each size prints delivered/expected: matches the index found against
those the naive loop found, over the messages both ran (they must be equal).

Run: ``.venv/bin/python bench/content_match.py [--quick]``. The last line is JSON: a
list of figures with name, value, unit, and baseline/ratio where one applies.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apexmesh.beep.xml import Element, parse_xml
from apexmesh.pubsub.matcher import Matcher
from apexmesh.pubsub.selection.registry import default_classes
from apexmesh.pubsub.selection.types import Kind, MessageView, Selector, TypeMap
from bench.figures import figure

SYMBOLS = [f"S{n:04d}" for n in range(2000)]
TYPES = TypeMap(
    kinds={
        "equity-quote": Kind.UNTYPED,
        "symbol": Kind.STRING,
        "issue-name": Kind.STRING,
        "last-trade": Kind.APPROX,
        "net-change-price": Kind.APPROX,
        "net-change-pct": Kind.APPROX,
        "best-bid-price": Kind.APPROX,
        "best-ask-price": Kind.APPROX,
    },
    open=False,
)


def selector_texts(count: int, rng: random.Random) -> list[tuple[str, str]]:
    """``count`` (class, selector) pairs in the mix of the module docstring."""
    texts: list[tuple[str, str]] = []
    for _ in range(count):
        roll = rng.random()
        symbol = rng.choice(SYMBOLS)
        move = round(rng.uniform(0.5, 9.5), 1)
        if roll < 0.55:
            texts.append(("JMS", f"symbol = '{symbol}' AND net-change-pct > {move}"))
        elif roll < 0.70:
            three = ", ".join(f"'{s}'" for s in rng.sample(SYMBOLS, 3))
            either = f"(net-change-pct > {move} OR net-change-pct < -{move})"
            texts.append(("JMS", f"symbol IN ({three}) AND {either}"))
        elif roll < 0.85:
            texts.append(
                (
                    "RFC-2254",
                    f"(&(symbol={symbol})(|(net-change-pct>={move})(net-change-pct<=-{move})))",
                )
            )
        elif roll < 0.95:
            low = rng.randrange(10, 90)
            texts.append(
                ("JMS", f"symbol = '{symbol}' AND last-trade BETWEEN {low} AND {low + 20}")
            )
        elif roll < 0.99:
            sign = rng.choice((">", "<"))
            limit = 9.0 if sign == ">" else -9.0
            texts.append(("JMS", f"net-change-pct {sign} {limit}"))
        elif roll < 0.995:
            texts.append(("JMS", f"symbol LIKE 'S1{rng.randrange(10)}%' AND last-trade > 99"))
        else:
            texts.append(("JMS", "NOT (net-change-pct BETWEEN -9.5 AND 9.5)"))
    return texts


def message(rng: random.Random, serial: int) -> bytes:
    symbol = rng.choice(SYMBOLS)
    last = round(rng.uniform(1, 100), 2)
    pct = round(rng.uniform(-10, 10), 2)
    return (
        "<ps:message-content xmlns:ps='http://www.firstrain.com/pubsub' transID='1'"
        " content='#Content'><ps:topic>equity.quote.service</ps:topic>"
        "<ps:publisher>quote-service@example.com</ps:publisher>"
        "<ps:publication-date>2002-03-15T12:15:00-08:00</ps:publication-date>"
        f"<ps:message-id>{serial}</ps:message-id><ps:content Name='Content'>"
        f"<equity-quote symbol='{symbol}'><issue-name>Example, Inc.</issue-name>"
        f"<last-trade>{last}</last-trade><last-trade-datetime>October 18, 2001"
        f"</last-trade-datetime><net-change-price>{round(last * pct / 100, 2)}"
        f"</net-change-price><net-change-pct>{pct}</net-change-pct>"
        f"<best-bid-price>{last}</best-bid-price><best-ask-price>{last + 0.05:.2f}"
        "</best-ask-price></equity-quote></ps:content></ps:message-content>"
    ).encode()


def build(count: int, rng: random.Random) -> Matcher[int]:
    classes = default_classes()
    matcher: Matcher[int] = Matcher()
    compiled: dict[tuple[str, str], Selector | None] = {}
    for key, (name, text) in enumerate(selector_texts(count, rng)):
        selector = compiled.get((name, text))
        if selector is None:
            selector = compiled[(name, text)] = classes.compile(name, text, TYPES)
        matcher.add(key, selector)
    return matcher


def timed(
    matcher: Matcher[int], roots: list[Element], naive: bool
) -> tuple[list[float], list[set[int]]]:
    """Seconds spent on each message (its view and its matching) and what matched."""
    match = matcher.match_all if naive else matcher.match
    found: list[set[int]] = []
    seconds: list[float] = []
    clock = time.perf_counter
    for root in roots:
        start = clock()
        found.append(match(MessageView.of(root)))
        seconds.append(clock() - start)
    return seconds, found


def scenario(count: int, messages: int, naive_messages: int, seed: int) -> list[dict]:  # type: ignore[type-arg]
    rng = random.Random(seed)
    started = time.perf_counter()
    matcher = build(count, rng)
    built = time.perf_counter() - started
    roots = [parse_xml(message(rng, n)) for n in range(messages)]
    index_seconds, index_found = timed(matcher, roots, naive=False)
    naive_seconds, naive_found = timed(matcher, roots[:naive_messages], naive=True)
    # Both loops compared on the same messages (the naive loop runs on the first ones).
    same_seconds = sum(index_seconds[:naive_messages])
    delivered = sum(len(found) for found in index_found[:naive_messages])
    expected = sum(len(found) for found in naive_found)
    wrong = sum(a != b for a, b in zip(index_found, naive_found, strict=False))
    index_rate = delivered / same_seconds
    naive_rate = expected / sum(naive_seconds)
    index_us = same_seconds / naive_messages * 1e6
    naive_us = sum(naive_seconds) / naive_messages * 1e6
    all_us = sum(index_seconds) / messages * 1e6
    all_matches = sum(len(found) for found in index_found) / messages
    print(f"{count:>7} subscriptions, built in {built:.1f} s")
    print(
        f"  same {naive_messages} messages: index {index_us:.1f} us/message "
        f"({index_rate:.0f} matches/s), naive {naive_us:.1f} us/message "
        f"({naive_rate:.0f} matches/s): {naive_us / index_us:.1f}x"
    )
    print(
        f"  index over all {messages} messages: {all_us:.1f} us/message, "
        f"{all_matches:.1f} matches per message"
    )
    print(
        f"  delivered/expected: {delivered}/{expected} "
        f"({wrong} of {naive_messages} messages with a different set)"
    )
    return [
        figure(f"index_{count}_matches_per_s", index_rate, "matches/s", naive_rate),
        figure(f"index_{count}_us_per_message", index_us, "us/message", naive_us),
        figure(f"index_{count}_all_us_per_message", all_us, "us/message"),
        figure(f"index_{count}_delivered", delivered, "matches", expected),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages")
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args()
    big_messages, big_naive = (100, 5) if args.quick else (1000, 20)
    rows = scenario(100_000, big_messages, big_naive, args.seed)
    rows += scenario(
        1_000, 2000 if not args.quick else 200, 2000 if not args.quick else 200, args.seed
    )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
