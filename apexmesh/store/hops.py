"""Traced hops: where each data with a ``statusRequest`` went, for ``apexctl trace`` and
the dashboard's trace view.

A relay pod that concludes a data carrying a statusRequest (RFC 3340 section 5.1)
appends one :class:`Hop` to a capped Redis stream (:meth:`Keys.ops_hops`): which pod,
when the data arrived and from where (an endpoint, another domain's relay, a service),
and per recipient its reply code and route (this pod, another pod, another domain, a
service). The statusRequest's ``transID`` and the originator name the trace, as they
name the statusResponse the originator gets: an operator who sent the data, or holds
its report, finds every hop of every domain's relays with the same pair.

The stream is capped at about :data:`MAX_HOPS` entries (XADD MAXLEN ~), so tracing
costs bounded memory whatever the traffic.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from redis.asyncio import Redis

from apexmesh.store.keys import Keys

#: About how many hops the stream keeps (the oldest go first).
MAX_HOPS: Final = 10_000
#: Each of the two numbers of a stream id is a 64-bit unsigned integer.
_MAX_ID_PART: Final = 2**64 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class HopOutcome:
    """One recipient's fate at one relay pod."""

    recipient: str
    code: int
    text: str = ""
    #: ``local POD``, ``pod POD``, ``mesh DOMAIN``, ``service NAME``, ``held`` or ``none``.
    route: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Hop:
    """One relay pod's part in one data's journey."""

    originator: str
    #: The statusRequest transIDs the data carried (usually one).
    trans_ids: tuple[int, ...]
    pod: str
    domain: str
    #: ``edge`` (an endpoint), ``mesh`` (another domain's relay), ``service``.
    origin: str
    #: When the pod received the data and when it knew every outcome (ms since epoch).
    received_ms: int
    concluded_ms: int
    cid: str = ""
    outcomes: tuple[HopOutcome, ...] = ()
    #: Domains whose apex=report this pod asked to send a statusResponse.
    reported_by: tuple[str, ...] = ()
    #: The stream entry id (set when read).
    id: str = field(default="", compare=False)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _hop(entry_id: object, fields: Mapping[Any, Any] | None) -> Hop | None:
    values = {_text(k): _text(v) for k, v in (fields or {}).items()}
    try:
        body = json.loads(values["hop"])
        return Hop(
            originator=str(body["originator"]),
            trans_ids=tuple(int(t) for t in body["trans_ids"]),
            pod=str(body["pod"]),
            domain=str(body["domain"]),
            origin=str(body["origin"]),
            received_ms=int(body["received_ms"]),
            concluded_ms=int(body["concluded_ms"]),
            cid=str(body.get("cid", "")),
            outcomes=tuple(HopOutcome(**o) for o in body.get("outcomes", ())),
            reported_by=tuple(str(d) for d in body.get("reported_by", ())),
            id=_text(entry_id),
        )
    except (KeyError, TypeError, ValueError):
        return None  # never written by this module: skipped


class HopLog:
    """The traced hops of one deployment (one key prefix)."""

    def __init__(self, redis: Redis, keys: Keys, *, max_hops: int = MAX_HOPS) -> None:
        self._redis = redis
        self._key = keys.ops_hops()
        self._max = max_hops

    async def record(self, hop: Hop) -> str:
        """Append ``hop``; returns its stream id."""
        body = hop.to_json()
        body.pop("id")
        entry = await self._redis.xadd(
            self._key, {"hop": json.dumps(body)}, maxlen=self._max, approximate=True
        )
        return _text(entry)

    async def read(
        self,
        *,
        after: str = "-",
        limit: int = 500,
        originator: str | None = None,
        trans_id: int | None = None,
    ) -> list[Hop]:
        """Hops newer than the stream id ``after`` (all with ``-``), oldest first, at
        most ``limit``, only those of ``originator`` / ``trans_id`` when given.
        ValueError when ``after`` is not a stream id."""
        if after != "-":
            ms, _, seq = after.partition("-")
            parts = (int(ms), int(seq or "0"))
            if max(parts) > _MAX_ID_PART:
                raise ValueError(f"{after!r} is not a stream id")
            if parts == (_MAX_ID_PART, _MAX_ID_PART):
                return []  # nothing can come after the last possible id
        start = after if after == "-" else f"({after}"
        entries = await self._redis.xrange(self._key, min=start, max="+", count=limit * 4)
        hops: list[Hop] = []
        for entry_id, fields in entries or ():
            hop = _hop(entry_id, fields)
            if hop is None:
                continue
            if originator is not None and hop.originator.lower() != originator.lower():
                continue
            if trans_id is not None and trans_id not in hop.trans_ids:
                continue
            hops.append(hop)
            if len(hops) >= limit:
                break
        return hops


__all__ = ["MAX_HOPS", "Hop", "HopLog", "HopOutcome"]
