"""The presence store against a real redis-server: which attached endpoints lapsed."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from apexmesh.apex.endpoint import Endpoint
from apexmesh.store.attachments import AttachmentRegistry
from apexmesh.store.keys import Keys
from apexmesh.store.presence import LAPSED_BATCH, PresenceStore

pytestmark = pytest.mark.integration


async def test_lapsed_names_exactly_the_endpoints_without_an_attachment(
    redis: Redis, keys: Keys
) -> None:
    pod = AttachmentRegistry(redis, keys, "pod-a")
    endpoints = [Endpoint.parse(f"e{index}@example.com") for index in range(LAPSED_BATCH + 5)]
    gone = {endpoints[0], endpoints[7], endpoints[LAPSED_BATCH], endpoints[-1]}
    for endpoint in endpoints:
        if endpoint not in gone:
            assert await pod.claim(str(endpoint)) is None
    store = PresenceStore(redis, keys)
    # Several batches, in order, only the missing ones.
    assert await store.lapsed(endpoints) == [e for e in endpoints if e in gone]
    assert await store.lapsed([]) == []
    await pod.release(str(endpoints[3]))
    assert await store.lapsed(endpoints[:10]) == [endpoints[0], endpoints[3], endpoints[7]]
