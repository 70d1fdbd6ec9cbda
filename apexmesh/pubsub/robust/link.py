"""The sender's state of one link (XEP-0040 section 2.2).

A link is a (subscriber endpoint, topic) pair. The service numbers what it sends on it:
every delivery and every heartbeat takes the next link seq (1 after the largest of the
topic's resolution), so the subscriber can tell it lost something by the numbers alone.
A publication the subscriber may not see (its permission token is not granted, or is
denied) is not sent and **takes no number**: the subscriber must not see a gap where
nothing was lost. A link whose context was lost (its record expired, or it was restarted
deliberately) starts again at 0, which tells the stub to resynchronise (XEP example 4).

Pure and small: the owner pod keeps one per link of the topics it sequences, the store
keeps the counter durable (``apexmesh/store/robust.py``), and the same rules run in the
commit script.
"""

from __future__ import annotations

from dataclasses import dataclass

from apexmesh.pubsub.robust.seq import RESYNC, Resolution


@dataclass(slots=True)
class LinkSender:
    """Link seq assignment for one link; ``seq`` is the last number sent (0 before the
    first, or right after a resync was sent)."""

    resolution: Resolution
    #: The last link seq sent.
    seq: int = 0
    #: The link's epoch, +1 at every restart at 0 (a new link's first number is 0, in
    #: epoch 1: "an incremental sequence number to the previous or Zero").
    epoch: int = 0
    #: When the next number must be 0 (a new link, or its context was lost).
    resync_pending: bool = True
    #: When the link last carried anything (ms), for the heartbeat schedule.
    last_sent_ms: int | None = None
    #: Publications skipped for permissions (counted, never numbered).
    skipped: int = 0

    def _take(self, now_ms: int) -> int:
        if self.resync_pending:
            self.resync_pending = False
            self.epoch += 1
            self.seq = RESYNC
        else:
            self.seq = self.resolution.next(self.seq)
        self.last_sent_ms = now_ms
        return self.seq

    def deliver(self, *, permitted: bool, now_ms: int) -> int | None:
        """The link seq of the next publication on this link, or None when the
        subscriber may not see it (no copy, no number)."""
        if not permitted:
            self.skipped += 1
            return None
        return self._take(now_ms)

    def heartbeat(self, now_ms: int) -> int:
        """The link seq of a heartbeat (it advances the link like a delivery)."""
        return self._take(now_ms)

    def lose_context(self) -> None:
        """The next number sent is 0: the subscriber must resynchronise."""
        self.resync_pending = True


__all__ = ["LinkSender"]
