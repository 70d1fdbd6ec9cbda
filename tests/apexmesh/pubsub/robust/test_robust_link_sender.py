"""The sender's per-link state (XEP-0040 2.2, 2.5, 5.1)."""

from __future__ import annotations

import pytest

from apexmesh.pubsub.robust.link import LinkSender
from apexmesh.pubsub.robust.seq import Resolution

pytestmark = pytest.mark.unit


def test_a_new_link_starts_at_zero_in_epoch_one_then_counts_deliveries_and_heartbeats() -> None:
    link = LinkSender(Resolution.BITS32)
    assert link.deliver(permitted=True, now_ms=0) == 0
    assert link.epoch == 1
    assert link.deliver(permitted=True, now_ms=1) == 1
    assert link.heartbeat(now_ms=2) == 2
    assert link.deliver(permitted=True, now_ms=3) == 3
    assert link.last_sent_ms == 3


def test_a_denied_publication_takes_no_number() -> None:
    link = LinkSender(Resolution.BITS32, seq=41, epoch=1, resync_pending=False)
    assert link.deliver(permitted=False, now_ms=5) is None
    assert link.deliver(permitted=True, now_ms=6) == 42
    assert link.skipped == 1
    assert link.last_sent_ms == 6


def test_wrap_and_resync() -> None:
    link = LinkSender(Resolution.BITS16, seq=65535, epoch=3, resync_pending=False)
    assert link.deliver(permitted=True, now_ms=0) == 1
    link.lose_context()
    assert link.heartbeat(now_ms=1) == 0
    assert link.epoch == 4
    assert link.deliver(permitted=True, now_ms=2) == 1
