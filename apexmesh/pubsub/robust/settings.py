"""A robust topic's settings: the attributes of its ``createtopic`` (docs/robust.md,
"createtopic: a robust topic").

A topic is robust when created with ``robust='true'``; the other attributes set the link
sequence resolution (XEP-0040 2.2), the retention of its stream (2.3, 2.4: how far back a
gap can be filled), the heartbeat interval (2.5), the publish attribute naming an item
(3.1, last-value images) and the contribution rate (5.2). The service reports them to
source queries (section 4). They travel in the event log as JSON (``TopicSettings``'s
``robust`` key in phase 2).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.robust.seq import Resolution

#: createtopic attributes this module reads.
ATTRIBUTES: Final = (
    "robust",
    "seqbits",
    "retaincount",
    "retainms",
    "heartbeatms",
    "itemheader",
    "contributions",
)

DEFAULT_RETAIN_COUNT: Final = 100_000
DEFAULT_RETAIN_MS: Final = 86_400_000
DEFAULT_HEARTBEAT_MS: Final = 5_000
#: Bounds: a stream of ten million publications of a few hundred octets is a few GB of
#: Redis, the most a topic should hold; a month is the longest outage worth repairing.
MAX_RETAIN_COUNT: Final = 10_000_000
MIN_RETAIN_MS: Final = 1_000
MAX_RETAIN_MS: Final = 30 * 86_400_000
#: Heartbeats faster than 100 ms cost more than the data on idle topics; slower than an
#: hour detect nothing in time.
MIN_HEARTBEAT_MS: Final = 100
MAX_HEARTBEAT_MS: Final = 3_600_000
#: The publish attribute naming the item when the topic does not say.
DEFAULT_ITEM_HEADER: Final = "item"
MAX_CONTRIBUTION_RATE: Final = 100_000

_DIGITS: Final = re.compile(r"[0-9]{1,12}")
_RATE: Final = re.compile(r"([0-9]{1,6})/([0-9]{1,6})")
_HEADER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ContributionRate:
    """Contributions per second per contributor, and the burst allowed (XEP 5.2
    "flow control/throttling")."""

    per_second: int
    burst: int

    def __str__(self) -> str:
        return f"{self.per_second}/{self.burst}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RobustSettings:
    """The robust part of a topic (a topic without it is best effort)."""

    resolution: Resolution = Resolution.BITS32
    retain_count: int = DEFAULT_RETAIN_COUNT
    retain_ms: int = DEFAULT_RETAIN_MS
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS
    item_header: str = DEFAULT_ITEM_HEADER
    #: None: contributions are not accepted.
    contributions: ContributionRate | None = None

    def __post_init__(self) -> None:
        bad = ApexReplyCode.PARAMETER_INVALID
        if not 1 <= self.retain_count <= MAX_RETAIN_COUNT:
            _dtd.fail(f"retaincount {self.retain_count} out of 1..{MAX_RETAIN_COUNT}", bad)
        if not MIN_RETAIN_MS <= self.retain_ms <= MAX_RETAIN_MS:
            _dtd.fail(f"retainms {self.retain_ms} out of range", bad)
        if not MIN_HEARTBEAT_MS <= self.heartbeat_ms <= MAX_HEARTBEAT_MS:
            _dtd.fail(f"heartbeatms {self.heartbeat_ms} out of range", bad)
        if not _HEADER.fullmatch(self.item_header):
            _dtd.fail(f"itemheader {self.item_header[:32]!r} is not a name", bad)
        rate = self.contributions
        if rate is not None and not (
            1 <= rate.per_second <= MAX_CONTRIBUTION_RATE
            and 1 <= rate.burst <= MAX_CONTRIBUTION_RATE
        ):
            _dtd.fail(f"contributions {rate} out of range", bad)

    def to_attributes(self) -> dict[str, str]:
        """The createtopic attributes that make this topic (defaults included)."""
        out = {
            "robust": "true",
            "seqbits": str(int(self.resolution)),
            "retaincount": str(self.retain_count),
            "retainms": str(self.retain_ms),
            "heartbeatms": str(self.heartbeat_ms),
            "itemheader": self.item_header,
        }
        if self.contributions is not None:
            out["contributions"] = str(self.contributions)
        return out

    def to_json(self) -> dict[str, Any]:
        """The event log's form (a JSON object, one key per attribute)."""
        return dict(self.to_attributes())

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> RobustSettings:
        """Read :meth:`to_json`'s form back; ValueError (an ApexError) if it is not."""
        settings = settings_from_attributes({str(k): str(v) for k, v in value.items()})
        if settings is None:
            raise ValueError("not robust settings")
        return settings

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


def _number(attrs: Mapping[str, str], name: str, default: int, trans_id: int | None) -> int:
    value = attrs.get(name)
    if value is None:
        return default
    if not _DIGITS.fullmatch(value):
        _dtd.fail(f"createtopic: {name} {value[:16]!r} is not a number", trans_id=trans_id)
    return int(value)


def settings_from_attributes(
    attrs: Mapping[str, str], *, trans_id: int | None = None
) -> RobustSettings | None:
    """The robust settings a createtopic's attributes give; None when ``robust`` is
    absent (any other robust attribute without it is 501). ``robust`` other than
    ``true`` or a malformed number is 501; a value out of range 553."""
    given = [name for name in ATTRIBUTES if name in attrs]
    if "robust" not in attrs:
        if given:
            _dtd.fail(f"createtopic: {given[0]} without robust='true'", trans_id=trans_id)
        return None
    if attrs["robust"] != "true":
        _dtd.fail("createtopic: robust must be 'true'", trans_id=trans_id)
    bits = _number(attrs, "seqbits", int(Resolution.BITS32), trans_id)
    try:
        resolution = Resolution(bits)
    except ValueError:
        _dtd.fail(
            f"createtopic: seqbits {bits} is not 16, 32 or 64",
            ApexReplyCode.PARAMETER_INVALID,
            trans_id=trans_id,
        )
    contributions = None
    if "contributions" in attrs:
        match = _RATE.fullmatch(attrs["contributions"])
        if match is None:
            _dtd.fail("createtopic: contributions is not RATE/BURST", trans_id=trans_id)
        contributions = ContributionRate(per_second=int(match.group(1)), burst=int(match.group(2)))
    try:
        return RobustSettings(
            resolution=resolution,
            retain_count=_number(attrs, "retaincount", DEFAULT_RETAIN_COUNT, trans_id),
            retain_ms=_number(attrs, "retainms", DEFAULT_RETAIN_MS, trans_id),
            heartbeat_ms=_number(attrs, "heartbeatms", DEFAULT_HEARTBEAT_MS, trans_id),
            item_header=attrs.get("itemheader", DEFAULT_ITEM_HEADER),
            contributions=contributions,
        )
    except ApexError as exc:
        exc.trans_id = trans_id
        raise


__all__ = [
    "ATTRIBUTES",
    "DEFAULT_HEARTBEAT_MS",
    "DEFAULT_ITEM_HEADER",
    "DEFAULT_RETAIN_COUNT",
    "DEFAULT_RETAIN_MS",
    "ContributionRate",
    "RobustSettings",
    "settings_from_attributes",
]
