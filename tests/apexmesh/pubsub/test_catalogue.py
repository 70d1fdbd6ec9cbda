"""The catalogue fold (apexmesh/pubsub/catalogue.py): every event kind, duplicates and
out-of-order ids, a topic deleted and created again, a lease renewed after it ended,
schema v1 entries, and "snapshot + later events" equal to the whole log."""

from __future__ import annotations

import pytest

from apexmesh.pubsub.catalogue import (
    Catalogue,
    fold,
    pack_id,
    subscription_from_json,
    subscription_to_json,
    topic_from_json,
    topic_to_json,
    unpack_id,
)
from tests.support.pubsub_events import (
    AT,
    BASE_MS,
    LATER,
    created_again,
    ended,
    every_kind,
    numbered,
    random_log,
    renewed_after_expiry,
    subscribed,
    topic_created,
)

pytestmark = pytest.mark.unit


def test_pack_id_sorts_as_stream_ids() -> None:
    ids = ["1700000000000-0", "1700000000000-1", "1700000000000-10", "1700000000001-0", "5-2"]
    packed = [pack_id(i) for i in ids]
    assert sorted(packed) == [
        pack_id(i) for i in sorted(ids, key=lambda t: tuple(map(int, t.split("-"))))
    ]
    assert [unpack_id(p) for p in packed] == ids
    assert pack_id("0-0") == 0
    with pytest.raises(ValueError, match="packable"):
        pack_id(f"1-{1 << 21}")


def test_every_event_kind() -> None:
    log = every_kind()
    catalogue = fold(log, AT)
    assert sorted(catalogue.topics) == [("example.com", "a")]
    topic = catalogue.topics[("example.com", "a")]
    assert topic.settings == '{"message_schema":{"uri":"x"}}'
    assert topic.creator == "o@example.com"
    assert topic.created_ms == BASE_MS
    subs = {row.identity: row for row in catalogue.live(AT)}
    assert sorted(subs) == [
        ("example.com", "a", "u2@example.com", "5"),
        ("example.com", "a", "u3@example.com", ""),
    ]
    u2 = subs[("example.com", "a", "u2@example.com", "5")]
    assert (u2.selector_class, u2.selector, u2.cached) == ("JMS", "price > 3", True)
    assert subs[("example.com", "a", "u3@example.com", "")].expires_ms == LATER + 5
    assert catalogue.position == pack_id(log[-1][0])


def test_expired_leases_are_dropped_at_the_snapshot_time() -> None:
    log = numbered([topic_created("a", BASE_MS), subscribed("a", "u@example.com", AT - 1)])
    assert fold(log, AT).subscriptions == {}
    assert len(fold(log, AT - 1).subscriptions) == 1


def test_renewed_after_expiry_lives_again() -> None:
    rows = fold(renewed_after_expiry(), AT).subscriptions.values()
    assert sorted((row.subscriber, row.expires_ms) for row in rows) == [
        ("u@example.com", LATER),
        ("w@example.com", LATER),
    ]


def test_topic_deleted_and_created_again_starts_empty() -> None:
    log = created_again()
    catalogue = fold(log, AT)
    assert catalogue.topics[("example.com", "a")].settings == '{"v":2}'
    assert [row.subscriber for row in catalogue.subscriptions.values()] == ["new@example.com"]


def test_duplicates_and_out_of_order_ids() -> None:
    log = numbered(
        [
            topic_created("a", BASE_MS),
            subscribed("a", "u@example.com", LATER),
            ended("a", "u@example.com"),
            subscribed("a", "v@example.com", LATER),
        ]
    )
    shuffled = [log[3], log[1], log[2], log[0], log[2], log[1], log[3]]
    assert fold(shuffled, AT) == fold(log, AT)
    assert [row.subscriber for row in fold(shuffled, AT).subscriptions.values()] == [
        "v@example.com"
    ]


def test_v1_entries_read_as_v2_and_unknown_types_are_skipped() -> None:
    created = topic_created("a", BASE_MS)
    v1 = {
        "v": "1",
        "type": "subscription.created",
        "domain": "example.com",
        "topic": "a",
        "subscriber": "u@example.com",
        "originator": "u@example.com",
        "trans_id": "3",
        "expires_ms": str(LATER),
        "reason": "",
        "at_ms": str(BASE_MS),
        "pod": "p",
    }
    catalogue = Catalogue()
    catalogue.extend(
        (pack_id(i), e) for i, e in numbered([created, v1, {"type": "topic.renamed", "topic": "a"}])
    )
    (row,) = catalogue.live(AT)
    assert (row.subscription_id, row.selector, row.cached, row.trans_id) == ("", "", False, 3)
    assert catalogue.unknown == 1


def test_snapshot_plus_later_events_equals_the_whole_log() -> None:
    log = random_log(3000, seed=7)
    for cut in (1, 700, 1500, 2999):
        base = fold(log[:cut], AT)
        catalogue = Catalogue(base.position, dict(base.topics), dict(base.subscriptions))
        # overlapping on purpose: the snapshot and the log share events
        catalogue.extend((pack_id(i), e) for i, e in log[cut - 1 :])
        assert catalogue.snapshot(AT) == fold(log, AT), cut


def test_rows_round_trip_their_compact_json() -> None:
    catalogue = fold(random_log(500, seed=3), AT)
    assert catalogue.subscriptions
    for row in catalogue.subscriptions.values():
        assert subscription_from_json(row.identity, subscription_to_json(row)) == row
    for (domain, topic), trow in catalogue.topics.items():
        assert topic_from_json(domain, topic, topic_to_json(trow)) == trow


def test_domain_counts() -> None:
    log = numbered(
        [
            topic_created("a", BASE_MS),
            topic_created("b", BASE_MS),
            subscribed("a", "u@example.com", LATER),
            subscribed("a", "v@example.com", AT - 5),
        ]
    )
    catalogue = Catalogue()
    catalogue.extend((pack_id(i), e) for i, e in log)
    assert catalogue.domain_counts("example.com", AT) == (2, 1)
    assert catalogue.domain_counts("other.org", AT) == (0, 0)
