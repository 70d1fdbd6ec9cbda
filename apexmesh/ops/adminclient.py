"""An asyncio client of the services' admin APIs (apexmesh/ops/admin.py), shared by
``apexctl`` and the dashboard.

Reads use the context's read token when it has one, changes the admin token. Calls to
many services run concurrently; a service that does not answer is reported as such
(:class:`AdminError`) rather than failing the whole listing, because an operator
looking at a sick mesh needs to see the rest of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import httpx

from apexmesh.ops.targets import Context, Target

#: Seconds one admin call may take.
DEFAULT_TIMEOUT: Final = 5.0


class AdminError(Exception):
    """An admin call failed: the service answered an error, or did not answer."""

    def __init__(self, target: Target, status: int, detail: str) -> None:
        super().__init__(f"{target.name}: {status or 'unreachable'} {detail}".strip())
        self.target = target
        #: HTTP status, 0 when the service did not answer.
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Probe:
    """One service's answer to ``/healthz`` and ``/readyz``."""

    target: Target
    alive: bool
    ready: bool
    reason: str
    #: Round trip of ``/healthz`` in seconds (0 when unreachable).
    rtt: float


class AdminClient:
    """Calls the admin APIs of one context's services."""

    def __init__(self, context: Context, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.context = context
        self._http = httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def call(
        self,
        target: Target,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
    ) -> Any:
        """One admin call (``path`` below ``/admin/v1``); the JSON answer."""
        write = method.upper() != "GET"
        headers = {"Authorization": f"Bearer {self.context.token(write=write)}"}
        url = f"{target.admin_url}/admin/v1{path}"
        try:
            response = await self._http.request(
                method, url, params=params, json=json, headers=headers
            )
        except httpx.HTTPError as exc:
            raise AdminError(target, 0, str(exc) or type(exc).__name__) from None
        if response.status_code >= 400:
            try:
                detail = str(response.json().get("detail", response.text))
            except ValueError:
                detail = response.text
            raise AdminError(target, response.status_code, detail)
        return None if response.status_code == 204 else response.json()

    async def get(self, target: Target, path: str, **params: Any) -> Any:
        clean = {k: v for k, v in params.items() if v is not None}
        return await self.call(target, "GET", path, params=clean or None)

    async def gather(
        self, targets: Sequence[Target], path: str, **params: Any
    ) -> list[tuple[Target, Any | AdminError]]:
        """``GET path`` on every target at once: each answer or its error."""

        async def one(target: Target) -> Any | AdminError:
            try:
                return await self.get(target, path, **params)
            except AdminError as exc:
                return exc

        results = await asyncio.gather(*(one(t) for t in targets))
        return list(zip(targets, results, strict=True))

    async def probe(self, target: Target) -> Probe:
        """``/healthz`` (timed) and ``/readyz`` of one service (no token needed)."""
        began = time.perf_counter()
        try:
            alive = (await self._http.get(f"{target.admin_url}/healthz")).status_code == 200
            rtt = time.perf_counter() - began
            ready = await self._http.get(f"{target.admin_url}/readyz")
        except httpx.HTTPError as exc:
            return Probe(target, False, False, str(exc) or type(exc).__name__, 0.0)
        reason = ""
        if ready.status_code != 200:
            try:
                reason = str(ready.json().get("reason", ""))
            except ValueError:
                reason = ready.text
        return Probe(target, alive, ready.status_code == 200, reason, rtt)

    async def metrics(self, target: Target) -> str:
        """The service's ``/metrics`` text ("" when unreachable)."""
        try:
            response = await self._http.get(f"{target.admin_url}/metrics")
        except httpx.HTTPError:
            return ""
        return response.text if response.status_code == 200 else ""


__all__ = ["DEFAULT_TIMEOUT", "AdminClient", "AdminError", "Probe"]
