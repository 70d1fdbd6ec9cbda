"""The Redis keys of robust pubsub (docs/robust.md "Phase 2: the service design"),
under the deployment's prefix: ``<prefix>:robust:{<domain>:<topic>}:...``, the braces
putting a topic's keys in one Redis Cluster slot so that each script touches one slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from apexmesh.store.keys import Keys


@dataclass(frozen=True, slots=True)
class RobustKeys:
    """The robust keys of one deployment (under the same prefix as :class:`Keys`)."""

    keys: Keys

    def _base(self, domain: str, topic: str) -> str:
        return f"{self.keys.prefix}:robust:{{{domain}:{topic}}}"

    def stream(self, domain: str, topic: str) -> str:
        """STREAM of the topic's publications and permission changes."""
        return self._base(domain, topic) + ":stream"

    def sources(self, domain: str, topic: str) -> str:
        """HASH publisher -> last source seq."""
        return self._base(domain, topic) + ":sources"

    def epochs(self, domain: str, topic: str) -> str:
        """HASH subscriber -> link epoch (removed when the subscription ends)."""
        return self._base(domain, topic) + ":epochs"

    def link(self, domain: str, topic: str, subscriber: str) -> str:
        """HASH with a TTL: one link's context (``seq``, ``epoch``, ``l:<seq>``)."""
        return self._base(domain, topic) + ":link:" + subscriber

    def images(self, domain: str, topic: str) -> str:
        """HASH item -> image JSON."""
        return self._base(domain, topic) + ":images"

    def done(self, domain: str, topic: str, delivery: str) -> str:
        """STRING with PX: a delivery committed (its source seq and stream id), so that
        a relay's retry of it, on any pod, is not sequenced twice."""
        return self._base(domain, topic) + ":done:" + delivery

    def repair(self, domain: str, topic: str, subscriber: str) -> str:
        """STRING with PX: the transID of the subscriber's latest source repair; an
        older one still running (on any pod) stops when it sees another."""
        return self._base(domain, topic) + ":repair:" + subscriber

    def upstream(self, domain: str, topic: str) -> str:
        """STRING: a redistributed topic's upstream link (the upstream topic's settings
        and the position of the redistributor's stub), JSON, written with each
        publication it brings (services/pubsub/robust_upstream.py)."""
        return self._base(domain, topic) + ":upstream"

    def upstream_answers(self, domain: str, topic: str) -> str:
        """LIST with PX: the upstream server's answers to the redistributor's stub, for
        the topic's owner pod (any pod may receive them)."""
        return self._base(domain, topic) + ":upstream:answers"

    def owner(self, domain: str, topic: str) -> str:
        """STRING with PX: the pod sequencing the topic."""
        return self._base(domain, topic) + ":owner"

    def table(self, domain: str, topic: str) -> str:
        """STRING: the permission table in force (JSON), written with its ``perm`` entry
        so that it outlives the stream's retention."""
        return self._base(domain, topic) + ":perms"

    def topics(self, domain: str) -> str:
        """SET of the domain's robust topics (the pods' heartbeat task takes them)."""
        return f"{self.keys.prefix}:robust:topics:{domain}"


__all__ = ["RobustKeys"]
