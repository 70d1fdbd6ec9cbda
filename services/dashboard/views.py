"""The dashboard's on-demand API: what a page reads when a browser opens it, and the
operator's actions (issue #31).

Nothing here is polled: a pod's page reads that pod's sessions when it is shown, the
topics page reads the page of topics it draws (``limit``/``after``/``prefix``, issue
#33), the access and presence views read their entries when opened. So the cost to the
mesh follows what operators look at, not the size of the mesh.

Actions (drain, undrain, close a session) go to the pod's admin API with the context's
admin token. A browser may only ask for them from the dashboard's own page: the session
cookie is ``SameSite=Strict`` and an action needs the ``X-Apexmesh-Action`` header, which
a cross-site form cannot send (a script from elsewhere would need a CORS preflight this
app never grants). Each action is logged with what was asked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query

from apexmesh.ops.adminclient import AdminError
from apexmesh.ops.targets import Target
from services.dashboard.collector import RATES, Collector

_log = logging.getLogger(__name__)

ACTION_HEADER: Final = "X-Apexmesh-Action"
#: Rows a list page asks for unless told.
PAGE: Final = 50

PodName = Annotated[str, Path(min_length=1, max_length=255, pattern=r"^[^/]+$")]


def _error(exc: AdminError) -> HTTPException:
    status = exc.status if 400 <= exc.status < 500 else 502
    return HTTPException(status, str(exc))


def views_router(collector: Collector, check: Callable[..., None]) -> APIRouter:
    """The routes under ``/api`` beside ``/api/state`` (``check`` enforces the login)."""
    api = APIRouter(prefix="/api", dependencies=[Depends(check)], include_in_schema=False)
    client = collector.client

    def pod(name: str, service: str | None = None) -> Target:
        target = collector.target(name)
        if target is None or (service is not None and target.service != service):
            raise HTTPException(404, f"no {service or 'pod'} {name}")
        return target

    def one_per_domain(service: str) -> list[Target]:
        chosen: dict[str, Target] = {}
        for target in collector.context.of(service):
            chosen.setdefault(target.domain, target)
        return list(chosen.values())

    async def get(target: Target, path: str, **params: Any) -> Any:
        try:
            return await client.get(target, path, **params)
        except AdminError as exc:
            raise _error(exc) from None

    async def action(target: Target, method: str, path: str, what: str) -> Any:
        if not collector.context.admin_token:
            raise HTTPException(403, "this dashboard has no admin token (read-only context)")
        _log.warning(
            "dashboard action", extra={"action": what, "target": target.name, "path": path}
        )
        try:
            return await client.call(target, method, path)
        except AdminError as exc:
            raise _error(exc) from None

    def acting(x_apexmesh_action: Annotated[str, Header()] = "") -> None:
        if x_apexmesh_action != "1":
            raise HTTPException(403, f"actions need the {ACTION_HEADER} header")

    @api.get("/history")
    async def history(pod: Annotated[str | None, Query(max_length=255)] = None) -> dict[str, Any]:
        """The last hour of one pod's rates, or of every service's summed."""
        now = time.time()
        hist = collector.history
        if pod is not None:
            pod_target = collector.target(pod)
            if pod_target is None:
                raise HTTPException(404, f"no pod {pod}")
            return {
                "pod": pod,
                "now": now,
                "series": {key: hist.series(pod, key, now) for key in hist.keys(pod)},
            }
        out: dict[str, dict[str, list[tuple[float, float]]]] = {}
        for service, wanted in RATES.items():
            pods = [t.name for t in collector.context.of(service)]
            series = {key: hist.totals(pods, key, now) for _, _, key in wanted}
            out[service] = {key: points for key, points in series.items() if points}
        return {"now": now, "services": out}

    @api.get("/pods/{name}")
    async def pod_page(name: PodName) -> dict[str, Any]:
        """One pod: what the poll knows, and a relay's sessions and drain state."""
        target = pod(name)
        node: dict[str, Any] = next(
            (n for n in collector.state()["nodes"] if n["name"] == name), {}
        )
        out: dict[str, Any] = {"node": node, "sessions": [], "drain": None}
        if target.service == "relay":
            out["sessions"], out["drain"] = await asyncio.gather(
                get(target, "/sessions"), get(target, "/drain")
            )
        return out

    @api.get("/pods/{name}/sessions/{session_id}")
    async def session_page(name: PodName, session_id: Annotated[int, Path(ge=1)]) -> dict[str, Any]:
        target = pod(name, "relay")
        sessions, attachments = await asyncio.gather(
            get(target, "/sessions"), get(target, "/attachments")
        )
        found = next((s for s in sessions if s["id"] == session_id), None)
        if found is None:
            raise HTTPException(404, f"no session {session_id} at {name}")
        found["channels_detail"] = [a for a in attachments if a["session"] == session_id]
        return {"pod": name, "session": found}

    @api.post("/pods/{name}/drain", dependencies=[Depends(acting)])
    async def drain(name: PodName) -> Any:
        return await action(pod(name, "relay"), "POST", "/drain", "drain")

    @api.post("/pods/{name}/undrain", dependencies=[Depends(acting)])
    async def undrain(name: PodName) -> Any:
        return await action(pod(name, "relay"), "POST", "/undrain", "undrain")

    @api.delete("/pods/{name}/sessions/{session_id}", dependencies=[Depends(acting)])
    async def kill(name: PodName, session_id: Annotated[int, Path(ge=1)]) -> Any:
        return await action(
            pod(name, "relay"), "DELETE", f"/sessions/{session_id}", "close session"
        )

    async def pubsub_page(path: str, domain: str, **params: Any) -> dict[str, Any]:
        targets = [t for t in one_per_domain("pubsub") if t.domain == domain]
        if not targets:
            raise HTTPException(404, f"no pubsub service for {domain}")
        limit = params["limit"]
        rows = await get(targets[0], path, domain=domain, **params)
        more = len(rows) == limit
        return {"rows": rows, "more": more}

    @api.get("/topics")
    async def topics(
        domain: Annotated[str, Query(min_length=1, max_length=255)],
        prefix: Annotated[str, Query(max_length=255)] = "",
        after: Annotated[str, Query(max_length=600)] = "",
        limit: Annotated[int, Query(ge=1, le=500)] = PAGE,
    ) -> dict[str, Any]:
        """A page of a domain's topics; ``next`` is the cursor of the one after."""
        cursor = json.dumps([domain, after]) if after else None
        page = await pubsub_page("/topics", domain, prefix=prefix, after=cursor, limit=limit)
        page["next"] = page["rows"][-1]["topic"] if page["more"] else None
        return page

    @api.get("/subscriptions")
    async def subscriptions(
        domain: Annotated[str, Query(min_length=1, max_length=255)],
        topic: Annotated[str | None, Query(max_length=255)] = None,
        prefix: Annotated[str, Query(max_length=255)] = "",
        after: Annotated[str, Query(max_length=2000)] = "",
        limit: Annotated[int, Query(ge=1, le=500)] = PAGE,
    ) -> dict[str, Any]:
        """A page of a domain's subscriptions (of one topic when given); ``next`` is
        the cursor of the one after (pubsub's own, passed back as it came)."""
        page = await pubsub_page(
            "/subscriptions", domain, topic=topic, prefix=prefix, after=after or None, limit=limit
        )
        last = page["rows"][-1] if page["more"] else None
        page["next"] = (
            json.dumps([domain, last["topic"], last["subscriber"], last["subscription_id"]])
            if last
            else None
        )
        return page

    @api.get("/access")
    async def access(
        owner: Annotated[str | None, Query(max_length=255)] = None,
    ) -> list[dict[str, Any]]:
        """Every access service's explicit entries (one service per domain)."""
        out = []
        for target in one_per_domain("access"):
            if owner and not owner.endswith(f"@{target.domain}"):
                continue
            rows = await get(target, "/entries", owner=owner)
            out.append({"domain": target.domain, "service": target.name, "entries": rows})
        return out

    @api.get("/presence")
    async def presence() -> list[dict[str, Any]]:
        """Every presence service's entries and operations in progress."""
        out = []
        for target in one_per_domain("presence"):
            entries, operations = await asyncio.gather(
                get(target, "/entries"), get(target, "/operations")
            )
            out.append(
                {
                    "domain": target.domain,
                    "service": target.name,
                    "entries": entries,
                    "operations": operations,
                }
            )
        return out

    return api


__all__ = ["ACTION_HEADER", "views_router"]
