"""The traced-hops stream: append, filter by originator and transID, read after a
cursor, capped length, bad cursors refused."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from apexmesh.store.hops import Hop, HopLog, HopOutcome
from apexmesh.store.keys import Keys

pytestmark = pytest.mark.integration


def hop(originator: str, trans_id: int, pod: str = "p1") -> Hop:
    return Hop(
        originator=originator,
        trans_ids=(trans_id,),
        pod=pod,
        domain="example.com",
        origin="edge",
        received_ms=1,
        concluded_ms=2,
        cid="c1",
        outcomes=(HopOutcome(recipient="b@example.com", code=250, route="pod p2"),),
        reported_by=("example.com",),
    )


async def test_record_and_read(redis: Redis, keys: Keys) -> None:
    log = HopLog(redis, keys, max_hops=100)
    first = await log.record(hop("fred@example.com", 7))
    await log.record(hop("wilma@rubble.com", 7, "p9"))
    await log.record(hop("fred@example.com", 8))
    mine = await log.read(originator="Fred@example.com", trans_id=7)
    assert [(h.pod, h.trans_ids, h.outcomes[0].route) for h in mine] == [("p1", (7,), "pod p2")]
    assert mine[0].id == first
    later = await log.read(after=first)
    assert [h.originator for h in later] == ["wilma@rubble.com", "fred@example.com"]
    assert await log.read(after=f"{2**64 - 1}-{2**64 - 1}") == []
    with pytest.raises(ValueError, match="stream id"):
        await log.read(after=f"{2**64}-0")


async def test_capped(redis: Redis, keys: Keys) -> None:
    log = HopLog(redis, keys, max_hops=10)
    for n in range(300):
        await log.record(hop("fred@example.com", n + 1))
    assert await redis.xlen(keys.ops_hops()) < 300
