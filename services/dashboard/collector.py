"""What the dashboard shows, read from the services every poll: one JSON-ready state.

Each round reads every service's ``/readyz`` and ``/metrics`` and, through the admin
API with the read token, the relays' ``/info`` and new traced hops, held data, and per
pubsub domain its counts (``/summary``) and the first page of its topics and
subscriptions: what the page draws, never a whole listing, so that watching a mesh of
100,000 topics costs a pubsub pod what 20 rows cost (issue #33). Other pages of a list,
a pod's sessions, access and presence entries are read when a browser asks for them
(:mod:`services.dashboard.views`). Rates are the difference of two rounds' counters
divided by the time between them (the way Prometheus' ``rate()`` does it, over one
interval); the last hour of them is kept in memory for the charts
(:mod:`services.dashboard.history`).
Links come from the relays' own settings (their service addresses and routes), so the
topology drawn is the one configured, not a guess.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
from prometheus_client.parser import text_string_to_metric_families

from apexmesh.ops.adminclient import AdminClient, AdminError
from apexmesh.ops.targets import Context, Target
from services.dashboard.history import RateHistory

#: Counters whose rate each node shows: (family, label filter, what the rate means).
RATES: Final = {
    "relay": (
        ("apexmesh_relay_data_operations", {"result": "accepted"}, "data_per_s"),
        ("apexmesh_relay_deliveries", {}, "deliveries_per_s"),
    ),
    "pubsub": (("apexmesh_pubsub_publications", {}, "publications_per_s"),),
    "access": (("grpc_server_handled", {}, "calls_per_s"),),
    "report": (("apexmesh_report_responses", {}, "reports_per_s"),),
    "presence": (("grpc_server_handled", {}, "calls_per_s"),),
}
#: Traced hops kept for the trace view.
MAX_HOPS: Final = 500
#: Rows of the topics and subscriptions tables read each round (the first page).
FIRST_PAGE: Final = 20
#: Every how many rounds what seldom changes is read again: ``/info`` of services but
#: the relays (whose sessions and drain state the page shows live). Each HTTP call
#: costs a pod about a millisecond of CPU, so a round makes as few as it can: a
#: pubsub pod answers ``/readyz``, ``/metrics`` and one ``/summary`` (issue #33).
SLOW_ROUNDS: Final = 10


def counter_sums(
    text: str, wanted: tuple[tuple[str, dict[str, str], str], ...]
) -> dict[str, float]:
    """The sum of each wanted counter family's samples (with matching labels)."""
    sums = {key: 0.0 for _, _, key in wanted}
    for family in text_string_to_metric_families(text):
        for name, labels, key in wanted:
            if family.name != name:
                continue
            for sample in family.samples:
                if sample.name.endswith("_total") and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    sums[key] += sample.value
    return sums


@dataclass
class _Node:
    target: Target
    ready: bool = False
    reason: str = "not read yet"
    info: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)
    read_at: float = 0.0


class Collector:
    """Polls a context's services and keeps the latest :meth:`state`."""

    def __init__(self, context: Context, poll_seconds: float = 1.0) -> None:
        self.context = context
        self.client = AdminClient(context, timeout=3.0)
        self._probes = httpx.AsyncClient(timeout=3.0)
        self.history = RateHistory(poll_seconds)
        self._nodes = {t.name: _Node(t) for t in context.services}
        self._hops: deque[dict[str, Any]] = deque(maxlen=MAX_HOPS)
        self._hop_cursor: dict[str, str] = {}
        self._topics: list[dict[str, Any]] = []
        self._subscriptions: list[dict[str, Any]] = []
        self._summaries: list[dict[str, Any]] = []
        self._held: list[dict[str, Any]] = []
        self.version = 0
        self.changed = asyncio.Condition()

    async def aclose(self) -> None:
        await self.client.aclose()
        await self._probes.aclose()

    async def poll(self) -> None:
        """One round; wakes the event streams."""
        await asyncio.gather(*(self._read_node(node) for node in self._nodes.values()))
        await asyncio.gather(self._read_pubsub(), self._read_held(), self._read_hops())
        async with self.changed:
            self.version += 1
            self.changed.notify_all()

    async def _probe(self, node: _Node) -> None:
        """Readiness from ``/readyz`` alone (an answer says the process lives)."""
        try:
            answer = await self._probes.get(f"{node.target.admin_url}/readyz")
        except httpx.HTTPError as exc:
            node.ready, node.reason = False, str(exc) or type(exc).__name__
            return
        node.ready = answer.status_code == 200
        node.reason = ""
        if not node.ready:
            try:
                node.reason = str(answer.json().get("reason", "")) or "not ready"
            except ValueError:
                node.reason = answer.text or "not ready"

    async def _read_node(self, node: _Node) -> None:
        await self._probe(node)
        slow = self.version % SLOW_ROUNDS == 0 or not node.info
        if slow or node.target.service == "relay":
            try:
                node.info = await self.client.get(node.target, "/info")
            except AdminError as exc:
                node.reason = node.reason or str(exc)
        text = await self.client.metrics(node.target)
        now = time.monotonic()
        wanted = RATES.get(node.target.service, ())
        counters = counter_sums(text, wanted) if text else {}
        if node.read_at and counters:
            elapsed = max(now - node.read_at, 1e-3)
            node.rates = {
                key: round(max(0.0, value - node.counters.get(key, 0.0)) / elapsed, 2)
                for key, value in counters.items()
            }
            self.history.add(node.target.name, time.time(), node.rates)
        node.counters, node.read_at = counters, now

    def target(self, name: str) -> Target | None:
        node = self._nodes.get(name)
        return None if node is None else node.target

    async def _first(self, service: str) -> list[Target]:
        """One ready target per domain of ``service`` (any pod answers for its domain)."""
        chosen: dict[str, Target] = {}
        for node in self._nodes.values():
            if node.target.service == service and node.ready:
                chosen.setdefault(node.target.domain, node.target)
        return list(chosen.values())

    async def _read_pubsub(self) -> None:
        """Per domain: its counts and the first page of topics and subscriptions."""
        topics: list[dict[str, Any]] = []
        subscriptions: list[dict[str, Any]] = []
        summaries: list[dict[str, Any]] = []
        for target in await self._first("pubsub"):
            try:
                summary = await self.client.get(target, "/summary", first=FIRST_PAGE)
            except AdminError:
                continue
            mine = target.domain
            summaries += [d for d in summary["domains"] if d["domain"] == mine]
            topics += [t for t in summary.get("topics", []) if t["domain"] == mine]
            subscriptions += [t for t in summary.get("subscriptions", []) if t["domain"] == mine]
        self._topics, self._subscriptions = topics, subscriptions
        self._summaries = summaries

    async def _read_held(self) -> None:
        held: list[dict[str, Any]] = []
        for target in await self._first("relay"):
            try:
                held += await self.client.get(target, "/held")
            except AdminError:
                continue
        self._held = held

    async def _read_hops(self) -> None:
        for target in await self._first("relay"):
            key = target.domain
            try:
                hops = await self.client.get(
                    target, "/hops", after=self._hop_cursor.get(key, "-"), limit=200
                )
            except AdminError:
                continue
            for hop in hops:
                self._hops.append(hop)
                self._hop_cursor[key] = hop["id"]

    def _links(self) -> list[dict[str, str]]:
        """Configured links: relay to its services and peers, domain to domain."""
        by_address: dict[str, str] = {}
        mesh_ports: dict[str, str] = {}
        for node in self._nodes.values():
            details = node.info.get("details", {}) if node.info else {}
            port = details.get("grpc_port")
            if port:
                by_address[f"127.0.0.1:{port}"] = node.target.name
            if details.get("mesh_port"):
                mesh_ports[f"127.0.0.1:{details['mesh_port']}"] = node.target.name
        links: list[dict[str, str]] = []
        relays = [n for n in self._nodes.values() if n.target.service == "relay"]
        for node in relays:
            details = node.info.get("details", {}) if node.info else {}
            name = node.target.name
            addresses = [details.get("access", ""), details.get("report", "")]
            addresses += [details.get("presence", "")]
            for pods in (details.get("services") or {}).values():
                addresses += list(pods)
            links.extend(
                {"from": name, "to": by_address[address], "kind": "grpc"}
                for address in dict.fromkeys(a for a in addresses if a)
                if address in by_address
            )
            links.extend(
                {"from": name, "to": other.target.name, "kind": "pod"}
                for other in relays
                if other.target.domain == node.target.domain and name < other.target.name
            )
            for domain, address in (details.get("routes") or {}).items():
                peer = mesh_ports.get(address)
                if peer is not None:
                    links.append({"from": name, "to": peer, "kind": "mesh", "domain": domain})
        return links

    def state(self) -> dict[str, Any]:
        """The latest picture, as the page draws it."""
        nodes = []
        for node in self._nodes.values():
            details = node.info.get("details", {}) if node.info else {}
            nodes.append(
                {
                    "name": node.target.name,
                    "service": node.target.service,
                    "domain": node.target.domain,
                    "ready": node.ready,
                    "reason": node.reason,
                    "rates": node.rates,
                    "sessions": details.get("sessions"),
                    "attachments": details.get("attachments"),
                    "draining": bool(details.get("draining", False)),
                    "uptime_seconds": node.info.get("uptime_seconds") if node.info else None,
                    "details": details,
                }
            )
        return {
            "version": self.version,
            "at": time.time(),
            "context": self.context.name,
            "domains": sorted({n.target.domain for n in self._nodes.values() if n.target.domain}),
            "nodes": nodes,
            "links": self._links(),
            "pubsub": self._summaries,
            "topics": self._topics,
            "subscriptions": self._subscriptions,
            "held": self._held,
            "hops": list(self._hops),
        }


__all__ = ["Collector", "counter_sums"]
