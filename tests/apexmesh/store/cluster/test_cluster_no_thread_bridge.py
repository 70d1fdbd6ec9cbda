"""The hot reads on a cluster never take redis-py's thread bridge.

redis-py 8.2's cluster client queues every command of a *transaction* pipeline through
``_run_coroutine_in_thread``: a new thread and a private event loop per command, the
caller's loop blocked until it ends, and a closing sweep over every task of the process.
In the cluster topics bench that was half of the access service's CPU (the cold checks'
``load_many``) and a quarter of a relay's (the held-data gauges), issue #30. These reads
are a script and a plain pipeline now; the bridge is counted while they run.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio import cluster as redis_cluster

from apexmesh.apex.access import ActionSet, ActorPattern, decide
from apexmesh.apex.endpoint import Endpoint
from apexmesh.store.access_entries import AccessEntryStore
from apexmesh.store.held import HeldStore
from apexmesh.store.keys import Keys
from tests.apexmesh.store.test_access_cache import T0

pytestmark = pytest.mark.integration


@pytest.fixture
def bridged(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the coroutines sent through the bridge (each still runs)."""
    calls: list[str] = []
    original = redis_cluster._run_coroutine_in_thread

    def counting(coro: Any) -> Any:
        calls.append(getattr(coro, "__qualname__", repr(coro)))
        return original(coro)

    monkeypatch.setattr(redis_cluster, "_run_coroutine_in_thread", counting)
    return calls


async def test_loading_access_entries_takes_no_thread(
    redis: Redis, keys: Keys, bridged: list[str]
) -> None:
    store = AccessEntryStore(redis, keys)
    fred = Endpoint.parse("fred@example.com")
    await store.change(fred, ActorPattern.parse("*@*"), ActionSet.of("core:data"), None, T0)
    owners = [fred, *(Endpoint.parse(f"topic{index}@example.com") for index in range(20))]
    rules, version = await store.load_many(owners)
    assert version == 1
    assert len(rules) == len(owners)
    assert decide(rules[0], Endpoint.parse("dino@bedrock.org"), "core:data").allowed
    assert not decide(rules[1], Endpoint.parse("dino@bedrock.org"), "core:data").allowed
    assert bridged == []


async def test_held_gauges_take_no_thread(redis: Redis, keys: Keys, bridged: list[str]) -> None:
    stats = await HeldStore(redis, keys).stats("example.com", 1_000)
    assert (stats.count, stats.bytes, stats.oldest_age_ms) == (0, 0, None)
    assert bridged == []
