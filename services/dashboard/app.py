"""Composition root of the dashboard: the collector, its poll loop and the web app.

The page (``/``) and its assets (``/static/...``, served by this app: no CDN, so the
dashboard works on an air-gapped cluster) are behind a session cookie a browser gets
from the login page (``/login``: a form asking for the token, or ``/login?token=TOKEN``
as the printed link does); ``/`` without it sends the browser to that page rather than
answering a bare 401. ``/api/state`` is the current picture as JSON and ``/api/events``
pushes it as server-sent events each time a poll round ends, so the page updates
without reloading; the rest of ``/api`` (:mod:`services.dashboard.views`) is read when a
page asks, and holds the operator's actions. ``/healthz``, ``/readyz`` and ``/metrics``
are open, like every service's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
from collections.abc import AsyncIterator
from html import escape
from pathlib import Path
from typing import Annotated, Any, Final
from urllib.parse import parse_qs

from fastapi import Cookie, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import Gauge

from apexmesh.aio.tasks import stop_task, within
from apexmesh.ops.http import HttpServer, create_ops_app
from apexmesh.ops.registry import service_registry
from services.dashboard.collector import Collector
from services.dashboard.settings import DashboardSettings
from services.dashboard.views import views_router

_log = logging.getLogger(__name__)

STATIC: Final = Path(__file__).parent / "static"
COOKIE: Final = "apexmesh_dashboard"
#: Seconds between keep-alive comments on an idle event stream.
KEEPALIVE_SECONDS: Final = 15.0


def _session_of(token: str) -> str:
    """The cookie value for a token (the token itself never sits in the cookie)."""
    return hashlib.sha256(b"apexmesh-dashboard\0" + token.encode()).hexdigest()


class DashboardApp:
    """One running dashboard."""

    def __init__(self, settings: DashboardSettings) -> None:
        self.settings = settings
        self.registry = service_registry("dashboard")
        self.collector = Collector(settings.context, settings.poll_seconds)
        Gauge(
            "apexmesh_dashboard_targets",
            "Services the dashboard reads.",
            registry=self.registry,
        ).set(len(settings.context.services))
        self.http = HttpServer(self._app())
        self._poller: asyncio.Task[None] | None = None
        self.http_port = 0

    def _app(self) -> FastAPI:
        settings = self.settings
        session = _session_of(settings.token)

        async def ready() -> str | None:
            return None if self.collector.version > 0 else "first poll not done"

        app = create_ops_app("dashboard", self.registry, ready)

        def valid(cookie: str | None) -> bool:
            if not settings.token:
                return True  # development run without a token
            return cookie is not None and secrets.compare_digest(cookie, session)

        def check(apexmesh_dashboard: Annotated[str | None, Cookie()] = None) -> None:
            if not valid(apexmesh_dashboard):
                raise HTTPException(401, "log in at /login")

        def login_page(error: str = "", status: int = 200) -> HTMLResponse:
            text = (STATIC / "login.html").read_text(encoding="utf-8")
            text = text.replace("{{context}}", escape(settings.context.name))
            text = text.replace("{{error}}", escape(error))
            return HTMLResponse(text, status_code=status)

        def logged_in(token: str) -> Response:
            if settings.token and not secrets.compare_digest(
                token.encode(), settings.token.encode()
            ):
                _log.warning("dashboard login refused", extra={"mechanism": "token"})
                return login_page("That token is not this dashboard's.", 401)
            response = RedirectResponse("/", status_code=303)
            response.set_cookie(COOKIE, session, httponly=True, samesite="strict")
            return response

        @app.get("/login", include_in_schema=False)
        async def login(token: Annotated[str | None, Query()] = None) -> Response:
            return login_page() if token is None else logged_in(token)

        @app.post("/login", include_in_schema=False)
        async def login_form(request: Request) -> Response:
            form = parse_qs((await request.body()).decode("utf-8", "replace"))
            return logged_in((form.get("token") or [""])[0].strip())

        @app.post("/logout", include_in_schema=False)
        async def logout() -> Response:
            response = RedirectResponse("/login", status_code=303)
            response.delete_cookie(COOKIE)
            return response

        @app.get("/", response_class=HTMLResponse, include_in_schema=False)
        async def page(
            apexmesh_dashboard: Annotated[str | None, Cookie()] = None,
        ) -> Response:
            if not valid(apexmesh_dashboard):
                return RedirectResponse("/login", status_code=303)
            return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))

        @app.get("/api/state", include_in_schema=False)
        async def state(
            apexmesh_dashboard: Annotated[str | None, Cookie()] = None,
        ) -> dict[str, Any]:
            check(apexmesh_dashboard)
            return self.collector.state()

        @app.get("/api/events", include_in_schema=False)
        async def events(
            apexmesh_dashboard: Annotated[str | None, Cookie()] = None,
        ) -> StreamingResponse:
            check(apexmesh_dashboard)
            return StreamingResponse(
                self._stream(),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )

        app.include_router(views_router(self.collector, check))
        app.mount("/static", StaticFiles(directory=STATIC), name="static")
        return app

    async def _stream(self) -> AsyncIterator[str]:
        """Server-sent events: the state after every poll round."""
        collector = self.collector
        while True:
            seen = collector.version
            yield f"event: state\ndata: {json.dumps(collector.state())}\n\n"
            while collector.version == seen:
                async with collector.changed:
                    try:
                        await within(collector.changed.wait(), KEEPALIVE_SECONDS)
                        idle = False
                    except TimeoutError:
                        idle = True
                if idle:  # sent outside the lock: a slow browser never holds up a poll
                    yield ": keep-alive\n\n"

    async def _poll(self) -> None:
        while True:
            try:
                await self.collector.poll()
            except Exception:  # noqa: BLE001  (one bad round must not stop the dashboard)
                _log.exception("dashboard poll failed")
            await asyncio.sleep(self.settings.poll_seconds)

    async def start(self) -> None:
        self._poller = asyncio.create_task(self._poll(), name="dashboard-poll")
        self.http_port = await self.http.start(self.settings.http_host, self.settings.http_port)

    async def stop(self) -> None:
        await stop_task(self._poller)
        await self.http.stop()
        await self.collector.aclose()


__all__ = ["DashboardApp"]
