"""How the pubsub store writes a subscription and a topic's settings in Redis, shared by
the store (:mod:`apexmesh.store.pubsub`) and the pods' caches
(:mod:`apexmesh.store.pubsub_cache`): a subscription's HASH field (the subscriber, with
``"\\n<id>"`` for a content-based one, draft-wyman 5.8), its JSON record, and reading both
back (the event log's subscription events carry the same fields).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.pubsub.changes import Subscription


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def subscription_field(subscriber: Endpoint | str, subscription_id: int | None) -> str:
    """The subscriptions HASH field (and lease member part) of one subscription: the
    subscriber, followed by ``"\n<id>"`` for a content-based one."""
    return str(subscriber) if subscription_id is None else f"{subscriber}\n{subscription_id}"


def subscription_record(sub: Subscription) -> str:
    """The JSON value of a subscription in its topic's HASH."""
    record = {
        "originator": str(sub.originator),
        "trans_id": str(sub.trans_id),
        "expires_ms": str(sub.expires_ms),
    }
    if sub.since_ms:
        record["since_ms"] = str(sub.since_ms)
    if sub.subscription_id is not None:
        record.update(
            subscription_id=str(sub.subscription_id),
            selector_class=sub.selector_class,
            selector=sub.selector,
            cached="1" if sub.cached else "",
        )
    return json.dumps(record)


def subscription_from(topic: str, name: str, record: Mapping[str, object]) -> Subscription:
    """A subscription from its HASH field (or event ``subscriber``) and record; raises
    EndpointError, KeyError or ValueError for what this module never wrote."""
    subscriber, _, raw_id = name.partition("\n")
    raw_id = raw_id or str(record.get("subscription_id", "") or "")
    return Subscription(
        topic=topic,
        subscriber=Endpoint.parse(subscriber),
        originator=Endpoint.parse(str(record["originator"])),
        trans_id=int(str(record["trans_id"])),
        expires_ms=int(str(record["expires_ms"])),
        subscription_id=int(raw_id) if raw_id else None,
        selector_class=str(record.get("selector_class", "") or ""),
        selector=str(record.get("selector", "") or ""),
        cached=bool(record.get("cached")),
        since_ms=int(str(record.get("since_ms", "") or 0)),
    )


def topic_settings(record: object) -> str:
    """The ``settings`` of a topic's record ("" for none or an unreadable record)."""
    if record is None or record in ("", b""):
        return ""
    try:
        return str(json.loads(_text(record)).get("settings", "") or "")
    except (ValueError, AttributeError):
        return ""


def split_subscriptions(
    topic: str, pairs: Sequence[object]
) -> tuple[dict[Endpoint, Subscription], tuple[Subscription, ...]]:
    """The plain subscriptions by subscriber and the content-based ones."""
    plain: dict[Endpoint, Subscription] = {}
    content: list[Subscription] = []
    for index in range(0, len(pairs) - 1, 2):
        try:
            sub = subscription_from(topic, _text(pairs[index]), json.loads(_text(pairs[index + 1])))
        except (EndpointError, KeyError, ValueError, AttributeError):
            continue  # never written by this module; skipped rather than fatal
        if sub.subscription_id is None:
            plain[sub.subscriber] = sub
        else:
            content.append(sub)
    return plain, tuple(content)


__all__ = [
    "split_subscriptions",
    "subscription_field",
    "subscription_from",
    "subscription_record",
    "topic_settings",
]
