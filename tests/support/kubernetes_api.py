"""kmock's Kubernetes emulator, plus the one API rule leader election relies on.

``kmock.KubernetesEmulator`` (shared/ECOSYSTEM.md section 3) stores objects and answers
GET, POST, PATCH and DELETE over real HTTP, but answers a PUT (the client's
``replace_namespaced_*``) with 404 and keeps no ``resourceVersion``. This subclass adds
both, as the API server does them: every write stamps a new ``metadata.resourceVersion``;
a PUT replaces the whole object, 404 when it does not exist, 409 when the body carries a
``resourceVersion`` other than the stored one (the optimistic concurrency that makes two
pods racing for one Lease end with exactly one winner).

Use it with ``@pytest.mark.kmock(cls=KubernetesAPI)``.
"""

from __future__ import annotations

import itertools
from typing import Any

import aiohttp.web
import kmock
from kmock._internal import enums, k8s, rendering


class KubernetesAPI(kmock.KubernetesEmulator):  # type: ignore[misc]
    """The emulator with PUT and resourceVersion (see the module docstring)."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._versions = itertools.count(1)

    def _stamp(self, data: dict[str, Any]) -> None:
        data.setdefault("metadata", {})["resourceVersion"] = str(next(self._versions))

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if request.resource is None:
            return await super()._handle(request)
        if request.method == enums.method.PUT and request.name is not None:
            return await self._replace(request)
        if request.action == enums.action.CREATE and isinstance(request.data, dict):
            self._stamp(request.data)
        return await super()._handle(request)

    async def _replace(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        key = (request.resource, request.namespace, request.name)
        async with self._lock:
            # ObjectsArray has no get(); it is a mapping by (resource, namespace, name)
            stored = self._objects[key] if key in self._objects else None  # noqa: SIM401
            if stored is None or stored.deleted:
                return await self._render_error(k8s.KubernetesObjectNotFoundError())
            body = dict(request.data)
            wanted = body.get("metadata", {}).get("resourceVersion")
            current = stored.get("metadata", {}).get("resourceVersion")
            if wanted is not None and wanted != current:
                return await self._render_error(k8s.KubernetesObjectConflictError())
            self._stamp(body)
            stored.delete()
            stored.create(body)
            raw = stored.raw
        return aiohttp.web.json_response(raw)


__all__ = ["KubernetesAPI"]
