"""The access entry repository against a real redis-server (RFC 3341 section 4.4)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from redis.asyncio import Redis

from apexmesh.apex.access import ActionSet, ActorPattern, TokenRegistry, parse_entries
from apexmesh.apex.endpoint import Endpoint
from apexmesh.store.access_entries import AccessEntryStore, ChangeOutcome
from apexmesh.store.keys import Keys
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

FRED = Endpoint.parse("fred@example.com")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def test_create_get_update_delete(redis: Redis, keys: Keys) -> None:
    store = AccessEntryStore(redis, keys)
    actor = ActorPattern.parse("*@example.com")
    created = await store.change(FRED, actor, ActionSet.of("core:data"), None, T0)
    assert created.outcome is ChangeOutcome.CREATED
    assert created.version == 1
    stored = await store.get(FRED, actor)
    assert stored == created.entry
    rules, version = await store.load(FRED)
    assert version == 1
    assert rules.allows(Endpoint.parse("barney@example.com"), ["core:data"])

    # replace needs the current lastUpdate; a new one is strictly later even at the same now
    assert stored is not None
    assert stored.last_update is not None
    updated = await store.change(
        FRED, actor, ActionSet.of("presence:watch"), stored.last_update, T0
    )
    assert updated.outcome is ChangeOutcome.UPDATED
    assert updated.entry is not None
    assert updated.entry.last_update is not None
    assert updated.entry.last_update > stored.last_update

    stale = await store.change(FRED, actor, None, stored.last_update, T0)
    assert stale.outcome is ChangeOutcome.STALE
    exists = await store.change(FRED, actor, ActionSet.of("core:data"), None, T0)
    assert exists.outcome is ChangeOutcome.EXISTS
    deleted = await store.change(FRED, actor, None, updated.entry.last_update, T0)
    assert deleted.outcome is ChangeOutcome.DELETED
    assert await store.get(FRED, actor) is None
    missing = await store.change(FRED, actor, None, updated.entry.last_update, T0)
    assert missing.outcome is ChangeOutcome.MISSING
    assert await store.version() == 3
    assert await store.owners() == []


async def test_semantically_identical_timestamps_match(redis: Redis, keys: Keys) -> None:
    store = AccessEntryStore(redis, keys)
    actor = ActorPattern.parse("wilma@example.com")
    created = await store.change(FRED, actor, ActionSet.of("all:all"), None, T0)
    assert created.entry is not None
    assert created.entry.last_update is not None
    other_zone = created.entry.last_update.astimezone(timezone_minus_8())
    result = await store.change(FRED, actor, ActionSet.of("core:data"), other_zone, T0)
    assert result.outcome is ChangeOutcome.UPDATED


def timezone_minus_8() -> timezone:
    return timezone(timedelta(hours=-8))


async def test_change_publishes_version_and_owner(redis: Redis, keys: Keys) -> None:
    store = AccessEntryStore(redis, keys)
    pubsub = redis.pubsub()
    try:
        await pubsub.subscribe(keys.access_changes())
        first = await pubsub.get_message(timeout=scaled(5))
        assert first is not None
        assert first["type"] == "subscribe"
        await store.change(FRED, ActorPattern.parse("*@*"), ActionSet.of("core:data"), None, T0)
        message = await pubsub.get_message(timeout=scaled(5))
        assert message is not None
        assert message["data"] == b"1 fred@example.com"
    finally:
        await pubsub.aclose()


async def test_seed_creates_only_missing_entries(redis: Redis, keys: Keys) -> None:
    store = AccessEntryStore(redis, keys)
    entries = parse_entries(
        "<access-entries>"
        "<access owner='fred@example.com' actor='*@*' actions='core:data' />"
        "<access owner='fred@example.com' actor='wilma@example.com' actions='all:all' />"
        "</access-entries>",
        TokenRegistry(),
    )
    assert await store.seed(entries, T0) == 2
    assert await store.seed(entries, T0) == 0
    assert await store.owners() == ["fred@example.com"]


async def test_entries_survive_a_redis_restart(tmp_path_factory: pytest.TempPathFactory) -> None:
    server = RedisServer(tmp_path_factory.mktemp("redis-restart"))
    server.start()
    keys = Keys("restart")
    try:
        client = Redis.from_url(server.url)
        try:
            store = AccessEntryStore(client, keys)
            await store.change(FRED, ActorPattern.parse("*@*"), ActionSet.of("core:data"), None, T0)
        finally:
            await client.aclose()
        server.restart()
        client = Redis.from_url(server.url)
        try:
            rules, version = await AccessEntryStore(client, keys).load(FRED)
            assert version == 1
            assert rules.allows(Endpoint.parse("dino@bedrock.org"), ["core:data"])
        finally:
            await client.aclose()
    finally:
        server.stop()


async def test_load_many_reads_every_owner_and_the_version_in_one_transaction(
    redis: Redis, keys: Keys
) -> None:
    """What the access service's ``CheckMany`` reads: each owner's rules in the order
    asked (an owner without entries included), at the version of the last change."""
    store = AccessEntryStore(redis, keys)
    owners = [Endpoint.parse(f"o{index}@example.com") for index in range(5)]
    for owner in owners[:4]:
        await store.change(
            owner,
            ActorPattern.parse(f"{owner.local}-friend@*"),
            ActionSet.of("core:data"),
            None,
            T0,
        )
    rules, version = await store.load_many(owners)
    assert version == 4
    for index, owner in enumerate(owners):
        friend = Endpoint.parse(f"{owner.local}-friend@example.com")
        assert rules[index].allows(friend, ["core:data"]) is (index < 4)
        assert not rules[index].allows(Endpoint.parse("stranger@example.com"), ["core:data"])
    one, at = await store.load(owners[2])
    assert at == version
    assert one.allows(Endpoint.parse("o2-friend@example.com"), ["core:data"])
    assert await store.load_many([]) == ([], version)
