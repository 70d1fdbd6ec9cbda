"""The subscriber stub's guarantee under Hypothesis (docs/robust.md, "The subscriber
stub"): whatever the network loses, reorders and duplicates, with repairs answered from
the service's record and stream, the application receives every publication it may see
once, in order; also when the service drops the link context (resync, link repairs
refused, repair by source) and across the wrap of a 16-bit link seq."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from apexmesh.pubsub.robust.seq import Resolution
from tests.support.robust_sim import run

pytestmark = pytest.mark.unit

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    seed=st.integers(0, 2**32),
    publications=st.integers(1, 120),
    loss=st.sampled_from([0.0, 0.05, 0.2, 0.4]),
    duplication=st.sampled_from([0.0, 0.1, 0.3]),
    reorder_ms=st.sampled_from([0, 20, 250]),
)
def test_every_publication_once_in_order_through_loss_reorder_and_duplication(
    seed: int, publications: int, loss: float, duplication: float, reorder_ms: int
) -> None:
    outcome = run(
        random.Random(seed),
        publications=publications,
        loss=loss,
        duplication=duplication,
        reorder_ms=reorder_ms,
    )
    assert outcome.refused == []
    assert outcome.delivered == outcome.expected
    assert len(set(outcome.delivered)) == len(outcome.delivered)


@SETTINGS
@given(
    seed=st.integers(0, 2**32),
    publications=st.integers(2, 120),
    loss=st.sampled_from([0.0, 0.1, 0.3]),
    duplication=st.sampled_from([0.0, 0.2]),
    context_losses=st.integers(1, 3),
    reorder_ms=st.sampled_from([0, 50]),
)
def test_link_context_lost_repairs_by_source(
    seed: int,
    publications: int,
    loss: float,
    duplication: float,
    context_losses: int,
    reorder_ms: int,
) -> None:
    outcome = run(
        random.Random(seed),
        publications=publications,
        loss=loss,
        duplication=duplication,
        context_losses=min(context_losses, publications - 1),
        reorder_ms=reorder_ms,
    )
    assert outcome.refused == []
    assert outcome.delivered == outcome.expected


@SETTINGS
@given(
    seed=st.integers(0, 2**32),
    publications=st.integers(1, 80),
    loss=st.sampled_from([0.0, 0.2]),
    deny=st.sampled_from([0.2, 0.5]),
)
# Two of the five runs in 200,000 that left publications undelivered before the stub
# asked for the holes above an open repair's answered extent (stub._request_beyond).
@example(seed=3982790005, publications=70, loss=0.2, deny=0.5)
@example(seed=3773965786, publications=69, loss=0.2, deny=0.5)
def test_permission_skips_are_not_gaps(
    seed: int, publications: int, loss: float, deny: float
) -> None:
    outcome = run(
        random.Random(seed), publications=publications, loss=loss, duplication=0.1, deny=deny
    )
    assert outcome.refused == []
    assert outcome.delivered == outcome.expected


@SETTINGS
@given(
    seed=st.integers(0, 2**32),
    publications=st.integers(1, 60),
    loss=st.sampled_from([0.0, 0.2]),
    start=st.integers(65_500, 65_535),
)
def test_across_the_16_bit_wrap(seed: int, publications: int, loss: float, start: int) -> None:
    outcome = run(
        random.Random(seed),
        publications=publications,
        loss=loss,
        duplication=0.1,
        resolution=Resolution.BITS16,
        start_at=start,
    )
    assert outcome.refused == []
    assert outcome.delivered == outcome.expected


@SETTINGS
@given(
    seed=st.integers(0, 2**32),
    publications=st.integers(20, 120),
    loss=st.sampled_from([0.2, 0.4]),
    retention=st.integers(1, 8),
)
def test_link_record_beyond_retention_repairs_by_source(
    seed: int, publications: int, loss: float, retention: int
) -> None:
    """The link record keeps only the last few link seqs: link repairs are refused (550)
    and the stub repairs by source, still losing nothing."""
    outcome = run(
        random.Random(seed),
        publications=publications,
        loss=loss,
        duplication=0.1,
        record_retention=retention,
    )
    assert outcome.refused == []
    assert outcome.delivered == outcome.expected


@SETTINGS
@given(
    seed=st.integers(0, 2**32),
    publications=st.integers(20, 120),
    retention=st.integers(1, 10),
)
def test_stream_beyond_retention_is_refused_and_nothing_is_delivered_twice_or_out_of_order(
    seed: int, publications: int, retention: int
) -> None:
    """With the stream itself trimmed, repairs may be refused: the application is told
    (RepairRefused), and what it gets is still in order and once."""
    outcome = run(
        random.Random(seed),
        publications=publications,
        loss=0.4,
        duplication=0.1,
        record_retention=retention,
        stream_retention=retention,
    )
    position = {key: index for index, key in enumerate(outcome.expected)}
    indexes = [position[key] for key in outcome.delivered]
    assert indexes == sorted(set(indexes))
    assert (outcome.delivered != outcome.expected) <= bool(outcome.refused)
