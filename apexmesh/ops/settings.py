"""Settings helpers shared by the services (STYLE.md section 3.1, ``settings.py``).

Each service reads its settings once, from environment variables, into one frozen
object. Unsafe values (a Redis URL with neither TLS nor a password, a wildcard bind) are
refused unless ``APEXMESH_DEV=1`` says this is a development or test run: a production
pod should fail at start, not run open.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from apexmesh.apex.endpoint import EndpointError, normalize_domain

#: The environment variable that allows development-only settings.
DEV_FLAG: Final = "APEXMESH_DEV"


class SettingsError(ValueError):
    """A setting is missing, malformed or unsafe outside development."""


def env_flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    value = env.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name}={value!r} is not a boolean")


def env_int(
    env: Mapping[str, str], name: str, default: int, *, low: int = 0, high: int = 65535
) -> int:
    value = env.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise SettingsError(f"{name}={value!r} is not an integer") from None
    if not low <= number <= high:
        raise SettingsError(f"{name}={number} is outside {low}..{high}")
    return number


def env_float(env: Mapping[str, str], name: str, default: float) -> float:
    value = env.get(name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise SettingsError(f"{name}={value!r} is not a number") from None
    if number <= 0:
        raise SettingsError(f"{name} must be positive")
    return number


def env_list(env: Mapping[str, str], name: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
    value = env.get(name)
    if value is None or value.strip() == "":
        return default
    return tuple(item.strip() for item in value.split(",") if item.strip())


#: The environment variable that sets the level of every service's log.
LOG_LEVEL: Final = "APEXMESH_LOG_LEVEL"

#: Levels a service logs at.
_LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(env: Mapping[str, str]) -> str:
    """``APEXMESH_LOG_LEVEL`` (``INFO``): the level of the service's JSON log lines."""
    value = (env.get(LOG_LEVEL) or "INFO").strip().upper()
    if value not in _LOG_LEVELS:
        raise SettingsError(f"{LOG_LEVEL}={value!r} is not one of {', '.join(_LOG_LEVELS)}")
    return value


#: Shortest admin token accepted outside development (128 bits as URL-safe base64).
MIN_ADMIN_TOKEN_CHARS: Final = 22


@dataclass(frozen=True, slots=True)
class AdminTokens:
    """The bearer tokens of a service's admin API (apexmesh/ops/admin.py): ``admin``
    may do everything, ``read`` may only look. None: that role is not granted to
    anyone; with neither, the admin API refuses every call."""

    admin: str | None = None
    read: str | None = None


def _secret(env: Mapping[str, str], name: str) -> str | None:
    """``name`` from the environment, or the first line of the file ``name_FILE``
    names (a mounted Kubernetes Secret)."""
    value = env.get(name) or None
    path = env.get(f"{name}_FILE") or None
    if value is not None and path is not None:
        raise SettingsError(f"set {name} or {name}_FILE, not both")
    if path is not None:
        try:
            value = Path(path).read_text(encoding="utf-8").strip() or None
        except OSError as exc:
            raise SettingsError(f"{name}_FILE: {exc}") from None
    return value


def admin_tokens(env: Mapping[str, str], *, dev: bool) -> AdminTokens:
    """``APEXMESH_ADMIN_TOKEN`` and ``APEXMESH_ADMIN_READ_TOKEN`` (or ``..._FILE``):
    outside development each must be at least :data:`MIN_ADMIN_TOKEN_CHARS` long, and
    the two must differ (a read-only caller must never hold the admin token)."""
    tokens = AdminTokens(
        admin=_secret(env, "APEXMESH_ADMIN_TOKEN"), read=_secret(env, "APEXMESH_ADMIN_READ_TOKEN")
    )
    for name, token in (
        ("APEXMESH_ADMIN_TOKEN", tokens.admin),
        ("APEXMESH_ADMIN_READ_TOKEN", tokens.read),
    ):
        if token is None:
            continue
        if any(char.isspace() for char in token):
            raise SettingsError(f"{name} contains white space")
        if not dev and len(token) < MIN_ADMIN_TOKEN_CHARS:
            raise SettingsError(
                f"{name} is shorter than {MIN_ADMIN_TOKEN_CHARS} characters; "
                f"set {DEV_FLAG}=1 for development"
            )
    if tokens.admin is not None and tokens.admin == tokens.read:
        raise SettingsError("APEXMESH_ADMIN_TOKEN and APEXMESH_ADMIN_READ_TOKEN must differ")
    return tokens


def required_domains(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """The administrative domains a service serves: a comma list in ``name``, each a FQDN
    or domain-literal (RFC 3340 section 2.2), normalized, duplicates dropped, at least
    one."""
    try:
        domains = tuple(dict.fromkeys(normalize_domain(d) for d in env_list(env, name)))
    except EndpointError as exc:
        raise SettingsError(f"{name}: {exc}") from None
    if not domains:
        raise SettingsError(f"{name} must name at least one domain")
    return domains


_REDIS_SCHEMES: Final = frozenset(
    {
        "redis",
        "rediss",
        "unix",
        "redis+sentinel",
        "rediss+sentinel",
        "redis+cluster",
        "rediss+cluster",
    }
)


def check_redis_url(url: str, *, dev: bool) -> str:
    """Accept ``redis://``, ``rediss://`` or ``unix://``, and the Sentinel and Cluster
    forms ``redis[s]+sentinel://`` and ``redis[s]+cluster://`` (docs/redis.md); outside
    development require TLS (``rediss``) or a password, so state is never served by an
    open Redis."""
    parts = urlsplit(url)
    if parts.scheme not in _REDIS_SCHEMES:
        raise SettingsError(f"APEXMESH_REDIS_URL scheme {parts.scheme!r} is not redis")
    if not dev and not parts.scheme.startswith("rediss") and not parts.password:
        raise SettingsError(
            "APEXMESH_REDIS_URL has neither TLS nor a password; set APEXMESH_DEV=1 for development"
        )
    return url


#: Bind hosts that listen on every interface.
WILDCARD_HOSTS: Final = frozenset({"", "*", "0.0.0.0", "::", "[::]"})  # noqa: S104


def check_bind_host(name: str, host: str, *, dev: bool) -> str:
    """Refuse a wildcard bind outside development: a pod binds its own address."""
    if host.strip() in WILDCARD_HOSTS and not dev:
        raise SettingsError(
            f"{name}={host!r} binds every interface; bind the pod's own address, "
            f"or set {DEV_FLAG}=1 for development"
        )
    return host


def bind_host(env: Mapping[str, str], name: str, *, dev: bool, default: str = "127.0.0.1") -> str:
    """The host variable ``name`` (loopback by default), checked by check_bind_host."""
    return check_bind_host(name, env.get(name, default), dev=dev)


def check_grpc_target(name: str, text: str) -> str:
    """Validate one ``host:port`` (or ``[ipv6]:port``) gRPC target of ``name``."""
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise SettingsError(f"{name}: {text!r} is not host:port")
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise SettingsError(f"{name}: {text!r} has no valid port")
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1] if host.endswith("]") else "")
        except ValueError:
            raise SettingsError(f"{name}: {text!r} has a bad IPv6 literal") from None
    elif ":" in host or any(char.isspace() or char in "/@" for char in host):
        raise SettingsError(f"{name}: {text!r} has a bad host")
    return text


def grpc_targets(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma list of gRPC targets (``APEXMESH_RELAY_ADDRESSES``), each checked by
    :func:`check_grpc_target`, duplicates dropped, order kept."""
    return tuple(dict.fromkeys(check_grpc_target(name, text) for text in env_list(env, name)))


def env_pairs(env: Mapping[str, str], name: str) -> dict[str, str]:
    """A comma list of ``key=value`` items (``domain=host:port``, ``name=host:port``)."""
    pairs: dict[str, str] = {}
    for item in env_list(env, name):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise SettingsError(f"{name}: {item!r} is not name=value")
        pairs[key.strip()] = value.strip()
    return pairs


__all__ = [
    "DEV_FLAG",
    "MIN_ADMIN_TOKEN_CHARS",
    "AdminTokens",
    "LOG_LEVEL",
    "WILDCARD_HOSTS",
    "SettingsError",
    "admin_tokens",
    "bind_host",
    "check_bind_host",
    "check_grpc_target",
    "check_redis_url",
    "env_flag",
    "env_float",
    "env_int",
    "env_list",
    "env_pairs",
    "grpc_targets",
    "log_level",
    "required_domains",
]
