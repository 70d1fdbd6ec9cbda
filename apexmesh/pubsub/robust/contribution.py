"""Contributions: a subscriber publishing to a source for redistribution (XEP-0040 5.2).

"Contributions in this context are when a subscriber publishes to one or more sources for
redistribution so that it may reach the communities that subscribe to that source ...
there is a need for content, flow control/throttling and ongoing permissioning."

On APEX a contribution is a publication to ``apex=pubsub/TOPIC@DOMAIN`` whose ``publish``
option names a ``source`` other than its originator. It is accepted when

1. the topic takes contributions at all (its ``contributions`` setting), else 537;
2. the source's owner allows this contributor: the access entries of the source endpoint
   grant the contributor ``pubsub:contribute`` (RFC 3341; the service asks the access
   service, this module gets the answer), else 537;
3. the contributor is within its rate: a token bucket per (topic, source, contributor),
   ``RATE`` per second with bursts of ``BURST``, else 450 (transient: later it passes).

It is then sequenced as a publication of the source (the source's next source seq), with
``contributor`` in every delivery's ``robust`` option. The buckets are a
:class:`~apexmesh.common.cache.BoundedCache` (the least recently used contributor's
bucket is forgotten first: it starts full again, which only ever lets one more burst
through).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.common.cache import BoundedCache
from apexmesh.pubsub.robust.settings import ContributionRate

#: The access token a source's owner grants a contributor (RFC 3341 actions syntax).
CONTRIBUTE_TOKEN: Final = "pubsub:contribute"  # noqa: S105 - an access token name
#: Contributors whose buckets a pod keeps.
MAX_BUCKETS: Final = 100_000


@dataclass(frozen=True, slots=True)
class Bucket:
    """A token bucket: ``tokens`` available at ``at_ms``."""

    tokens: float
    at_ms: int


def take(bucket: Bucket | None, rate: ContributionRate, now_ms: int) -> tuple[bool, Bucket]:
    """Refill ``bucket`` to ``now_ms`` (a missing one is full) and take one token;
    (taken, the bucket after). A clock that went backwards refills nothing."""
    if bucket is None:
        tokens = float(rate.burst)
    else:
        elapsed = max(0, now_ms - bucket.at_ms)
        tokens = min(float(rate.burst), bucket.tokens + elapsed * rate.per_second / 1000.0)
    if tokens >= 1.0:
        return True, Bucket(tokens - 1.0, now_ms)
    return False, Bucket(tokens, now_ms)


class ContributionGate:
    """The three checks of the module docstring for one pod."""

    def __init__(self, limit: int = MAX_BUCKETS) -> None:
        self._buckets: BoundedCache[tuple[str, str, str], Bucket] = BoundedCache(
            "robust-contribution-buckets", limit
        )

    def check(
        self,
        *,
        topic: str,
        source: Endpoint,
        contributor: Endpoint,
        rate: ContributionRate | None,
        allowed: bool,
        now_ms: int,
    ) -> None:
        """Return when the contribution may be sequenced; raise 537 or 450."""
        if rate is None:
            _dtd.fail(f"topic {topic} takes no contributions", ApexReplyCode.NOT_AUTHORIZED)
        if not allowed:
            _dtd.fail(
                f"{source} does not allow {contributor} to contribute",
                ApexReplyCode.NOT_AUTHORIZED,
            )
        key = (topic, str(source), str(contributor))
        ok, bucket = take(self._buckets.get(key), rate, now_ms)
        self._buckets.put(key, bucket)
        if not ok:
            _dtd.fail(
                f"{contributor} contributes faster than {rate.per_second}/s",
                ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT,
            )


__all__ = ["CONTRIBUTE_TOKEN", "MAX_BUCKETS", "Bucket", "ContributionGate", "take"]
