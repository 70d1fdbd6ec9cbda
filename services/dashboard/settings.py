"""Settings of the dashboard, read once from environment variables.

- ``APEXMESH_DASHBOARD_CONTEXT`` (required): the context file naming the services and
  their admin API (apexmesh/ops/targets.py; ``scripts/run`` writes it). In a cluster
  the chart mounts one listing the Services of the release, without tokens.
- ``APEXMESH_DASHBOARD_TOKEN`` (or ``_FILE``): the token a browser presents once
  (``/login?token=...``) to get its session cookie. Outside development it is required
  and at least 22 characters long. It is the admin APIs' read token, so a context without
  tokens (the chart's) reads the services with it: the token then lives in one Secret
  only, and the dashboard follows when it is rotated.
- ``APEXMESH_DASHBOARD_HTTP_HOST`` / ``_PORT`` (``127.0.0.1`` / ``8420``).
- ``APEXMESH_DASHBOARD_POLL_SECONDS`` (``1.0``): how often services are read.
- ``APEXMESH_DEV`` (``0``): ``1`` allows a short or missing token.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from apexmesh.ops.settings import (
    DEV_FLAG,
    MIN_ADMIN_TOKEN_CHARS,
    SettingsError,
    bind_host,
    env_flag,
    env_float,
    env_int,
)
from apexmesh.ops.targets import Context, ContextError, read_context


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    context: Context
    token: str
    http_host: str
    http_port: int
    poll_seconds: float
    dev: bool

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DashboardSettings:
        env = os.environ if env is None else env
        dev = env_flag(env, DEV_FLAG)
        path = env.get("APEXMESH_DASHBOARD_CONTEXT") or ""
        if not path:
            raise SettingsError("APEXMESH_DASHBOARD_CONTEXT is required (a context file)")
        try:
            context = read_context(Path(path))
        except ContextError as exc:
            raise SettingsError(str(exc)) from None
        token = env.get("APEXMESH_DASHBOARD_TOKEN") or ""
        token_file = env.get("APEXMESH_DASHBOARD_TOKEN_FILE") or ""
        if token_file:
            try:
                token = Path(token_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise SettingsError(f"APEXMESH_DASHBOARD_TOKEN_FILE: {exc}") from None
        if not dev and len(token) < MIN_ADMIN_TOKEN_CHARS:
            raise SettingsError(
                f"APEXMESH_DASHBOARD_TOKEN must be at least {MIN_ADMIN_TOKEN_CHARS} "
                f"characters; set {DEV_FLAG}=1 for development"
            )
        if token and not (context.read_token or context.admin_token):
            context = replace(context, read_token=token)
        poll = env_float(env, "APEXMESH_DASHBOARD_POLL_SECONDS", 1.0)
        return cls(
            context=context,
            token=token,
            http_host=bind_host(env, "APEXMESH_DASHBOARD_HTTP_HOST", dev=dev),
            http_port=env_int(env, "APEXMESH_DASHBOARD_HTTP_PORT", 8420),
            poll_seconds=min(max(poll, 0.2), 60.0),
            dev=dev,
        )


__all__ = ["DashboardSettings"]
