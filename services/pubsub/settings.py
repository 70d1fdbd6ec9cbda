"""Settings of the pubsub service, read once from environment variables.

- ``APEXMESH_PUBSUB_DOMAINS`` (required): domains whose ``apex=pubsub`` this is.
- ``APEXMESH_REDIS_URL`` (``redis://127.0.0.1:6379/0``): TLS or a password unless dev.
- ``APEXMESH_REDIS_PREFIX`` (``apexmesh``): prefix of every key (``store/keys.py``).
- ``APEXMESH_REDIS_MAX_CONNECTIONS`` (``64``), ``APEXMESH_REDIS_POOL_TIMEOUT_SECONDS`` (``5``):
  the process's one bounded, blocking Redis pool (``apexmesh/store/connection.py``).
- ``APEXMESH_ACCESS_ADDRESS`` (required): gRPC address of the access service.
- ``APEXMESH_RELAY_ADDRESSES``: relay gRPC addresses replies and data are submitted to.
- ``APEXMESH_RELAY_TIMEOUT_SECONDS`` (``2.0``): deadline of one Submit or access call.
- ``APEXMESH_PUBSUB_FANOUT_TIMEOUT_SECONDS`` (``10.0``): deadline of one attempt of the
  Submit of forwarded data (up to 1,000 recipients; under flow control a relay answers
  once every copy is in its custody).
- ``APEXMESH_PUBSUB_MAX_SUBMITS`` (``256``): Submits out at once from this pod (replies
  and fan-out together); a publication waits for room, which slows its relay's sender.
- ``APEXMESH_PUBSUB_SUBMIT_ATTEMPTS`` (``4``): attempts of one Submit (a relay that is
  unavailable, or a call cut off mid-flight, retried with the same submission id).
- ``APEXMESH_PUBSUB_CACHED_TOPICS`` (``100000``): topics whose subscriber list a pod
  keeps (least recently published evicted first; reloaded on the next publication).
- ``APEXMESH_PUBSUB_PLACEMENT_TTL_MS`` (``2000``): age at which a pod reads again (in the
  background, the old one serving meanwhile) the relay pod of a subscriber; it only
  steers the fan-out, a stale one costs the relays a hop.
- ``APEXMESH_PRESENCE_ADDRESS`` (optional): the presence service; each topic is then a
  tuple of ``apex=pubsub@DOMAIN``'s presence entry (sections 4.2/4.3 step 3.2).
- ``APEXMESH_PUBSUB_POD_ID`` (host name): this pod's id (journal ownership, leader lock).
- ``APEXMESH_PUBSUB_LEASE_MS`` (``3000``): pod and leader lease; a dead pod's journal is
  redone, and its leadership taken over, within this time.
- ``APEXMESH_PUBSUB_TICK_SECONDS`` (``0.1``): longest sleep of the lease loop.
- ``APEXMESH_PUBSUB_GRANT_DATA`` (``0``): grant ``core:data`` on the topic to each
  subscriber, revoked on cancel (section 7's "only subscribers publish" policy).
- ``APEXMESH_PUBSUB_HOPS`` (``8``): dataHopping budget of data the service forwards.
- ``APEXMESH_PUBSUB_UPSTREAMS``: ``TOPIC@DOMAIN=UPSTREAM`` list: this service subscribes
  as ``apex=pubsub/TOPIC@DOMAIN`` to ``apex=pubsub@UPSTREAM`` and redistributes (2.6).
- ``APEXMESH_PUBSUB_UPSTREAM_DURATION`` (``3600``): seconds of that subscription; it is
  renewed at half-life.
- ``APEXMESH_PUBSUB_LEADER_ELECTION`` (``auto``): ``redis`` (a lock in Redis),
  ``kubernetes`` (a coordination.k8s.io Lease per domain) or ``auto`` (Kubernetes when
  ``KUBERNETES_SERVICE_HOST`` is set, i.e. inside a cluster).
- ``APEXMESH_PUBSUB_NAMESPACE``: the Leases' namespace (default: the pod's own, from the
  service account mount).
- ``APEXMESH_PUBSUB_GRPC_HOST`` / ``_PORT`` (``127.0.0.1`` / ``7414``; 0 = any port).
- ``APEXMESH_PUBSUB_HTTP_HOST`` / ``_PORT`` (``127.0.0.1`` / ``8414``): admin HTTP.
- ``APEXMESH_PUBSUB_ADVERTISE_ADDRESS``: the ``host:port`` other pubsub pods reach this
  pod's gRPC at, to forward publications of the robust topics it sequences
  (docs/robust.md); default: the gRPC host (``POD_IP`` when that is a wildcard) and port.
- ``APEXMESH_ADMIN_TOKEN`` / ``APEXMESH_ADMIN_READ_TOKEN`` (or ``..._FILE``): bearer
  tokens of the admin API (apexmesh/ops/admin.py).
- ``APEXMESH_PUBSUB_CATALOGUE`` (``eager``): when a pod loads the whole catalogue (the
  latest snapshot plus later events, docs/snapshot.md): ``eager`` in the background as
  it starts, ``lazy`` at the first ``GET /catalogue``.
- ``APEXMESH_SHUTDOWN_GRACE`` (``5.0``), ``APEXMESH_DEV`` (``0``).
- ``APEXMESH_PUBSUB_SCHEMAS``: ``URI=PATH`` list of the XML Schemas topics may name by
  URI (draft-wyman 6.2.3; nothing is ever fetched), read at start-up (a DOCTYPE or
  entity in one is refused then).
- ``APEXMESH_PUBSUB_MAX_MESSAGE_OCTETS`` (``1048576``): largest content-based message;
  one octet more is answered 554.
- ``APEXMESH_PUBSUB_MESSAGE_LIFETIME_SECONDS`` (``3600``): how long a message without an
  expiration-date stays cached (5.2.1's service default).

Wildcard binds are refused unless ``APEXMESH_DEV=1`` (the rule of apexmesh/ops/settings.py).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from apexmesh.apex.endpoint import EndpointError, normalize_domain
from apexmesh.apex.party import MAX_HOPS
from apexmesh.ops.settings import (
    DEV_FLAG,
    AdminTokens,
    SettingsError,
    admin_tokens,
    bind_host,
    check_grpc_target,
    check_redis_url,
    env_flag,
    env_float,
    env_int,
    env_list,
    grpc_targets,
    required_domains,
)
from apexmesh.pubsub.elements import is_topic
from apexmesh.store.connection import RedisPoolSettings


@dataclass(frozen=True, slots=True)
class Upstream:
    """One redistributed topic: ``topic@domain`` is fed by ``apex=pubsub@upstream``."""

    topic: str
    domain: str
    upstream: str


def _upstreams(env: Mapping[str, str], domains: tuple[str, ...]) -> tuple[Upstream, ...]:
    name = "APEXMESH_PUBSUB_UPSTREAMS"
    out: list[Upstream] = []
    for item in env_list(env, name):
        local, sep, upstream = item.partition("=")
        topic, at, domain = local.partition("@")
        if not sep or not at or not is_topic(topic.strip()):
            raise SettingsError(f"{name}: {item!r} is not TOPIC@DOMAIN=UPSTREAM")
        try:
            domain = normalize_domain(domain.strip())
            upstream = normalize_domain(upstream.strip())
        except EndpointError as exc:
            raise SettingsError(f"{name}: {exc}") from None
        if domain not in domains:
            raise SettingsError(f"{name}: {domain} is not one of APEXMESH_PUBSUB_DOMAINS")
        if upstream == domain:
            raise SettingsError(f"{name}: {item!r} redistributes its own domain")
        out.append(Upstream(topic.strip(), domain, upstream))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PubsubSettings:
    domains: tuple[str, ...]
    redis_url: str
    redis_prefix: str
    redis_pool: RedisPoolSettings
    access_address: str
    relay_addresses: tuple[str, ...]
    relay_timeout: float
    fanout_timeout: float
    max_submits: int
    submit_attempts: int
    cached_topics: int
    placement_ttl_ms: int
    presence_address: str
    pod_id: str
    lease_ms: int
    tick_seconds: float
    grant_data: bool
    hops: int
    upstreams: tuple[Upstream, ...]
    upstream_duration: int
    leader_election: str
    namespace: str
    grpc_host: str
    grpc_port: int
    http_host: str
    http_port: int
    shutdown_grace: float
    dev: bool
    admin: AdminTokens = field(default_factory=AdminTokens)
    #: URI -> the schema document topics may name by that URI (draft-wyman 6.2.3).
    schemas: tuple[tuple[str, bytes], ...] = ()
    max_message_octets: int = 1024 * 1024
    message_lifetime_ms: int = 3_600_000
    catalogue: str = "eager"
    #: host:port other pods forward robust publications to ("": derived at start).
    advertise_address: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PubsubSettings:
        """Read and validate; raise :class:`SettingsError` with the variable's name."""
        env = os.environ if env is None else env
        dev = env_flag(env, DEV_FLAG)
        domains = required_domains(env, "APEXMESH_PUBSUB_DOMAINS")
        access = env.get("APEXMESH_ACCESS_ADDRESS", "")
        if not access:
            raise SettingsError("APEXMESH_ACCESS_ADDRESS is required")
        presence = env.get("APEXMESH_PRESENCE_ADDRESS", "")
        tick = env_float(env, "APEXMESH_PUBSUB_TICK_SECONDS", 0.1)
        if not 0 < tick <= 1:
            raise SettingsError("APEXMESH_PUBSUB_TICK_SECONDS must be in (0, 1]")
        lease_ms = env_int(env, "APEXMESH_PUBSUB_LEASE_MS", 3000)
        if not 300 <= lease_ms <= 600_000:
            raise SettingsError("APEXMESH_PUBSUB_LEASE_MS must be in [300, 600000]")
        hops = env_int(env, "APEXMESH_PUBSUB_HOPS", 8)
        if not 1 <= hops <= MAX_HOPS:
            raise SettingsError(f"APEXMESH_PUBSUB_HOPS must be in [1, {MAX_HOPS}]")
        duration = env_int(env, "APEXMESH_PUBSUB_UPSTREAM_DURATION", 3600)
        if not 2 <= duration <= 2_147_483_647:
            raise SettingsError("APEXMESH_PUBSUB_UPSTREAM_DURATION must be at least 2")
        pod_id = env.get("APEXMESH_PUBSUB_POD_ID", "") or socket.gethostname()
        catalogue = env.get("APEXMESH_PUBSUB_CATALOGUE", "eager") or "eager"
        if catalogue not in ("eager", "lazy"):
            raise SettingsError("APEXMESH_PUBSUB_CATALOGUE must be eager or lazy")
        election = env.get("APEXMESH_PUBSUB_LEADER_ELECTION", "auto") or "auto"
        if election not in ("auto", "redis", "kubernetes"):
            raise SettingsError("APEXMESH_PUBSUB_LEADER_ELECTION must be auto, redis or kubernetes")
        return cls(
            domains=domains,
            redis_url=check_redis_url(
                env.get("APEXMESH_REDIS_URL", "redis://127.0.0.1:6379/0"), dev=dev
            ),
            redis_prefix=env.get("APEXMESH_REDIS_PREFIX", "apexmesh") or "apexmesh",
            redis_pool=RedisPoolSettings.from_env(env),
            access_address=check_grpc_target("APEXMESH_ACCESS_ADDRESS", access),
            relay_addresses=grpc_targets(env, "APEXMESH_RELAY_ADDRESSES"),
            relay_timeout=env_float(env, "APEXMESH_RELAY_TIMEOUT_SECONDS", 2.0),
            fanout_timeout=env_float(env, "APEXMESH_PUBSUB_FANOUT_TIMEOUT_SECONDS", 10.0),
            max_submits=env_int(env, "APEXMESH_PUBSUB_MAX_SUBMITS", 256, low=1, high=100_000),
            submit_attempts=env_int(env, "APEXMESH_PUBSUB_SUBMIT_ATTEMPTS", 4, low=1, high=100),
            cached_topics=env_int(
                env, "APEXMESH_PUBSUB_CACHED_TOPICS", 100_000, low=1, high=100_000_000
            ),
            placement_ttl_ms=env_int(
                env, "APEXMESH_PUBSUB_PLACEMENT_TTL_MS", 2000, low=1, high=3_600_000
            ),
            presence_address=check_grpc_target("APEXMESH_PRESENCE_ADDRESS", presence)
            if presence
            else "",
            pod_id=pod_id,
            lease_ms=lease_ms,
            tick_seconds=tick,
            grant_data=env_flag(env, "APEXMESH_PUBSUB_GRANT_DATA"),
            hops=hops,
            upstreams=_upstreams(env, domains),
            upstream_duration=duration,
            leader_election=election,
            namespace=env.get("APEXMESH_PUBSUB_NAMESPACE", ""),
            grpc_host=bind_host(env, "APEXMESH_PUBSUB_GRPC_HOST", dev=dev),
            grpc_port=env_int(env, "APEXMESH_PUBSUB_GRPC_PORT", 7414),
            http_host=bind_host(env, "APEXMESH_PUBSUB_HTTP_HOST", dev=dev),
            http_port=env_int(env, "APEXMESH_PUBSUB_HTTP_PORT", 8414),
            shutdown_grace=env_float(env, "APEXMESH_SHUTDOWN_GRACE", 5.0),
            dev=dev,
            admin=admin_tokens(env, dev=dev),
            schemas=_schemas(env),
            max_message_octets=env_int(
                env, "APEXMESH_PUBSUB_MAX_MESSAGE_OCTETS", 1024 * 1024, low=64, high=64 << 20
            ),
            message_lifetime_ms=1000
            * env_int(
                env, "APEXMESH_PUBSUB_MESSAGE_LIFETIME_SECONDS", 3600, low=1, high=31_536_000
            ),
            catalogue=catalogue,
            advertise_address=env.get("APEXMESH_PUBSUB_ADVERTISE_ADDRESS", "").strip(),
        )


def _schemas(env: Mapping[str, str]) -> tuple[tuple[str, bytes], ...]:
    """``APEXMESH_PUBSUB_SCHEMAS``: each ``URI=PATH`` read now (a missing file is an
    operator's mistake, reported at start-up)."""
    name = "APEXMESH_PUBSUB_SCHEMAS"
    out: list[tuple[str, bytes]] = []
    for item in env_list(env, name):
        uri, sep, path = item.partition("=")
        if not sep or not uri.strip() or not path.strip():
            raise SettingsError(f"{name}: {item!r} is not URI=PATH")
        try:
            with open(path.strip(), "rb") as handle:  # noqa: PTH123 - read once at start-up
                out.append((uri.strip(), handle.read()))
        except OSError as exc:
            raise SettingsError(f"{name}: {path.strip()}: {exc.strerror}") from None
    return tuple(out)


__all__ = ["PubsubSettings", "Upstream"]
