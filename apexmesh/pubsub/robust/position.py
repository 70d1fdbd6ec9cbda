"""Where a subscriber's stub stands on its link, and the ``resume`` that hands it back to
the service (XEP-0040 2.4: "It should be possible for the subscriber to send the link and
source sequence numbers in the initial request").

A subscriber whose process restarts starts a new stub. Without its old position that
stub either expects a fresh link (epoch 1, link seq 0: a running link's numbers look
like old news to it) or starts at whatever it receives first (what was lost meanwhile
stays lost). :class:`LinkPosition` is what a stub has delivered: the link's epoch and the
next link seq it waits for, and the last source seq delivered of each source. The SDK
persists nothing by itself; the application saves :meth:`LinkPosition.to_json` where it
keeps its own state (next to what it did with the publications), and gives it back when
it follows the topic again.

The subscriber then sends ``resume`` with it, to ``apex=pubsub@DOMAIN`` after its
subscribe::

    <resume xmlns='urn:apexmesh:robust-pubsub:1' topic='data.topics' transID='5'
            linkepoch='2' linkseq='57373'>
      <source ns='publisher@fromaplace.net' after='7547392' />
    </resume>

The service keeps the link when it is in that epoch still (the stub's first delivery
then shows what it missed, repaired by link range); otherwise it restarts the link in an
epoch above the one named (XEP example 4: "the link sequence numbers will be reset to
zero"), and the stub repairs by source from the positions it resumed with.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from apexmesh.apex import _dtd
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.beep.xml import Element
from apexmesh.pubsub._fields import naming
from apexmesh.pubsub.elements import check_topic
from apexmesh.pubsub.robust._wire import INVALID, MAX_SOURCES, digits, empty, link_seq, local, root
from apexmesh.pubsub.robust._wire import source_seq as parse_source_seq
from apexmesh.pubsub.robust.seq import MAX_SOURCE_SEQ

#: Highest link epoch (a Redis counter, one per restart of the link).
MAX_EPOCH = 2**53


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkPosition:
    """What a stub has delivered on one topic's link."""

    topic: str
    #: The link's epoch, and the next link seq the stub waits for in it.
    epoch: int
    link_seq: int
    #: The last source seq delivered of each source.
    sources: Mapping[Endpoint, int]
    #: The source of the last publication delivered (a source repair resumes after it).
    last_source: Endpoint | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON object the application stores (and gives back to :meth:`from_json`)."""
        return {
            "topic": self.topic,
            "epoch": self.epoch,
            "linkseq": self.link_seq,
            "sources": {str(source): seq for source, seq in sorted(self.sources.items(), key=str)},
            "last": None if self.last_source is None else str(self.last_source),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> LinkPosition:
        """Read a stored position back; ValueError when it is not one."""
        try:
            sources = {Endpoint.parse(s): int(n) for s, n in dict(value["sources"]).items()}
            last = value.get("last")
            position = cls(
                topic=check_topic(str(value["topic"])),
                epoch=int(value["epoch"]),
                link_seq=int(value["linkseq"]),
                sources=sources,
                last_source=None if last is None else Endpoint.parse(str(last)),
            )
        except (KeyError, TypeError, ValueError, ApexError) as exc:
            raise ValueError(f"not a link position: {exc}") from None
        if not 1 <= position.epoch <= MAX_EPOCH or position.link_seq < 0:
            raise ValueError("not a link position: epoch or link seq out of range")
        if any(not 0 <= n <= MAX_SOURCE_SEQ for n in sources.values()):
            raise ValueError("not a link position: a source seq out of range")
        return position

    @classmethod
    def loads(cls, text: str) -> LinkPosition:
        return cls.from_json(json.loads(text))


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """``resume``: a subscriber's position on its link, sent after its subscribe."""

    topic: str
    trans_id: int
    link_epoch: int
    link_seq: int
    sources: tuple[tuple[Endpoint, int], ...] = ()

    def __post_init__(self) -> None:
        _dtd.check_uniqid(self.trans_id, "resume")
        check_topic(self.topic, trans_id=self.trans_id)
        if not 1 <= self.link_epoch <= MAX_EPOCH:
            _dtd.fail("resume: linkepoch out of range", INVALID, trans_id=self.trans_id)
        if len(self.sources) > MAX_SOURCES:
            _dtd.fail("resume: too many sources", INVALID, trans_id=self.trans_id)

    @classmethod
    def of(cls, position: LinkPosition, trans_id: int) -> Resume:
        """The resume of ``position``: the latest delivered source first (the one a
        source repair resumes after), then the others, :data:`MAX_SOURCES` at most."""
        last = position.last_source
        marks = sorted(position.sources.items(), key=lambda pair: str(pair[0]))
        if last is not None and last in position.sources:
            marks = [(last, position.sources[last]), *[m for m in marks if m[0] != last]]
        return cls(
            topic=position.topic,
            trans_id=trans_id,
            link_epoch=position.epoch,
            link_seq=position.link_seq,
            sources=tuple(marks[:MAX_SOURCES]),
        )

    def to_xml(self) -> bytes:
        body = b"".join(
            f"<source{_dtd.attr('ns', str(src))}{_dtd.attr('after', str(after))} />".encode()
            for src, after in self.sources
        )
        pairs: list[tuple[str, str | None]] = [
            ("topic", self.topic),
            ("transID", str(self.trans_id)),
            ("linkepoch", str(self.link_epoch)),
            ("linkseq", str(self.link_seq)),
        ]
        return root("resume", pairs, body)


def resume_from(element: Element) -> Resume:
    """Parse a ``resume`` element (501 syntax, 553 values, as every robust element)."""
    names = ("topic", "transID", "linkepoch", "linkseq")
    attrs = _dtd.attributes(element, allowed=names, required=names)
    trans_id = _dtd.trans_id(attrs["transID"], "resume")
    with naming(trans_id):
        sources: list[tuple[Endpoint, int]] = []
        for child in _dtd.element_children(element):
            if local(child) != "source":
                _dtd.fail(f"resume: unexpected element {local(child)[:32]!r}")
            child_attrs = _dtd.attributes(child, allowed=("ns", "after"), required=("ns", "after"))
            empty(child, trans_id)
            after = parse_source_seq(child_attrs["after"], None, "after", 0)
            sources.append((_dtd.endpoint(child_attrs["ns"], "resume"), after))
        return Resume(
            topic=check_topic(attrs["topic"]),
            trans_id=trans_id,
            link_epoch=digits(attrs["linkepoch"], "linkepoch", trans_id, MAX_EPOCH, 1),
            link_seq=link_seq(attrs["linkseq"], trans_id, None),
            sources=tuple(sources),
        )


__all__ = ["MAX_EPOCH", "LinkPosition", "Resume", "resume_from"]
