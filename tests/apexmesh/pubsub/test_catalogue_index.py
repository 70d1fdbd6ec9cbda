"""The catalogue's index for paged listings (apexmesh/pubsub/catalogue_index.py): built at
any point of a log and then kept by the fold, it equals one built from scratch, counts
what :meth:`Catalogue.live` counts (leases aside), and pages by prefix and cursor."""

from __future__ import annotations

import pytest

from apexmesh.pubsub.catalogue import Catalogue, pack_id
from apexmesh.pubsub.catalogue_index import CatalogueIndex
from tests.support.pubsub_events import numbered, random_log, subscribed, topic_created

pytestmark = pytest.mark.unit


def _fresh(catalogue: Catalogue) -> CatalogueIndex:
    catalogue.index = None
    return catalogue.indexed()


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("built_after", [0, 150, 600])
def test_kept_index_equals_a_rebuilt_one(seed: int, built_after: int) -> None:
    log = random_log(600, seed, topics=12, subscribers=15)
    catalogue = Catalogue()
    for i, (ident, event) in enumerate(log):
        if i == built_after:
            catalogue.indexed()
        catalogue.apply(pack_id(ident), event)
    kept = catalogue.indexed()
    rebuilt = _fresh(catalogue)
    assert kept.topics == rebuilt.topics
    assert kept.subscriptions == rebuilt.subscriptions
    assert {k: v for k, v in kept.per_topic.items() if v or k in catalogue.topics} == {
        k: v for k, v in rebuilt.per_topic.items() if v or k in catalogue.topics
    }
    live = catalogue.live(0)  # no lease has ended at time 0: the rule without leases
    assert kept.counts("example.com") == (len(catalogue.topics), len(live))
    for domain, topic in catalogue.topics:
        assert kept.subscriptions_of(domain, topic) == sum(1 for r in live if r.topic == topic)


def test_pages_by_prefix_and_cursor() -> None:
    events = [topic_created(f"news.{i:03}", 1) for i in range(30)]
    events += [topic_created("sports", 1), topic_created("new", 1)]
    events += [subscribed("news.001", f"u{i}@example.com", 2**40) for i in range(5)]
    catalogue = Catalogue()
    catalogue.extend((pack_id(i), e) for i, e in numbered(events))
    index = catalogue.indexed()
    assert index.topic_page("example.com", limit=3) == ["new", "news.000", "news.001"]
    assert index.topic_page("example.com", prefix="news.", after="news.027") == [
        "news.028",
        "news.029",
    ]
    assert index.topic_page("example.com", prefix="news.02", limit=2) == ["news.020", "news.021"]
    assert index.topic_page("example.com", prefix="zzz") == []
    assert index.topic_page("other.com") == []
    page = index.subscription_page("example.com", topic="news.001", limit=2)
    assert page == [("news.001", "u0@example.com", ""), ("news.001", "u1@example.com", "")]
    rest = index.subscription_page("example.com", topic="news.001", after=page[-1])
    assert [s for _, s, _ in rest] == ["u2@example.com", "u3@example.com", "u4@example.com"]
    assert index.subscription_page("example.com", prefix="sports") == []
    assert index.counts("example.com") == (32, 5)
