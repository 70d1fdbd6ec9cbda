"""Access decisions per second: cached, uncached, and a dict-lookup baseline, in one run.

The relay asks for a ``core:data`` decision per recipient of every data element (RFC 3340
section 4.4.4.1 step 5.3), so the cached decision is on the hot path; the target is under
5 microseconds per cached decision. Setup: 10,000 explicit entries with wildcards (1,000
owners x 10 entries: exact actors, ``*@domain``, ``*@*.example.com``, ``user/*@domain``,
``apex=*@*``, ``*@*``) stored in a real redis-server started on a free loopback port.

Figures (decisions per second, and microseconds per decision):

* ``dict_lookup_baseline``: a plain ``dict.get`` over the same keys (the floor);
* ``cached_lookup``: ``CachedAccessChecker.lookup`` (the relay's fast path);
* ``cached_check``: ``await CachedAccessChecker.check`` on a hit (async path);
* ``uncached_core``: input validation plus RFC 3341 selection on prebuilt rules, no I/O;
* ``uncached_store``: one Redis round trip per decision (load the owner's entries, decide).

Run: ``.venv/bin/python bench/access_check.py [--quick]``. The last line of output is
JSON: a list of figures with name, value, unit, and baseline/ratio where one applies.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from redis.asyncio import Redis  # noqa: E402

from apexmesh.apex.access import (  # noqa: E402
    ActionSet,
    ActorPattern,
    Domains,
    OwnerRules,
    TokenRegistry,
    check_inputs,
    decide,
)
from apexmesh.apex.endpoint import Endpoint  # noqa: E402
from apexmesh.store.access_cache import CachedAccessChecker, CheckKey  # noqa: E402
from apexmesh.store.access_entries import AccessEntryStore  # noqa: E402
from apexmesh.store.keys import Keys  # noqa: E402
from services.access.servicer import AccessOperations  # noqa: E402

OWNERS = 1000
TOKENS = ("core:data", "pubsub:subscribe", "presence:watch")


def owner_of(i: int) -> str:
    return f"user{i}@d{i % 50}.example.com"


def entries_of(i: int) -> list[tuple[str, str]]:
    """Ten (actor pattern, actions) pairs for owner ``i``, wildcards included."""
    d = f"d{i % 50}.example.com"
    return [
        (f"friend{i}@{d}", "all:all"),
        (f"friend{i + 1}@other.org", "core:data presence:watch"),
        (f"enemy{i}@{d}", ""),
        (f"*@{d}", "core:data presence:subscribe"),
        ("*@*.example.com", "core:data"),
        (f"user{i}/*@{d}", "all:all"),
        ("apex=*@*", "core:data pubsub:subscribe"),
        ("apex=pubsub/*@*", "pubsub:all"),
        (f"*@*.d{i % 7}.net", "presence:watch"),
        ("*@*", "core:data"),
    ]


def actors_for(i: int, rng: random.Random) -> list[str]:
    d = f"d{i % 50}.example.com"
    return [
        f"friend{i}@{d}",
        f"enemy{i}@{d}",
        f"someone{rng.randrange(10**6)}@{d}",
        f"x{rng.randrange(10**6)}@a.b.c.example.com",
        f"user{i}/appl=wb@{d}",
        "apex=pubsub/music.jazz@forwarder.com",
        f"y{rng.randrange(10**6)}@host.d{i % 7}.net",
        f"z{rng.randrange(10**6)}@nowhere.org",
        f"friend{i + 1}@other.org",
        f"apex=presence@{d}",
    ]


def per_second(fn: Callable[[], int], min_seconds: float) -> float:
    """Run ``fn`` (which returns how many decisions it made) for at least min_seconds."""
    done = 0
    started = time.perf_counter()
    while True:
        done += fn()
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds:
            return done / elapsed


async def per_second_async(fn: Callable[[], Any], min_seconds: float) -> float:
    done = 0
    started = time.perf_counter()
    while True:
        done += await fn()
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds:
            return done / elapsed


def figure(name: str, rate: float, baseline: float | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"name": name, "value": round(rate), "unit": "decisions/s"},
        {"name": f"{name}_cost", "value": round(1e6 / rate, 3), "unit": "us/decision"},
    ]
    if baseline is not None:
        rows[0]["baseline"] = round(baseline)
        rows[0]["ratio"] = round(rate / baseline, 4)
        rows[1]["baseline"] = round(1e6 / baseline, 3)
        rows[1]["ratio"] = round(baseline / rate, 2)
    return rows


async def run(quick: bool) -> list[dict[str, Any]]:
    seconds = 0.3 if quick else 1.0
    support = importlib.import_module("tests.support.redis_server")
    rng = random.Random(3341)
    with tempfile.TemporaryDirectory() as tmp:
        server = support.RedisServer(Path(tmp))
        server.start()
        redis = Redis.from_url(server.url)
        try:
            keys = Keys("bench")
            store = AccessEntryStore(redis, keys)
            now = datetime.now(UTC)
            registry = TokenRegistry()
            prebuilt: dict[Endpoint, OwnerRules] = {}
            for i in range(OWNERS):
                owner = Endpoint.parse(owner_of(i))
                for actor, actions in entries_of(i):
                    await store.change(
                        owner,
                        ActorPattern.parse(actor),
                        ActionSet(registry.parse_actions(actions)),
                        None,
                        now,
                    )
                prebuilt[owner] = (await store.load(owner))[0]
            entry_count = sum(len(r.explicit) for r in prebuilt.values())
            checks: list[CheckKey] = [
                (owner_of(i), actor, rng.choice(TOKENS))
                for i in range(OWNERS)
                for actor in actors_for(i, rng)
            ]
            rng.shuffle(checks)
            checks = checks[:10_000]
            domains = Domains.of(*{f"d{i}.example.com" for i in range(50)})
            operations = AccessOperations(store, domains, registry, clock=lambda: datetime.now(UTC))

            # Baseline: a dict holding the same decisions.
            decisions, _ = await operations.check_many(checks)
            allowed = sum(d.allowed for d in decisions)
            table = dict(zip(checks, decisions, strict=True))

            def baseline_round() -> int:
                get = table.get
                for owner, actor, token in checks:
                    get((owner, actor, token))
                return len(checks)

            baseline = per_second(baseline_round, seconds)

            async with CachedAccessChecker(operations, redis, keys) as checker:
                for start in range(0, len(checks), 500):
                    await checker.check_many(checks[start : start + 500])
                assert len(checker) == len(checks)

                def cached_round() -> int:
                    lookup = checker.lookup
                    for owner, actor, token in checks:
                        lookup(owner, actor, token)
                    return len(checks)

                cached = per_second(cached_round, seconds)

                async def cached_async_round() -> int:
                    check = checker.check
                    for owner, actor, token in checks:
                        await check(owner, actor, token)
                    return len(checks)

                cached_async = await per_second_async(cached_async_round, seconds)

            def core_round() -> int:
                for owner, actor, token in checks:
                    subject, who, tok = check_inputs(owner, actor, token, domains, registry)
                    decide(prebuilt[subject], who, tok)
                return len(checks)

            core = per_second(core_round, seconds)

            sample = checks[:1000] if quick else checks[:3000]

            async def store_round() -> int:
                for check in sample:
                    await operations.check_many([check])
                return len(sample)

            uncached_store = await per_second_async(store_round, seconds)
        finally:
            await redis.aclose()
            server.stop()

    print(f"entries: {entry_count} explicit over {OWNERS} owners; checks: {len(checks)}")
    print(f"allowed: {allowed} of {len(checks)}")
    rows = [
        *figure("dict_lookup_baseline", baseline),
        *figure("cached_lookup", cached, baseline),
        *figure("cached_check", cached_async, baseline),
        *figure("uncached_core", core, baseline),
        *figure("uncached_store", uncached_store, baseline),
    ]
    for row in rows:
        extra = f"  (baseline {row['baseline']}, ratio {row['ratio']})" if "ratio" in row else ""
        print(f"{row['name']:>28}: {row['value']:>12} {row['unit']}{extra}")
    target = next(r for r in rows if r["name"] == "cached_lookup_cost")
    verdict = "meets" if target["value"] < 5 else "MISSES"
    print(f"cached decision costs {target['value']} us: {verdict} the 5 us target")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing windows")
    args = parser.parse_args()
    rows = asyncio.run(run(args.quick))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
