"""Event-log entries for the catalogue and snapshot tests: schema v2 (docs/pubsub.md)
with explicit stream ids, so a test states the order (and the duplicates) itself."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from redis.asyncio import Redis

from apexmesh.pubsub.catalogue import EVENT_FIELDS_V2

#: A log entry: (stream id text, fields).
Entry = tuple[str, dict[str, str]]

BASE_MS = 1_700_000_000_000


def event(kind: str, topic: str, *, domain: str = "example.com", **values: str) -> dict[str, str]:
    out = dict.fromkeys(EVENT_FIELDS_V2, "")
    out.update(v="2", type=kind, domain=domain, topic=topic, pod="p1", **values)
    return out


def topic_created(topic: str, at: int, settings: str = "", **kw: str) -> dict[str, str]:
    return event("topic.created", topic, settings=settings, at_ms=str(at), **kw)


def topic_modified(topic: str, at: int, settings: str, **kw: str) -> dict[str, str]:
    """Draft-wyman 6.2.2: new settings for an existing topic (its creation stands)."""
    return event("topic.modified", topic, settings=settings, at_ms=str(at), **kw)


def topic_deleted(topic: str, at: int, **kw: str) -> dict[str, str]:
    return event("topic.deleted", topic, at_ms=str(at), **kw)


def subscribed(
    topic: str,
    subscriber: str,
    expires: int,
    *,
    kind: str = "subscription.created",
    sid: str = "",
    selector: str = "",
    at: int = BASE_MS,
    **kw: str,
) -> dict[str, str]:
    return event(
        kind,
        topic,
        subscriber=subscriber,
        subscription_id=sid,
        selector_class="JMS" if selector else "",
        selector=selector,
        cached="1" if sid else "",
        originator=subscriber,
        trans_id="7",
        expires_ms=str(expires),
        at_ms=str(at),
        **kw,
    )


def ended(
    topic: str, subscriber: str, *, sid: str = "", reason: str = "cancel", **kw: str
) -> dict[str, str]:
    return event(
        "subscription.ended", topic, subscriber=subscriber, subscription_id=sid, reason=reason, **kw
    )


def numbered(events: Iterable[dict[str, str]], start_ms: int = BASE_MS) -> list[Entry]:
    """Give events increasing ids, one millisecond apart."""
    return [(f"{start_ms + i}-0", e) for i, e in enumerate(events)]


#: The fold tests' lease end (far after their snapshot time) and snapshot time.
LATER = BASE_MS + 1_000_000
AT = BASE_MS + 1000


def every_kind() -> list[Entry]:
    """Every event kind: settings, ids and selectors, a renewal, a cancel, a deleted
    topic's subscription, and a lease over at :data:`AT`."""
    return numbered(
        [
            topic_created(
                "a", BASE_MS, settings='{"message_schema":{"uri":"x"}}', originator="o@example.com"
            ),
            topic_created("b", BASE_MS),
            subscribed("a", "u1@example.com", LATER),
            subscribed("a", "u2@example.com", LATER, sid="5", selector="price > 3"),
            subscribed("a", "u3@example.com", LATER),
            subscribed("a", "u3@example.com", LATER + 5, kind="subscription.renewed"),
            ended("a", "u1@example.com"),
            subscribed("b", "u1@example.com", LATER),
            topic_deleted("b", BASE_MS + 9),
            subscribed("a", "gone@example.com", AT - 1),
        ]
    )


def renewed_after_expiry() -> list[Entry]:
    """u's lease ends (recorded), then is renewed; w's runs out unrecorded, renewed."""
    return numbered(
        [
            topic_created("a", BASE_MS),
            subscribed("a", "u@example.com", BASE_MS + 10),
            ended("a", "u@example.com", reason="expired"),
            subscribed("a", "u@example.com", LATER, kind="subscription.renewed"),
            subscribed("a", "w@example.com", BASE_MS + 10),
            subscribed("a", "w@example.com", LATER, kind="subscription.renewed"),
        ]
    )


def created_again() -> list[Entry]:
    """A topic deleted and created again: only the later subscription lives."""
    return numbered(
        [
            topic_created("a", BASE_MS, settings='{"v":1}'),
            subscribed("a", "old@example.com", LATER),
            topic_deleted("a", BASE_MS + 2),
            topic_created("a", BASE_MS + 3, settings='{"v":2}'),
            subscribed("a", "new@example.com", LATER),
        ]
    )


def random_log(count: int, seed: int, *, topics: int = 20, subscribers: int = 50) -> list[Entry]:
    """A plausible log of ``count`` events (creations, modifications, deletions,
    subscriptions, renewals, ends, some expired leases, some v1 entries), ids in order.
    A topic is modified only while it exists, as the service does."""
    rng = random.Random(seed)
    out: list[dict[str, str]] = []
    existing: set[str] = set()
    for i in range(count):
        topic = f"t{rng.randrange(topics)}"
        who = f"u{rng.randrange(subscribers)}@example.com"
        sid = rng.choice(["", "", "1", "2"])
        expires = BASE_MS + rng.randrange(-10_000, 10_000_000)
        roll = rng.random()
        if roll < 0.08:
            out.append(topic_created(topic, BASE_MS + i, settings=f'{{"n":{i}}}'))
            existing.add(topic)
        elif roll < 0.11:
            out.append(topic_deleted(topic, BASE_MS + i))
            existing.discard(topic)
        elif roll < 0.13 and topic in existing:
            out.append(topic_modified(topic, BASE_MS + i, settings=f'{{"m":{i}}}'))
        elif roll < 0.6:
            out.append(subscribed(topic, who, expires, sid=sid, selector="a > 1" if sid else ""))
        elif roll < 0.8:
            out.append(subscribed(topic, who, expires, kind="subscription.renewed", sid=sid))
        elif roll < 0.97:
            out.append(ended(topic, who, sid=sid, reason=rng.choice(["cancel", "expired"])))
        else:
            v1 = subscribed(topic, who, expires)
            for name in ("settings", "subscription_id", "selector_class", "selector", "cached"):
                del v1[name]
            v1["v"] = "1"
            out.append(v1)
    return numbered(out)


async def append(redis: Redis, key: str, entries: Sequence[Entry]) -> None:
    """XADD every entry with its own id (ids must increase)."""
    async with redis.pipeline(transaction=False) as pipe:
        for entry_id, fields in entries:
            pipe.xadd(key, dict(fields), id=entry_id)
        await pipe.execute()


def shifted(entries: Sequence[Entry], by_ms: int) -> list[Entry]:
    """``entries`` moved ``by_ms`` later: ids and the times in them (``at_ms``,
    ``expires_ms``), so that a log made around :data:`BASE_MS` has live leases at a
    real clock (a job run as its own process reads the time itself)."""
    out: list[Entry] = []
    for entry_id, fields in entries:
        ms, _, seq = entry_id.partition("-")
        moved = dict(fields)
        for name in ("at_ms", "expires_ms"):
            if moved.get(name):
                moved[name] = str(int(moved[name]) + by_ms)
        out.append((f"{int(ms) + by_ms}-{seq}", moved))
    return out
