"""Settings of the relay, read once from environment variables.

- ``APEXMESH_DOMAINS`` (required): administrative domains this relay serves.
- ``APEXMESH_RELAY_POD_ID`` (hostname-pid): this pod's id in the attachment table.
- ``APEXMESH_RELAY_EDGE_HOST`` / ``_PORT`` (``127.0.0.1`` / ``10288``): apex-edge BEEP.
- ``APEXMESH_RELAY_MESH_HOST`` / ``_PORT`` (``127.0.0.1`` / ``10289``): apex-mesh BEEP.
- ``APEXMESH_RELAY_GRPC_HOST`` / ``_PORT`` (``127.0.0.1`` / ``7401``): pod-to-pod gRPC.
- ``APEXMESH_RELAY_ADVERTISE_HOST`` (the gRPC host): address other pods dial.
- ``APEXMESH_RELAY_HTTP_HOST`` / ``_PORT`` (``127.0.0.1`` / ``8401``): health, metrics.
- ``APEXMESH_REDIS_URL``, ``APEXMESH_REDIS_PREFIX``, ``APEXMESH_REDIS_MAX_CONNECTIONS``,
  ``APEXMESH_REDIS_POOL_TIMEOUT_SECONDS``: as for every service.
- ``APEXMESH_ACCESS_ADDRESS`` (required): gRPC address of the access service.
- ``APEXMESH_REPORT_ADDRESS``: gRPC address of the report service (statusRequest).
- ``APEXMESH_PRESENCE_ADDRESS``: gRPC address of the presence service, told about
  attachments (optional; services/relay/presence_hook.py).
- ``APEXMESH_RELAY_SERVICES``: ``name=host:port`` list of other well-known endpoint
  services (presence, pubsub ...), reached with the WellKnownEndpoint contract; a
  service with several pods is ``name=host:port|host:port`` (spread round-robin, the
  next one tried when a pod is unreachable).
- ``APEXMESH_RELAY_ROUTES``: ``domain=host:port`` static apex-mesh routes, used when DNS
  has no ``_apex-mesh._tcp.DOMAIN`` SRV record.
- ``APEXMESH_RELAY_TRUSTED``: domains whose relays may bind without authenticating as
  that domain (RFC 3340 section 4.5.2 "trusted" intermediaries).
- ``APEXMESH_RELAY_TLS_CERT`` / ``_KEY``: PEM files for TLS tuning; ``_TLS_CA``: CA
  bundle used to verify relays of other domains.
- ``APEXMESH_RELAY_SASL_FILE``: ``identity:password`` lines for SASL (mount a Secret); an
  endpoint's identity is its full name (``fred@example.com``), a peer relay's its domain.
- ``APEXMESH_RELAY_RELOAD_SECONDS`` (``10``): how often the TLS files and the SASL file
  are looked at; changed ones are loaded without a restart, sessions kept (``0``: only on
  SIGHUP or ``POST /admin/v1/reload``; services/relay/reloading.py).
- ``APEXMESH_RELAY_REQUIRE_PRIVACY`` (``1`` outside development runs, else ``0``): until
  TLS protects a session the greeting offers only the TLS profile and every other start
  is refused (RFC 3080 sections 3 and 9), so SASL never runs over plaintext.
- ``APEXMESH_RELAY_HOST_NAMES``: host names this relay answers to besides its domains
  and the DNS names of its certificate (DIGEST-MD5 accepts ``beep/NAME`` for each).
- ``APEXMESH_RELAY_SASL_MAX_FAILURES`` (``5``), ``_SASL_DELAY_MS`` (``500``),
  ``_SASL_MAX_DELAY_MS`` (``8000``), ``_SASL_WINDOW_SECONDS`` (``600``),
  ``_SASL_REFUSE_AFTER`` (``20``), ``_SASL_IDENTITY_AFTER`` (``10``): the answer to a
  failed SASL exchange (RFC 4422 section 6.2) is held for a delay that doubles with each
  failure of the peer's address within the window, held answers of one address in turn;
  at the maximum (per session or per address) the session is released with 421; past
  ``_REFUSE_AFTER`` failures an address's SASL starts are refused (421) unchecked; past
  ``_IDENTITY_AFTER`` failures of one claimed identity from any address its failures are
  held too (apexmesh/beep/sasl/throttle.py).
- ``APEXMESH_RELAY_SASL_CRAM_MD5`` (``0``): ``1`` offers CRAM-MD5 (RFC 2195) beside
  SCRAM-SHA-256, DIGEST-MD5 and PLAIN, for peers that have nothing better; it checks the
  password of the credentials file, and like PLAIN it is refused before TLS.
- ``APEXMESH_RELAY_INTEROP_VORTEX_NUL`` (``0``): ``1`` accepts a NUL frame whose payload
  is an empty MIME header, which Vortex 1.1 sends by default (RFC 3080 section 2.2.1.1
  makes it poorly formed: without the setting the session is ended).
- ``APEXMESH_RELAY_LEASE_MS`` (``10000``): attachment lease; renewed every third.
- ``APEXMESH_RELAY_MAX_MESSAGE`` (``4194304``): largest BEEP message accepted.
- ``APEXMESH_RELAY_SERVICE_TIMEOUT_MS`` (``30000``): how long a well-known service (pubsub,
  presence, report) may take to answer the relay before the recipient's outcome is 421.
- ``APEXMESH_RELAY_HOLD`` (``1``): offer hold4Endpoint (RFC 3342 section 3); ``0``
  makes it an option this relay does not understand.
- Administrative limits on held data (RFC 3342 section 7; 0 means no limit):
  ``APEXMESH_RELAY_HOLD_MAX_MS`` (``86400000``, longest hold),
  ``APEXMESH_RELAY_HOLD_ENDPOINT_BYTES`` (16 MiB) / ``_ENDPOINT_COUNT`` (``100000``),
  ``APEXMESH_RELAY_HOLD_DOMAIN_BYTES`` (1 GiB) / ``_DOMAIN_COUNT`` (``1000000``),
  ``APEXMESH_RELAY_HOLD_REQUIRE_TIMING`` (``0``: ``1`` holds only data with a dataTiming
  noLaterThan), ``APEXMESH_RELAY_HOLD_MAX_NO_LATER_THAN`` (``0``); a full quota answers
  450, a policy 554.
- ``APEXMESH_RELAY_HOLD_SWEEP_MS`` (``250``): how often each pod expires held data and
  sends the transient reports of held data that are due.
- ``APEXMESH_RELAY_MIN_TRANSIT_MS`` (``0``): the least time a hop to another relay takes;
  dataTiming deadlines closer than that fail early (RFC 3342 section 2.1, prediction).
- Flow control (services/relay/flow.py): ``APEXMESH_RELAY_ENDPOINT_IN_FLIGHT`` (``256``)
  data and ``APEXMESH_RELAY_ENDPOINT_OCTETS`` (4 MiB) sent to one endpoint and not answered;
  ``APEXMESH_RELAY_ENDPOINT_WAITING`` (``4096``) deliveries waiting for room before new
  ones are shed; ``APEXMESH_RELAY_SLOW_CONSUMER_SECONDS`` (``10``): a delivery waiting that
  long makes the endpoint a slow consumer (its data shed, counted, reported, until it
  catches up); ``APEXMESH_RELAY_POD_STREAM_IN_FLIGHT`` (``8192``) deliveries in flight to
  one other pod; ``APEXMESH_RELAY_SERVICE_CALLS`` (``256``) calls in flight to one pod of a
  well-known service; ``APEXMESH_RELAY_DOMAIN_IN_FLIGHT`` (``1024``) data in flight to one
  other domain; ``APEXMESH_RELAY_RETRY_SERVICES`` (``pubsub``): services whose calls cut
  off mid-flight are retried with the same delivery id (they do the work once per id).
- ``APEXMESH_RELAY_RECEIVE_WINDOW`` (``1048576``) and ``APEXMESH_RELAY_SEQ_STEP``
  (``0.25``): the BEEP receive window each channel of the edge and the mesh listener
  advertises (4096 .. 1 MiB, RFC 3081 3.1.3) and the fraction of it a SEQ must move the
  window's edge by before it is sent; the data in flight on one channel of a sender is
  capped by the window (docs/relay.md "Receive window", with the figures).
- ``APEXMESH_RELAY_TOPIC_FANOUT`` (``1``): plain publications (a topic without schemas,
  selectors or robust delivery, data without options) are fanned out by the relay that
  took them, from the topics' subscriber lists it follows on the pubsub event log
  (services/relay/topics.py); ``0`` sends every publication to the pubsub pods.
  ``APEXMESH_RELAY_CACHED_TOPICS`` (``100000``): topics whose subscriber lists a pod keeps.
- ``APEXMESH_RELAY_TRACE`` (``1``): record where each data with a statusRequest went
  (one Redis stream entry per such data; ``apexctl trace``, services/relay/tracing.py).
- ``APEXMESH_ADMIN_TOKEN`` / ``APEXMESH_ADMIN_READ_TOKEN`` (or ``..._FILE``): bearer
  tokens of the admin API (apexmesh/ops/admin.py); without them it refuses every call.
- ``APEXMESH_DEV`` (``0``): ``1`` allows plaintext, unauthenticated attach and binds.

Outside a development run the relay refuses to start without TLS and SASL credentials:
an edge that accepts anonymous attaches over plaintext is an open relay.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cryptography import x509

from apexmesh.apex.endpoint import EndpointError, normalize_domain
from apexmesh.apex.holding import HoldLimits
from apexmesh.beep.limits import DEFAULT_WINDOW_OCTETS, MAX_MESSAGE_OCTETS, MAX_WINDOW_OCTETS
from apexmesh.beep.sasl import cram_md5
from apexmesh.beep.sasl.throttle import ThrottlePolicy
from apexmesh.ops.settings import (
    DEV_FLAG,
    AdminTokens,
    SettingsError,
    admin_tokens,
    check_redis_url,
    env_flag,
    env_float,
    env_int,
    env_list,
    env_pairs,
    required_domains,
)
from apexmesh.store.connection import RedisPoolSettings
from services.relay.flow import DEFAULT_LIMITS, FlowLimits

#: SASL mechanisms the relay offers by default, strongest first (CRAM-MD5 on request).
DEFAULT_SASL_MECHANISMS = ("SCRAM-SHA-256", "DIGEST-MD5", "PLAIN")


def _service_addresses(env: Mapping[str, str], name: str) -> dict[str, tuple[str, ...]]:
    """``name=host:port|host:port`` pairs: the pods of each well-known service."""
    services: dict[str, tuple[str, ...]] = {}
    for service, addresses in env_pairs(env, name).items():
        pods = tuple(a.strip() for a in addresses.split("|") if a.strip())
        if not pods:
            raise SettingsError(f"{name}: {service} has no address")
        services[service] = pods
    return services


def certificate_names(path: Path) -> tuple[str, ...]:
    """The DNS names and IP addresses a PEM certificate is issued for (subjectAltName,
    else its common name)."""
    try:
        certificate = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise SettingsError(f"{path}: not a readable PEM certificate ({exc})") from None
    try:
        alternative = certificate.extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        ).value
    except x509.ExtensionNotFound:
        return tuple(
            str(attribute.value)
            for attribute in certificate.subject.get_attributes_for_oid(
                x509.oid.NameOID.COMMON_NAME
            )
        )
    names = [*alternative.get_values_for_type(x509.DNSName)]
    names += [str(address) for address in alternative.get_values_for_type(x509.IPAddress)]
    return tuple(names)


def read_credentials(path: Path) -> dict[str, str]:
    """The ``identity:password`` lines of a credentials file (comments and blank lines
    skipped); :class:`SettingsError` names the first malformed line."""
    credentials: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        identity, sep, password = line.partition(":")
        if not sep or not identity or not password:
            raise SettingsError(f"{path}:{number}: expected identity:password")
        credentials[identity.strip()] = password
    return credentials


#: The receive window and SEQ step measured best for p2p (docs/relay.md "Receive window").
DEFAULT_RECEIVE_WINDOW: Final = 1 << 20
DEFAULT_SEQ_STEP: Final = 0.25


@dataclass(frozen=True, slots=True)
class RelaySettings:
    domains: tuple[str, ...]
    pod_id: str
    edge_host: str
    edge_port: int
    mesh_host: str
    mesh_port: int
    grpc_host: str
    grpc_port: int
    advertise_host: str
    http_host: str
    http_port: int
    redis_url: str
    redis_prefix: str
    redis_pool: RedisPoolSettings
    access_address: str
    report_address: str | None
    presence_address: str | None
    services: dict[str, tuple[str, ...]]
    routes: dict[str, str]
    trusted: tuple[str, ...]
    tls_cert: Path | None
    tls_key: Path | None
    tls_ca: Path | None
    credentials: dict[str, str]
    lease_ms: int
    max_message: int
    shutdown_grace: float
    dev: bool
    hold_limits: HoldLimits | None = None
    hold_sweep_ms: int = 250
    min_transit_ms: int = 0
    service_timeout_ms: int = 30_000
    flow_limits: FlowLimits = DEFAULT_LIMITS
    pod_stream_in_flight: int = 8192
    service_calls: int = 256
    domain_in_flight: int = 1024
    retry_services: tuple[str, ...] = ("pubsub",)
    #: Offer only TLS until it is on (RFC 3080 section 9); the default outside dev runs.
    require_privacy: bool = False
    #: Every name this relay answers to (domains, host names, certificate names): the
    #: hosts DIGEST-MD5's digest-uri may name.
    host_names: tuple[str, ...] = ()
    #: The SASL mechanisms offered, in the greeting's order (when there are credentials).
    sasl_mechanisms: tuple[str, ...] = DEFAULT_SASL_MECHANISMS
    sasl_throttle: ThrottlePolicy = field(default_factory=ThrottlePolicy)
    interop_vortex_nul: bool = False
    trace: bool = True
    topic_fanout: bool = True
    cached_topics: int = 100_000
    receive_window: int = DEFAULT_RECEIVE_WINDOW
    seq_step: float = DEFAULT_SEQ_STEP
    #: Seconds an access decision may take before the operation is refused (421, fail
    #: closed): a cold decision loads its owner's entries from Redis first.
    access_timeout: float = 2.0
    admin: AdminTokens = field(default_factory=AdminTokens)
    #: The credentials file (watched for changes, services/relay/reloading.py).
    sasl_file: Path | None = None
    #: Seconds between looks at the TLS and SASL files; 0: only on SIGHUP or request.
    reload_seconds: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RelaySettings:
        """Read and validate; raise :class:`SettingsError` naming the variable."""
        env = os.environ if env is None else env
        dev = env_flag(env, DEV_FLAG)
        domains = required_domains(env, "APEXMESH_DOMAINS")
        try:
            routes = {
                normalize_domain(k): v for k, v in env_pairs(env, "APEXMESH_RELAY_ROUTES").items()
            }
            trusted = tuple(normalize_domain(d) for d in env_list(env, "APEXMESH_RELAY_TRUSTED"))
        except EndpointError as exc:
            raise SettingsError(str(exc)) from None
        access = env.get("APEXMESH_ACCESS_ADDRESS", "")
        if not access:
            raise SettingsError("APEXMESH_ACCESS_ADDRESS is required (gRPC host:port)")
        cert = env.get("APEXMESH_RELAY_TLS_CERT") or None
        key = env.get("APEXMESH_RELAY_TLS_KEY") or None
        if (cert is None) != (key is None):
            raise SettingsError("APEXMESH_RELAY_TLS_CERT and _TLS_KEY go together")
        sasl_file = env.get("APEXMESH_RELAY_SASL_FILE") or None
        credentials = read_credentials(Path(sasl_file)) if sasl_file else {}
        if not dev and (cert is None or not credentials):
            raise SettingsError(
                "the relay needs APEXMESH_RELAY_TLS_CERT/_KEY and APEXMESH_RELAY_SASL_FILE; "
                "set APEXMESH_DEV=1 for a development run without them"
            )
        grpc_host = env.get("APEXMESH_RELAY_GRPC_HOST", "127.0.0.1")
        ca = env.get("APEXMESH_RELAY_TLS_CA") or None
        require_privacy = env_flag(env, "APEXMESH_RELAY_REQUIRE_PRIVACY", default=not dev)
        if require_privacy and cert is None:
            raise SettingsError("APEXMESH_RELAY_REQUIRE_PRIVACY needs APEXMESH_RELAY_TLS_CERT/_KEY")
        names = [*domains, *env_list(env, "APEXMESH_RELAY_HOST_NAMES")]
        if cert is not None:
            names += certificate_names(Path(cert))
        host_names = tuple(dict.fromkeys(name.lower() for name in names))
        return cls(
            domains=domains,
            pod_id=env.get("APEXMESH_RELAY_POD_ID") or f"{socket.gethostname()}-{os.getpid()}",
            edge_host=env.get("APEXMESH_RELAY_EDGE_HOST", "127.0.0.1"),
            edge_port=env_int(env, "APEXMESH_RELAY_EDGE_PORT", 10288),
            mesh_host=env.get("APEXMESH_RELAY_MESH_HOST", "127.0.0.1"),
            mesh_port=env_int(env, "APEXMESH_RELAY_MESH_PORT", 10289),
            grpc_host=grpc_host,
            grpc_port=env_int(env, "APEXMESH_RELAY_GRPC_PORT", 7401),
            advertise_host=env.get("APEXMESH_RELAY_ADVERTISE_HOST") or grpc_host,
            http_host=env.get("APEXMESH_RELAY_HTTP_HOST", "127.0.0.1"),
            http_port=env_int(env, "APEXMESH_RELAY_HTTP_PORT", 8401),
            redis_url=check_redis_url(
                env.get("APEXMESH_REDIS_URL", "redis://127.0.0.1:6379/0"), dev=dev
            ),
            redis_prefix=env.get("APEXMESH_REDIS_PREFIX", "apexmesh") or "apexmesh",
            redis_pool=RedisPoolSettings.from_env(env),
            access_address=access,
            report_address=env.get("APEXMESH_REPORT_ADDRESS") or None,
            presence_address=env.get("APEXMESH_PRESENCE_ADDRESS") or None,
            services=_service_addresses(env, "APEXMESH_RELAY_SERVICES"),
            routes=routes,
            trusted=trusted,
            tls_cert=None if cert is None else Path(cert),
            tls_key=None if key is None else Path(key),
            tls_ca=None if ca is None else Path(ca),
            credentials=credentials,
            lease_ms=env_int(env, "APEXMESH_RELAY_LEASE_MS", 10_000, low=100, high=600_000),
            max_message=env_int(
                env, "APEXMESH_RELAY_MAX_MESSAGE", MAX_MESSAGE_OCTETS, low=4096, high=1 << 30
            ),
            shutdown_grace=env_float(env, "APEXMESH_SHUTDOWN_GRACE", 5.0),
            dev=dev,
            hold_limits=_hold_limits(env),
            hold_sweep_ms=env_int(env, "APEXMESH_RELAY_HOLD_SWEEP_MS", 250, low=10, high=60_000),
            service_timeout_ms=env_int(
                env, "APEXMESH_RELAY_SERVICE_TIMEOUT_MS", 30_000, low=100, high=600_000
            ),
            min_transit_ms=env_int(
                env, "APEXMESH_RELAY_MIN_TRANSIT_MS", 0, low=0, high=_MAX_MILLISECS
            ),
            flow_limits=_flow_limits(env),
            pod_stream_in_flight=env_int(
                env, "APEXMESH_RELAY_POD_STREAM_IN_FLIGHT", 8192, low=1, high=1 << 20
            ),
            service_calls=env_int(env, "APEXMESH_RELAY_SERVICE_CALLS", 256, low=1, high=65_536),
            domain_in_flight=env_int(
                env, "APEXMESH_RELAY_DOMAIN_IN_FLIGHT", 1024, low=1, high=1 << 20
            ),
            retry_services=env_list(env, "APEXMESH_RELAY_RETRY_SERVICES", ("pubsub",)),
            require_privacy=require_privacy,
            host_names=host_names,
            sasl_mechanisms=_sasl_mechanisms(env),
            sasl_throttle=_sasl_throttle(env),
            interop_vortex_nul=env_flag(env, "APEXMESH_RELAY_INTEROP_VORTEX_NUL"),
            trace=env_flag(env, "APEXMESH_RELAY_TRACE", default=True),
            receive_window=env_int(
                env,
                "APEXMESH_RELAY_RECEIVE_WINDOW",
                DEFAULT_RECEIVE_WINDOW,
                low=DEFAULT_WINDOW_OCTETS,
                high=MAX_WINDOW_OCTETS,
            ),
            seq_step=_seq_step(env),
            access_timeout=env_float(env, "APEXMESH_RELAY_ACCESS_TIMEOUT", 2.0),
            topic_fanout=env_flag(env, "APEXMESH_RELAY_TOPIC_FANOUT", default=True),
            cached_topics=env_int(
                env, "APEXMESH_RELAY_CACHED_TOPICS", 100_000, low=1, high=10_000_000
            ),
            admin=admin_tokens(env, dev=dev),
            sasl_file=None if sasl_file is None else Path(sasl_file),
            reload_seconds=_reload_seconds(env),
        )


def _seq_step(env: Mapping[str, str]) -> float:
    step = env_float(env, "APEXMESH_RELAY_SEQ_STEP", DEFAULT_SEQ_STEP)
    if not 0.01 <= step <= 1.0:
        raise SettingsError("APEXMESH_RELAY_SEQ_STEP must be 0.01 .. 1 (a fraction of the window)")
    return step


def _flow_limits(env: Mapping[str, str]) -> FlowLimits:
    """What one channel of this pod may hold for its endpoint (services/relay/flow.py)."""
    slow = env_float(env, "APEXMESH_RELAY_SLOW_CONSUMER_SECONDS", 10.0)
    if not 0.1 <= slow <= 3600:
        raise SettingsError("APEXMESH_RELAY_SLOW_CONSUMER_SECONDS must be 0.1 .. 3600")
    return FlowLimits(
        max_in_flight=env_int(env, "APEXMESH_RELAY_ENDPOINT_IN_FLIGHT", 256, low=1, high=65_536),
        max_octets=env_int(env, "APEXMESH_RELAY_ENDPOINT_OCTETS", 4 << 20, low=1, high=1 << 30),
        max_waiting=env_int(env, "APEXMESH_RELAY_ENDPOINT_WAITING", 4096, low=0, high=1 << 20),
        slow_after_seconds=slow,
    )


_MAX_MILLISECS = 2_147_483_647


def _reload_seconds(env: Mapping[str, str]) -> float:
    text = env.get("APEXMESH_RELAY_RELOAD_SECONDS", "").strip()
    try:
        seconds = float(text) if text else 10.0
    except ValueError:
        raise SettingsError(f"APEXMESH_RELAY_RELOAD_SECONDS={text!r} is not a number") from None
    if seconds != 0 and not 0.1 <= seconds <= 3600:
        raise SettingsError("APEXMESH_RELAY_RELOAD_SECONDS must be 0 or 0.1 .. 3600")
    return seconds


def _sasl_mechanisms(env: Mapping[str, str]) -> tuple[str, ...]:
    """The default offer, CRAM-MD5 added before PLAIN when the operator asks for it."""
    if not env_flag(env, "APEXMESH_RELAY_SASL_CRAM_MD5"):
        return DEFAULT_SASL_MECHANISMS
    return (*DEFAULT_SASL_MECHANISMS[:-1], cram_md5.NAME, DEFAULT_SASL_MECHANISMS[-1])


def _sasl_throttle(env: Mapping[str, str]) -> ThrottlePolicy:
    """RFC 4422 section 6.2: how failed authentications are slowed down."""
    delay = env_int(env, "APEXMESH_RELAY_SASL_DELAY_MS", 500, low=0, high=60_000)
    longest = env_int(env, "APEXMESH_RELAY_SASL_MAX_DELAY_MS", 8000, low=0, high=600_000)
    if longest < delay:
        raise SettingsError("APEXMESH_RELAY_SASL_MAX_DELAY_MS is below _SASL_DELAY_MS")
    return ThrottlePolicy(
        max_failures=env_int(env, "APEXMESH_RELAY_SASL_MAX_FAILURES", 5, low=1, high=1000),
        refuse_after=env_int(env, "APEXMESH_RELAY_SASL_REFUSE_AFTER", 20, low=1, high=10_000),
        identity_after=env_int(env, "APEXMESH_RELAY_SASL_IDENTITY_AFTER", 10, low=1, high=10_000),
        base_delay_seconds=delay / 1000,
        max_delay_seconds=longest / 1000,
        max_hold_seconds=max(60.0, longest / 1000),
        window_seconds=float(
            env_int(env, "APEXMESH_RELAY_SASL_WINDOW_SECONDS", 600, low=1, high=86_400)
        ),
    )


def _hold_limits(env: Mapping[str, str]) -> HoldLimits | None:
    """The operator's limits on held data, None when hold4Endpoint is switched off."""
    if not env_flag(env, "APEXMESH_RELAY_HOLD", default=True):
        return None

    def limit(name: str, default: int) -> int | None:
        return env_int(env, name, default, low=0, high=1 << 62) or None

    return HoldLimits(
        max_hold_ms=limit("APEXMESH_RELAY_HOLD_MAX_MS", 86_400_000),
        max_bytes_per_endpoint=limit("APEXMESH_RELAY_HOLD_ENDPOINT_BYTES", 16 << 20),
        max_count_per_endpoint=limit("APEXMESH_RELAY_HOLD_ENDPOINT_COUNT", 100_000),
        max_bytes_per_domain=limit("APEXMESH_RELAY_HOLD_DOMAIN_BYTES", 1 << 30),
        max_count_per_domain=limit("APEXMESH_RELAY_HOLD_DOMAIN_COUNT", 1_000_000),
        require_timing=env_flag(env, "APEXMESH_RELAY_HOLD_REQUIRE_TIMING"),
        max_no_later_than=limit("APEXMESH_RELAY_HOLD_MAX_NO_LATER_THAN", 0),
    )
