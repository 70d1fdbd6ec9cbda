"""Settings of the report service, read once from environment variables.

- ``APEXMESH_REPORT_DOMAINS`` (required): administrative domains whose ``apex=report``
  this service is, comma-separated; a Report for any other domain is answered 553.
- ``APEXMESH_RELAY_ADDRESSES``: relay gRPC addresses (``host:port``, ``[v6]:port``),
  comma-separated, that statusResponses are submitted through, round-robin with
  failover. May be empty: the service then starts but is not ready and answers 421.
- ``APEXMESH_RELAY_TIMEOUT_SECONDS`` (``2.0``): deadline of one Submit call.
- ``APEXMESH_REPORT_GRPC_HOST`` / ``_PORT`` (``127.0.0.1`` / ``7412``; 0 = any port).
- ``APEXMESH_REPORT_HTTP_HOST`` / ``_PORT`` (``127.0.0.1`` / ``8412``): admin HTTP.
- ``APEXMESH_SHUTDOWN_GRACE`` (``5.0``): seconds in-flight calls get on SIGTERM.
- ``APEXMESH_DEV`` (``0``): ``1`` allows development-only settings.

Unsafe outside development (:mod:`apexmesh.ops.settings` names "a wildcard bind" among
the values refused unless ``APEXMESH_DEV=1``): binding the gRPC or HTTP server to a
wildcard address (``0.0.0.0``, ``::``, empty). A pod binds its own address instead (the
Kubernetes downward API's ``status.podIP``), so the service is never exposed on an
interface nobody chose. There is no Redis, so no Redis URL rule applies.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from apexmesh.ops.settings import (
    DEV_FLAG,
    SettingsError,
    env_flag,
    env_float,
    env_int,
    env_list,
    required_domains,
)

#: Bind hosts that listen on every interface.
WILDCARD_HOSTS: Final = frozenset({"", "*", "0.0.0.0", "::", "[::]"})  # noqa: S104


def check_bind_host(name: str, host: str, *, dev: bool) -> str:
    """Refuse a wildcard bind outside development (the rule of apexmesh/ops/settings.py)."""
    if host.strip() in WILDCARD_HOSTS and not dev:
        raise SettingsError(
            f"{name}={host!r} binds every interface; bind the pod's own address, "
            f"or set {DEV_FLAG}=1 for development"
        )
    return host


def check_relay_address(text: str) -> str:
    """Validate one ``host:port`` (or ``[ipv6]:port``) gRPC target and return it."""
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise SettingsError(f"APEXMESH_RELAY_ADDRESSES: {text!r} is not host:port")
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise SettingsError(f"APEXMESH_RELAY_ADDRESSES: {text!r} has no valid port")
    if host.startswith("["):
        if not host.endswith("]"):
            raise SettingsError(f"APEXMESH_RELAY_ADDRESSES: {text!r} has a bad IPv6 literal")
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise SettingsError(
                f"APEXMESH_RELAY_ADDRESSES: {text!r} has a bad IPv6 literal"
            ) from None
    elif ":" in host or any(char.isspace() or char in "/@" for char in host):
        raise SettingsError(f"APEXMESH_RELAY_ADDRESSES: {text!r} has a bad host")
    return text


@dataclass(frozen=True, slots=True)
class ReportSettings:
    domains: tuple[str, ...]
    relay_addresses: tuple[str, ...]
    relay_timeout: float
    grpc_host: str
    grpc_port: int
    http_host: str
    http_port: int
    shutdown_grace: float
    dev: bool

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReportSettings:
        """Read and validate; raise :class:`SettingsError` with the variable's name."""
        env = os.environ if env is None else env
        dev = env_flag(env, DEV_FLAG)
        domains = required_domains(env, "APEXMESH_REPORT_DOMAINS")
        relays = tuple(
            dict.fromkeys(
                check_relay_address(text) for text in env_list(env, "APEXMESH_RELAY_ADDRESSES")
            )
        )
        return cls(
            domains=domains,
            relay_addresses=relays,
            relay_timeout=env_float(env, "APEXMESH_RELAY_TIMEOUT_SECONDS", 2.0),
            grpc_host=check_bind_host(
                "APEXMESH_REPORT_GRPC_HOST",
                env.get("APEXMESH_REPORT_GRPC_HOST", "127.0.0.1"),
                dev=dev,
            ),
            grpc_port=env_int(env, "APEXMESH_REPORT_GRPC_PORT", 7412),
            http_host=check_bind_host(
                "APEXMESH_REPORT_HTTP_HOST",
                env.get("APEXMESH_REPORT_HTTP_HOST", "127.0.0.1"),
                dev=dev,
            ),
            http_port=env_int(env, "APEXMESH_REPORT_HTTP_PORT", 8412),
            shutdown_grace=env_float(env, "APEXMESH_SHUTDOWN_GRACE", 5.0),
            dev=dev,
        )


__all__ = ["WILDCARD_HOSTS", "ReportSettings", "check_bind_host", "check_relay_address"]
