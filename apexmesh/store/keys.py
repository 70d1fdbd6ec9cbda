"""Every Redis key and channel of apex-mesh, named once (DESIGN.md, "Layers", item 2).

Repositories never build key strings themselves: they ask a :class:`Keys` instance, so a
reader can see the whole Redis layout in this one file, and tests (or two deployments
sharing one Redis) can move everything under another prefix. Each method's docstring
says what the key holds, its Redis type and who writes it.

Redis Cluster (``Keys(prefix, cluster=True)``, chosen by a ``redis+cluster://`` URL,
:func:`apexmesh.store.connection.is_cluster_url`): a cluster runs a script or a MULTI only
when every key it names hashes to one slot, so each key carries a hash tag (``{...}``)
naming its *slot group*, the keys that some script or transaction touches together
(docs/redis.md, "Slot groups"): ``relay`` (attachments, relay pods and held data: a hold
checks the attachment in its script), ``access``, ``presence``, ``pubsub`` (the catalogue,
its event log, leases and journal, cached messages), ``ops``; robust pubsub's keys carry
one tag per topic (:mod:`apexmesh.store.robust_keys`). Channels are not keys (a cluster
broadcasts them) and keep their names. A standalone or Sentinel deployment keeps the
names it always had (no tag), so upgrading moves no data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: The prefix of every key in production.
DEFAULT_PREFIX: Final = "apexmesh"


@dataclass(frozen=True, slots=True)
class Keys:
    """The key space of one apex-mesh deployment."""

    prefix: str = DEFAULT_PREFIX
    #: Hash-tag every key with its slot group (Redis Cluster; see the module docstring).
    cluster: bool = False

    def _in(self, group: str) -> str:
        """The start of a key of slot group ``group``: the prefix, tagged in a cluster."""
        return f"{self.prefix}:{{{group}}}" if self.cluster else self.prefix

    def access_entries(self, owner: str) -> str:
        """HASH of one owner's explicit access entries (RFC 3341 section 3).

        Field: the canonical actor pattern (``ActorPattern.__str__``, escapes included);
        value: ``"<lastUpdate> <actions...>"`` where lastUpdate is RFC 3339 UTC with
        microseconds and actions are space-separated tokens (possibly none: an entry that
        denies). Written only by ``apexmesh.store.access_entries`` in a Lua script that
        also bumps :meth:`access_version` and publishes on :meth:`access_changes`.
        """
        return f"{self._in('access')}:access:entries:{owner}"

    def access_owners(self) -> str:
        """SET of owners that have at least one explicit entry (for listing and admin)."""
        return f"{self._in('access')}:access:owners"

    def access_version(self) -> str:
        """STRING counter, incremented once per committed change of any access entry.

        Callers that cache decisions tag them with the version they were computed at and
        compare it on resynchronisation (docs/access.md, "Cache protocol").
        """
        return f"{self._in('access')}:access:version"

    def access_changes(self) -> str:
        """Pub/sub CHANNEL carrying ``"<version> <owner>"`` after each committed change,
        published in the same script as the change itself."""
        return f"{self.prefix}:access:changes"

    def attachment(self, endpoint: str) -> str:
        """STRING: the id of the relay pod holding ``endpoint``'s attachment (RFC 3340
        4.4.1), with a lease (PEXPIRE) the holder renews while its BEEP session lives.
        Claimed with SET NX by ``apexmesh.store.attachments``; released by compare-and-
        delete, so a pod can never release another pod's attachment."""
        return f"{self._in('relay')}:relay:attachment:{endpoint}"

    def pod_attachments(self, pod_id: str) -> str:
        """SET of the endpoints one relay pod holds, so the pod renews (and on shutdown
        releases) all of them in one script call."""
        return f"{self._in('relay')}:relay:pod:{pod_id}:attachments"

    def relay_pod(self, pod_id: str) -> str:
        """STRING: the gRPC address (host:port) of a live relay pod, with the same lease
        as its attachments; absent once the pod stops renewing."""
        return f"{self._in('relay')}:relay:pod:{pod_id}:address"

    def presence_entries(self) -> str:
        """HASH of presence entries (RFC 3343 section 3). Field: the publisher endpoint;
        value: JSON with the entry's lastUpdate, publisherInfo and the tuples applications
        published (XML). The mesh's own tuples are in :meth:`presence_tuples`. Written
        only by ``apexmesh.store.presence`` (one MULTI per operation, with the
        operations). Entries written before that split are the ``presence`` XML itself,
        read once and rewritten."""
        return f"{self._in('presence')}:presence:entries"

    def presence_tuples(self, publisher: str) -> str:
        """HASH of the tuples the mesh keeps in ``publisher``'s entry (attachments, a
        pubsub service's topics). Field: the destination (``apex:`` URIs decoded); value:
        the ``tuple`` element as XML. One field per tuple, so a service with 10,000
        topics writes one field per change."""
        return f"{self._in('presence')}:presence:tuples:{publisher}"

    def presence_meta(self) -> str:
        """HASH of the older layout (per publisher, JSON with the mesh's destinations),
        read once beside old entries and then deleted."""
        return f"{self._in('presence')}:presence:meta"

    def presence_operations(self) -> str:
        """HASH of in-progress subscribe and watch operations (RFC 3343 sections 4.2,
        4.3). Field: ``"<originator> <transID>"``; value: JSON with kind, subject,
        duration and the expiry (RFC 3339). Written by ``apexmesh.store.presence``."""
        return f"{self._in('presence')}:presence:operations"

    def presence_attached(self) -> str:
        """SET of endpoints the presence service shows attached (relay reports), checked
        against :meth:`attachment` so a lapsed lease is seen as a detach."""
        return f"{self._in('presence')}:presence:attached"

    # ------------------------------------------------------------------ held data
    # RFC 3342 hold4Endpoint (party pack, issue #5). Written only by apexmesh.store.held,
    # every change in one Lua script (docs/party.md, "Held data").

    def held_seq(self) -> str:
        """STRING counter: the id of the last held entry (INCR). Ids are never reused,
        so a late acknowledgement can never remove a newer entry."""
        return f"{self._in('relay')}:held:seq"

    def held_queue(self, endpoint: str) -> str:
        """ZSET of the ids held for ``endpoint``, scored by id: the delivery order."""
        return f"{self._in('relay')}:held:queue:{endpoint}"

    def held_data(self, endpoint: str) -> str:
        """HASH id -> the held payload (the data as it will be delivered)."""
        return f"{self._in('relay')}:held:data:{endpoint}"

    def held_meta(self, endpoint: str) -> str:
        """HASH id -> ``"<heldAt ms> <deadline ms, 0 none> <size> <domain>"``."""
        return f"{self._in('relay')}:held:meta:{endpoint}"

    def held_usage(self, endpoint: str) -> str:
        """HASH with fields ``count`` and ``bytes`` held for ``endpoint`` (its quota)."""
        return f"{self._in('relay')}:held:usage:{endpoint}"

    def held_domain(self, domain: str) -> str:
        """HASH with fields ``count`` and ``bytes`` held for a domain (its quota)."""
        return f"{self._in('relay')}:held:domain:{domain}"

    def held_since(self, domain: str) -> str:
        """ZSET of ``"<id> <endpoint>"`` held in a domain, scored by heldAt (ms): the
        oldest held age."""
        return f"{self._in('relay')}:held:since:{domain}"

    def held_deadlines(self) -> str:
        """ZSET of ``"<id> <endpoint>"`` scored by the hold deadline (ms): expiry."""
        return f"{self._in('relay')}:held:deadlines"

    def held_domains(self) -> str:
        """SET of domains that have held data at some time (for metrics)."""
        return f"{self._in('relay')}:held:domains"

    def held_drain(self, endpoint: str) -> str:
        """STRING: the owner token of the one drainer of ``endpoint``'s held data, with a
        lease (PX); claimed with SET NX semantics, released by compare-and-delete."""
        return f"{self._in('relay')}:held:drain:{endpoint}"

    def held_report_after(self) -> str:
        """ZSET of ``"<id> <endpoint>"`` scored by the time the held entry's transient
        timing report (RFC 3342 section 2.2, code 350) is due; taken (ZREM) once."""
        return f"{self._in('relay')}:held:reportafter"

    # ------------------------------------------------------------------ pubsub
    # draft-schwartz-apex-pubsub (issue #7). Written only by apexmesh.store.pubsub, every
    # multi-key change in one Lua script (docs/pubsub.md, "State in Redis").

    def pubsub_topics(self) -> str:
        """HASH of the topics of every served domain. Field: ``"<domain> <topic>"``;
        value: JSON ``{"created_ms", "creator"}``."""
        return f"{self._in('pubsub')}:pubsub:topics"

    def pubsub_subscriptions(self, domain: str, topic: str) -> str:
        """HASH of one topic's subscriptions. Field: the subscriber endpoint, followed by
        ``"\\n<subscription id>"`` for a content-based one; value: JSON ``{"originator",
        "trans_id", "expires_ms"}`` (content-based: with ``subscription_id``,
        ``selector_class``, ``selector``, ``cached``)."""
        return f"{self._in('pubsub')}:pubsub:subs:{domain}:{topic}"

    def pubsub_version(self, domain: str, topic: str) -> str:
        """STRING counter bumped by every change of one topic or its subscriptions, so a
        pod can keep the subscriber list cached and re-read it only when it changed."""
        return f"{self._in('pubsub')}:pubsub:version:{domain}:{topic}"

    def pubsub_expiry(self, domain: str) -> str:
        """ZSET of one domain's leases: member ``"<domain>\\n<topic>\\n<subscriber>"``,
        score the lease end (ms since the epoch). The leader ends what is due (4.5 5.2)."""
        return f"{self._in('pubsub')}:pubsub:expiry:{domain}"

    def pubsub_events(self) -> str:
        """STREAM, append-only: one entry per topic or subscription change, schema v2 in
        docs/pubsub.md ("Event log"). Read by the Spark snapshot job, which trims what its
        latest snapshot covers (docs/snapshot.md); the service never trims it."""
        return f"{self._in('pubsub')}:pubsub:events"

    def pubsub_snapshot(self) -> str:
        """HASH describing the current compact snapshot of the catalogue (docs/
        snapshot.md): ``generation``, ``position`` (the last event id it covers),
        ``snapshot_ms``, ``topics``, ``subscriptions``, ``schema``, ``trimmed`` (the log
        holds nothing at or before this id), ``storage``. Switched in one script by
        ``apexmesh.store.pubsub_snapshot`` once a generation's keys are complete."""
        return f"{self._in('pubsub')}:pubsub:snapshot"

    def pubsub_snapshot_topics(self, generation: str) -> str:
        """HASH of one snapshot generation's topics: field ``"<domain> <topic>"``, value
        compact JSON (``apexmesh.pubsub.catalogue.topic_to_json``). Written before the
        switch, expired a grace period after the next switch."""
        return f"{self._in('pubsub')}:pubsub:snapshot:{generation}:topics"

    def pubsub_snapshot_subscriptions(self, generation: str) -> str:
        """HASH of one snapshot generation's subscriptions: field ``"<domain>\\n<topic>
        \\n<subscriber>\\n<subscription_id>"``, value compact JSON
        (``apexmesh.pubsub.catalogue.subscription_to_json``)."""
        return f"{self._in('pubsub')}:pubsub:snapshot:{generation}:subs"

    def pubsub_journal(self, domain: str) -> str:
        """HASH of one domain's in-progress work (section 4: "in persistent storage").
        Field: an id; value: JSON with ``kind`` and ``pod``. Written with the change it
        belongs to, removed once done; entries of a pod whose lease lapsed are redone by
        the domain's leader."""
        return f"{self._in('pubsub')}:pubsub:journal:{domain}"

    def pubsub_pod(self, pod_id: str) -> str:
        """STRING with a lease (PX): present while the pubsub pod ``pod_id`` lives."""
        return f"{self._in('pubsub')}:pubsub:pod:{pod_id}"

    def pubsub_leader(self, domain: str) -> str:
        """STRING: the pod id of the one pubsub pod ending a domain's leases and redoing
        its journal, with a lease (PX); claimed with SET NX, renewed and released by
        compare."""
        return f"{self._in('pubsub')}:pubsub:leader:{domain}"

    def pubsub_upstream(self, domain: str, topic: str) -> str:
        """STRING: the last successful upstream subscribe of a redistributed topic (ms),
        with the lease of that subscription (PX), so any pod can tell when to renew."""
        return f"{self._in('pubsub')}:pubsub:upstream:{domain}:{topic}"

    def pubsub_subject(self, domain: str, subscriber: str) -> str:
        """HASH of one subscriber's subscriptions in a domain (draft-wyman 5.8.2: a cancel
        may name no topic). Field: ``"<topic>\\n<subscription id>"``, the id empty for a
        plain (draft-schwartz) subscription; value: ``"1"``. Written with the
        subscriptions themselves."""
        return f"{self._in('pubsub')}:pubsub:subject:{domain}:{subscriber}"

    def pubsub_subscription_ids(self, domain: str, subscriber: str) -> str:
        """STRING counter: the last subscription id given to ``subscriber`` by the
        service of ``domain`` (draft-wyman 5.8: unique per service and endpoint)."""
        return f"{self._in('pubsub')}:pubsub:subid:{domain}:{subscriber}"

    def pubsub_cached(self, domain: str, topic: str) -> str:
        """HASH of one topic's cached messages (draft-wyman 5.2.1, 5.8). Field:
        ``"<publisher>\\n<message-id>"``; value: JSON ``{"revision", "expires_ms",
        "body"}`` (the envelope, hex)."""
        return f"{self._in('pubsub')}:pubsub:cached:{domain}:{topic}"

    # ------------------------------------------------------------------ operations
    # Issue #22: what operators see. Written only by apexmesh.store.hops.

    def ops_hops(self) -> str:
        """STREAM of traced hops, capped (XADD MAXLEN ~): one entry per data with a
        statusRequest that a relay pod of this deployment concluded, with each
        recipient's outcome and route (docs/operations.md, "Trace a message"). Read by
        the relays' admin API (``apexctl trace``, the dashboard's trace view)."""
        return f"{self._in('ops')}:ops:hops"


__all__ = ["DEFAULT_PREFIX", "Keys"]
